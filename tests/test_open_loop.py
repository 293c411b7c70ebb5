"""`sim evaluate --trace FILE.csv`: a policy scored on a request trace open-loop, in virtual time
(simulator/open_loop.py)."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from spectower.control import speedup, warm_start
from spectower.control.policy import make_policy
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import evaluate_open_loop, simulate_open_loop
from spectower.simulator.profile import Profile, parse_profile
from spectower.storage.request_traces import Arrival, Slo, load_request_trace, schedule

from benchmarks.simulator_process import H100, curve_profile
from tests.conftest import REPO_ROOT, cli_in_process

AZURE = REPO_ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv_first30min.csv"
# Drafting doubles a lone request's speed and loses past 4 running: always-on is the slower server under
# a queue, always-off the slower one when requests come one at a time.
LATE_LOSER = curve_profile(
    "late-loser", [1, 2, 4, 8],
    {"spec_on": [200.0, 360.0, 400.0, 440.0], "spec_off": [100.0, 200.0, 400.0, 800.0]},
    max_running_requests=8, gpus=H100, prefill_tok_s=50000.0,
    description="test profile: speculation pays at 1-2 running, loses from 4",
)  # fmt: skip


def _profile(**changes: Any) -> Profile:
    return parse_profile({**LATE_LOSER, **changes}, source="late-loser")


def _run(profile: Profile, arrivals: list[Arrival], policy: str, **kw: Any) -> Any:
    """No exploration, and the knob where the policy keeps it from the start (a server launched with it)."""
    policy_obj = make_policy(policy, profile.max_running_requests)
    config = HarnessConfig(explore_share=0.0, initial_max_bs=0 if policy == "always-off" else None)
    return simulate_open_loop(profile, arrivals, policy_obj, trace_name="t", config=config, **kw)


def test_requests_wait_their_turn_behind_max_running_requests() -> None:
    # one request at a time; 1000-token prompts prefill in 0.02 s, 11 output tokens (10 decoded at 100 tok/s)
    prof = _profile(max_running_requests=1)
    arrivals = [Arrival(0.0, 1000, 11, 1), Arrival(0.0, 1000, 11, 2), Arrival(5.0, 1000, 11, 3)]
    res = _run(prof, arrivals, "always-off")
    first, second, third = res.outcomes
    assert first.ttft_s == pytest.approx(0.02, abs=1e-6) and first.e2e_s == pytest.approx(0.12, abs=1e-6)
    # the second waits for the first to finish (at most one tick of 0.05 s late to be admitted)
    assert 0.12 + 0.02 <= (second.ttft_s or 0) <= 0.12 + 0.02 + 0.05 + 1e-6
    assert third.ttft_s == pytest.approx(0.02, abs=1e-6)  # it came to an idle server
    assert res.tokens == pytest.approx(33) and res.undrained == 0


def test_arrivals_faster_than_the_server_grow_a_queue_a_closed_loop_never_sees() -> None:
    # five times the test profile: about 3 requests/s of the trace's lengths leave it idle most of the time
    prof = _profile(
        output_tok_s={mode: [5 * v for v in rates] for mode, rates in LATE_LOSER["output_tok_s"].items()}
    )
    trace = load_request_trace(str(AZURE))
    slow = _run(prof, schedule(trace, speedup=1.0, duration_s=60.0), "always-off").figures()
    # the same first minute in 6 s: the same requests, far more at once than 8 can run
    fast = _run(prof, schedule(trace, speedup=10.0, duration_s=6.0), "always-off").figures()
    assert slow["requests"] == fast["requests"] > 150
    assert fast["ttft_p99_s"] > 10 * slow["ttft_p99_s"]
    assert fast["e2e_p50_s"] > 3 * slow["e2e_p50_s"]


def test_never_drafting_and_always_drafting_serve_the_same_tokens_at_different_latency() -> None:
    prof = _profile()
    arrivals = schedule(load_request_trace(str(AZURE)), speedup=2.0, duration_s=60.0)
    on = _run(prof, arrivals, "always-on")
    off = _run(prof, arrivals, "always-off")
    served = sum(a.output_tokens for a in arrivals)
    assert on.undrained == off.undrained == 0
    assert on.tokens == pytest.approx(served) and off.tokens == pytest.approx(served)
    on_fig, off_fig = on.figures(), off.figures()
    assert on_fig["output_tokens"] == off_fig["output_tokens"] == served
    # under this load the queue holds 8: drafting (440 tok/s there) is the slower server, by far
    assert on_fig["e2e_p50_s"] > 1.5 * off_fig["e2e_p50_s"]
    assert on_fig["ttft_p99_s"] > off_fig["ttft_p99_s"]
    assert on_fig["goodput_rps"] < off_fig["goodput_rps"]


def test_one_request_at_a_time_favours_drafting() -> None:
    prof = _profile()
    arrivals = [Arrival(float(10 * i), 100, 101, i + 1) for i in range(10)]  # one alone every 10 s
    on = _run(prof, arrivals, "always-on").figures()
    off = _run(prof, arrivals, "always-off").figures()
    assert on["e2e_p50_s"] == pytest.approx(0.002 + 100 / 200, abs=1e-3)
    assert off["e2e_p50_s"] == pytest.approx(0.002 + 100 / 100, abs=1e-3)
    slo = Slo(ttft_s=1.0, itl_s=0.008)  # 5 ms a token drafted, 10 ms gated
    assert _run(prof, arrivals, "always-on", slo=slo).figures()["slo_met"] == 10
    assert _run(prof, arrivals, "always-off", slo=slo).figures()["slo_met"] == 0


def test_evaluate_scores_the_policy_beside_every_baseline_and_the_oracle() -> None:
    trace = load_request_trace(str(AZURE))
    out = evaluate_open_loop(_profile(), trace, "learn", speedup=2.0, duration_s=60.0, seed=1)
    assert out["loop"] == "open" and out["policy"] == "learn" and out["arrivals"] == out["requests"]
    assert set(out["baselines"]) == {"always-on", "always-off", "threshold:30", "sglang-default", "oracle"}
    tokens = {b["tokens"] for b in out["baselines"].values()} | {out["tokens"]}
    assert max(tokens) - min(tokens) < 1  # every policy serves the same tokens once the queue drains
    best = max(b["goodput_rps"] for name, b in out["baselines"].items() if name != "oracle")
    assert out["goodput_vs_best_baseline"] == pytest.approx(
        out["goodput_rps"] / max(best, out["goodput_rps"])
    )
    assert out["baselines"]["always-off"]["goodput_rps"] > out["baselines"]["always-on"]["goodput_rps"]


# ---- the command line -------------------------------------------------------------------------------
def _evaluate(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_in_process("sim", "evaluate", *args)


def _slice(tmp_path: Path, rows: int) -> Path:
    lines = AZURE.read_text().splitlines()[: rows + 1]
    path = tmp_path / "slice.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_json_carries_goodput_and_latency_beside_the_closed_loop_fields(tmp_path: Path) -> None:
    profile = tmp_path / "late-loser.json"
    profile.write_text(json.dumps(LATE_LOSER))
    run = _evaluate(
        "--profile",
        str(profile),
        "--trace",
        str(_slice(tmp_path, 300)),
        "--policy",
        "learn",
        "--speedup",
        "2",
        "--rate-scale",
        "0.8",
        "--slo",
        "ttft=1s,itl=50ms",
        "--json",
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    for key in (
        "goodput_rps",
        "ttft_p99_s",
        "e2e_p50_s",
        "e2e_p99_s",
        "tokens",
        "flips",
        "decisions",
        "spec_on_fraction",
        "final_max_bs",
        "baselines",
    ):
        assert key in out, key
    assert out["slo"] == {"ttft_s": 1.0, "itl_s": 0.05, "e2e_s": None}
    assert out["speedup"] == 2.0 and out["rate_scale"] == 0.8 and 200 < out["arrivals"] < 280
    assert out["e2e_p99_s"] >= out["e2e_p50_s"] > 0 and out["goodput_rps"] > 0


def test_table_and_bad_input(tmp_path: Path) -> None:
    run = _evaluate(
        "--profile", "llama31-8b-1x-h100", "--trace", str(_slice(tmp_path, 100)), "--policy", "always-on"
    )
    assert run.returncode == 0, run.stderr
    assert "goodput req/s" in run.stdout and "oracle" in run.stdout and "always-off" in run.stdout
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,10,lots\n")
    run = _evaluate("--profile", "llama31-8b-1x-h100", "--trace", str(bad))
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"error: {bad}: row 2, column GeneratedTokens: expected a whole number, got 'lots'"
    )
    run = _evaluate("--profile", "llama31-8b-1x-h100", "--trace", "day", "--speedup", "2")
    assert run.returncode == 2 and run.stderr.strip().startswith("error: --speedup / --rate-scale: only for")


# The fixed-share 0.5 pair's closed-loop curves with the early pair's open-loop costs
# (data/profiles/README.md): the simulator's prediction for the H200 replay of issue #32 item 6, not run yet.
PAIR_AZURE_GUESS = REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton-azure-guess.json"


def _replay_pair(rate_scale: float, policy: str, config: HarnessConfig,
                 moves: list[tuple[float, int]] | None = None, **options: Any) -> Any:  # fmt: skip
    """The replay on the pair's guessed profile; ``moves`` (if given) collects (time, ceiling) per set."""
    profile = parse_profile(json.loads(PAIR_AZURE_GUESS.read_text()), source="guess")
    arrivals = schedule(load_request_trace(AZURE), 3.0, rate_scale, 0, 270.0)
    policy_obj = make_policy(policy, profile.max_running_requests, **options)
    decide = policy_obj.decide

    def recorded(obs: Any) -> Any:
        decision = decide(obs)
        if moves is not None and decision.max_bs is not None:
            moves.append((obs.ts, decision.max_bs))
        return decision

    policy_obj.decide = recorded  # type: ignore[method-assign]
    return simulate_open_loop(profile, arrivals, policy_obj, trace_name="azure", config=config)


def test_at_rate_scale_two_the_pair_drowns_under_azure_whatever_the_policy() -> None:
    """The notebook once planned this pair's replay at rate scale 2 (about 29 requests/s at speedup 3):
    with Azure's prompts (median ~1 000 tokens) even a server that never drafts queues hundreds of requests,
    so every policy would miss the SLO and the run would compare queues, not policies. The plan is 0.75."""
    off = _replay_pair(2.0, "always-off", HarnessConfig(explore_share=0.0, initial_max_bs=0))
    assert off.peak_in_flight > 10 * 64 and off.figures()["ttft_p99_s"] > 60.0


def test_learn_warm_at_the_sweeps_crossover_falls_to_the_replays_and_keeps_always_offs_latency() -> None:
    """The pair's closed-loop sweep (64-token prompts) crosses over near 47; under Azure's long prompts a
    drafted step costs 2.5-4.5x a gated one from bin 12 up (the early pair's replay), so drafting loses from
    about 16. Warm at 48 (the sweep's crossover), learn leaves it as soon as its counters are decisive (50 s:
    bin 48 loses) and is below 24 within two minutes (its dwell 60 s, as the GPU runs set it), keeping always
    off's goodput (>= 0.98 asked) and its p99 TTFT within 10 %; threshold:47, which keeps drafting where it
    loses, stretches the median e2e latency."""
    off = _replay_pair(0.75, "always-off", HarnessConfig(explore_share=0.0, initial_max_bs=0)).figures()
    warm, moves = HarnessConfig(initial_max_bs=48), []
    learn = _replay_pair(0.75, "learn", warm, moves, initial_ceiling=48, min_dwell_s=60.0)
    threshold = _replay_pair(0.75, "threshold:47", HarnessConfig(initial_max_bs=48)).figures()
    assert learn.flips <= 2 and learn.final_max_bs < 24
    # the warm start (already the knob: a hold) yields to decisive counters before its dwell; later moves wait
    assert moves and moves[0][0] < 60.0
    assert all(b[0] - a[0] >= 60.0 for a, b in itertools.pairwise(moves))
    got = learn.figures()
    assert got["goodput_rps"] >= 0.98 * off["goodput_rps"]
    assert got["ttft_p99_s"] <= 1.10 * off["ttft_p99_s"]
    assert got["e2e_p50_s"] < 1.2 * off["e2e_p50_s"] < threshold["e2e_p50_s"]


def test_near_capacity_an_exploring_part_cannot_queue_a_hundred_requests_behind_it() -> None:
    """At rate scale 1 the pair runs near capacity (always off peaks at 70 in flight, 64 running). Under
    threshold:16 the windows' stream limit doubles up to the load (plugin 0.4.3), and an exploring part of
    328 drafted batches at 4.5x a gated step's cost ran 24 s at half speed: 189 in flight, a p99 TTFT of
    8.4 s against always off's 0.22 s. A part now ends after WINDOW_EXPLORE_MAX_S busy seconds (0.4.4)."""
    off = _replay_pair(1.0, "always-off", HarnessConfig(explore_share=0.0, initial_max_bs=0))
    threshold = _replay_pair(1.0, "threshold:16", HarnessConfig(initial_max_bs=16))
    assert threshold.peak_in_flight < 1.2 * off.peak_in_flight
    assert threshold.figures()["ttft_p99_s"] < 1.5 * off.figures()["ttft_p99_s"]
    assert threshold.figures()["goodput_rps"] >= 0.99 * off.figures()["goodput_rps"]


# The same pair with open-loop constants fitted to its own H200 replay (data/profiles/README.md).
PAIR_CALIBRATED = REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton.json"


def test_the_servers_own_counters_warm_learn_nearer_what_pays_under_azure_than_the_sweep() -> None:
    """On the H200 the pair's learn started at the sweep's 48 and held 24 through the replay (its interval
    allowed it), drafting bins 17-24 at 0.94x. Had the collector stored this server's counters from 240 s
    of the same traffic under threshold:47 (the GPU run's other launch), the warm start reads them as learn
    reads its own (control/warm_start.py ``from_counters``, the knob of 47 stored beside them): at most 24
    (16 here). Learn started there ends at 16 or below and serves a lower median end-to-end latency than
    learn started at the sweep's 48, with the same goodput. Started at 48 it comes down too (to 32 here, 8-32
    over seeds), now that it weighs a bin by what drafting it served (the drain below the ceiling included,
    ``learn_counters.as_choices``); before, it stayed above 16 for the 240 s."""
    profile = parse_profile(json.loads(PAIR_CALIBRATED.read_text()), source="calibrated")
    arrivals = schedule(load_request_trace(AZURE), 3.0, 0.75, 0, 240.0)
    mrr = profile.max_running_requests
    history = make_policy("threshold:47", mrr)
    snapshots: list[tuple[float, dict[str, Any]]] = []
    decide = history.decide

    def keep(obs: Any) -> Any:  # the collector's job: a counters snapshot every 5 s
        if obs.counters is not None and (not snapshots or obs.ts - snapshots[-1][0] >= 5.0):
            snapshots.append((obs.ts, dict(obs.counters)))
        return decide(obs)

    history.decide = keep  # type: ignore[method-assign]
    config = HarnessConfig(initial_max_bs=47)
    before = simulate_open_loop(profile, arrivals, history, trace_name="azure", config=config)
    intervals = speedup.intervals_from_snapshots(snapshots)
    # the knob the collector stores beside each interval: threshold:47's
    warm = warm_start.from_counters(intervals, mrr, ceilings=[47] * len(intervals))
    assert warm is not None and warm.ceiling is not None and 8 <= warm.ceiling <= 24, warm

    def learn_from(ceiling: int) -> Any:
        policy = make_policy("learn", mrr, initial_ceiling=ceiling, min_dwell_s=60.0)
        config = HarnessConfig(initial_max_bs=before.final_max_bs)
        return simulate_open_loop(profile, arrivals, policy, trace_name="azure", config=config)

    own, sweep = learn_from(warm.ceiling), learn_from(48)
    # started at 48 it comes down too; where to is chance: the estimate's interval is wide, and over seeds
    # 0-5 of these arrivals it ended at 8-32, with the draft's prefill skipped or kept (2026-12-05)
    assert own.final_max_bs <= 16 and sweep.final_max_bs < 48, (own.final_max_bs, sweep.final_max_bs)
    got, then = own.figures(), sweep.figures()
    assert got["goodput_rps"] >= 0.99 * then["goodput_rps"]
    assert got["e2e_p50_s"] < 0.97 * then["e2e_p50_s"]
