"""learn's warm start (control/warm_start.py, control/policy/learn.py): the newest stored sweep of the
server's stack gives the ceiling learn starts at; in the simulator harness a fresh start on a stack whose
sweep says 16 goes to 16 at its first decision and never drafts above it during its first dwell. Virtual
time: exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spectower.control import warm_start
from spectower.control.policy import Observation, PolicyError, make_policy
from spectower.simulator.harness import HarnessConfig, simulate
from spectower.simulator.profile import load_profile
from spectower.simulator.traces import parse_trace
from spectower.storage.models import BenchRun

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"  # crossover near 15, max_running_requests 64
INFO = {"model_path": "zai/GLM-5-NVFP4", "speculative_draft_model_path": "zai/GLM-5-EAGLE3",
        "version": "0.5.9"}  # fmt: skip
OTHER_VERSION = {**INFO, "version": "0.5.17"}
H200 = [{"name": "NVIDIA H200"}]
GPUS = [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}] * 8
SERVER = warm_start.Stack.of(INFO, GPUS)
DWELL_S = 300.0  # learn's default min_dwell_s


def sweep(
    run_id: int,
    crossover: float | None,
    *,
    status: str = "found",
    created_at: float = 1000.0,
    info: dict[str, Any] | None = None,
    gpus: list[dict[str, Any]] | None = GPUS,
) -> BenchRun:
    """A run as collectors/bench/persist.py stores a sweep: /server_info, GPU inventory, the crossover."""
    return BenchRun(
        id=run_id, created_at=created_at, source="sweep", tag=f"run{run_id}",
        server_info_json=json.dumps(info or INFO), params_json=json.dumps({"crossover_status": status}),
        gpu_inventory_json=json.dumps(gpus) if gpus is not None else None,
        crossover=crossover, crossover_lo=None if crossover is None else crossover - 3,
        crossover_hi=None if crossover is None else crossover + 4,
    )  # fmt: skip


def known(*runs: BenchRun) -> list[warm_start.Known]:
    return [k for k in map(warm_start.known_from_run, runs) if k is not None]


def test_the_newest_matching_sweep_wins_and_a_newer_other_stack_is_ignored() -> None:
    other_draft = sweep(3, 4.0, created_at=3000.0, info={**INFO, "speculative_draft_model_path": "my/draft"})
    other_gpu = sweep(4, 40.0, created_at=4000.0, gpus=H200)
    older = sweep(1, 30.0, created_at=1000.0)
    newest_match = sweep(2, 16.0, created_at=2000.0)
    warm = warm_start.choose(SERVER, known(older, newest_match, other_draft, other_gpu), 64)
    assert warm.ceiling == 16
    assert warm.line.startswith("warm start: sweep #2 'run2' of ")
    # on the counters' bins, as learn keeps its ceilings: 17.8 -> 16 (bins ... 12, 16, 24 ...)
    assert warm_start.choose(SERVER, known(sweep(5, 17.8)), 64).ceiling == 16
    assert "crossover 16.0 (13.0-20.0); learn starts at ceiling 16" in warm.line
    assert "8x NVIDIA RTX PRO 6000" in warm.line and "GPUs not compared" not in warm.line


def test_nothing_matching_says_so_and_what_differed() -> None:
    runs = known(sweep(1, 16.0, info=OTHER_VERSION), sweep(2, 8.0, created_at=2000.0, gpus=H200))
    warm = warm_start.choose(SERVER, runs, 64)
    assert warm.ceiling is None
    assert warm.line.startswith("warm start: nothing known for this stack (model zai/GLM-5-NVFP4, ")
    assert "2 stored sweep(s)/profile(s) checked, none matched" in warm.line
    assert "the newest, sweep #2 'run2' of 1970-01-01 00:33 UTC, differs: 1x NVIDIA H200" in warm.line
    assert warm.line.endswith("learn starts from the ceiling the server holds now")
    empty = warm_start.choose(SERVER, [], 64)
    assert empty.ceiling is None and "no stored sweep or measured profile has a crossover" in empty.line


def test_a_crossover_inside_a_bin_drafts_the_bin_when_most_of_its_batch_sizes_pay() -> None:
    # the counters' bin 48 counts batches 33-48: the triton pair's sweep crossover of 46.3 (2026-12-01) lies
    # past its middle, so the bin drafts (the largest bin below it, 32, would gate 33-46, where drafting pays)
    bins = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    assert warm_start.ceiling_at_crossover(46.3, bins) == 48
    assert warm_start.ceiling_at_crossover(40.4, bins) == 32  # short of bin 48's middle, 40.5
    assert warm_start.ceiling_at_crossover(40.5, bins) == 48
    assert warm_start.ceiling_at_crossover(17.8, bins) == 16  # bin 24 counts 17-24
    assert warm_start.ceiling_at_crossover(0.9, bins) == 0
    assert warm_start.ceiling_at_crossover(1.0, bins) == 1
    assert warm_start.ceiling_at_crossover(500.0, bins) == 64
    assert warm_start.choose(SERVER, known(sweep(5, 46.3)), 64).ceiling == 48


def test_statuses_map_to_every_bin_or_none_and_unknown_gpus_are_said() -> None:
    always = warm_start.choose(SERVER, known(sweep(1, None, status="none_in_range")), 48)
    assert always.ceiling == 48 and "drafting paid at every level measured" in always.line
    never = warm_start.choose(SERVER, known(sweep(1, None, status="below_range")), 48)
    assert never.ceiling == 0
    blind = warm_start.choose(warm_start.Stack.of(INFO, None), known(sweep(1, 16.0)), 64)
    assert blind.ceiling == 16
    assert "GPUs not compared: the server's are unknown (give --gpu-metrics)" in blind.line
    # a run without a crossover, or without a /server_info, is nothing known
    assert known(sweep(1, None, status="unknown"), BenchRun(id=9, created_at=1.0, source="import:x")) == []
    # a server that does not say its model matches nothing
    anonymous = warm_start.Stack.of({"version": "0.5.9"}, GPUS)
    assert warm_start.choose(anonymous, known(sweep(1, 16.0)), 64).ceiling is None


def test_a_measured_profile_carries_its_stack() -> None:
    doc = {**INFO, "sglang_version": INFO["version"], "measured_at": 5000.0,
           "gpus": {"count": 8, "name": GPUS[0]["name"]}}  # fmt: skip
    doc.pop("version")
    profile = warm_start.known_from_profile(doc, "p.json", "found", 12.5)
    warm = warm_start.choose(SERVER, [*known(sweep(1, 16.0)), profile], 64)
    assert warm.ceiling == 12 and warm.line.startswith("warm start: profile p.json matches this stack")
    shipped = load_profile(PROFILE).raw  # no identity keys: matches no server
    assert warm_start.known_from_profile(shipped, PROFILE, "found", 15.0).stack.model is None


def test_learn_refuses_a_bad_initial_ceiling() -> None:
    for bad in (-1, 2.5, True, "16"):
        with pytest.raises(PolicyError, match="initial_ceiling"):
            make_policy("learn", 64, initial_ceiling=bad)


def _knob_in_first_dwell(timeline: list[dict[str, Any]], start: float) -> list[int]:
    return [row["knob"] for row in timeline if start < row["t"] <= start + DWELL_S]


def test_in_the_harness_a_warm_start_at_16_never_drafts_above_16_in_its_first_dwell() -> None:
    """48 requests on GLM-5: drafting loses there. The stored sweep says 16; learn moves there at its first
    decision and holds it for the whole dwell (decisions every 5 s, the knob applied 0.5 s later), while a
    cold learn drafts at 48 (the launch's ceiling 64) until its counters are thick enough, and serves less."""
    profile = load_profile(PROFILE)
    trace = parse_trace([[0, 48], [900, 48]], source="busy")
    warm = warm_start.choose(SERVER, known(sweep(2, 16.0), sweep(3, 4.0, info=OTHER_VERSION)), 64)
    assert warm.ceiling == 16
    policy = make_policy("learn", 64, initial_ceiling=warm.ceiling)
    run = simulate(profile, trace, policy, duration_s=900, keep_timeline=True)
    first = run.timeline[0]
    assert first["set"] == 16 and first["reason"].startswith("warm start: move the ceiling 64 -> 16")
    in_dwell = _knob_in_first_dwell(run.timeline, first["t"])
    assert len(in_dwell) == DWELL_S / 5 and max(in_dwell) == 16
    assert all(row["set"] is None for row in run.timeline[1:] if row["t"] <= first["t"] + DWELL_S)

    cold = simulate(profile, trace, make_policy("learn", 64), duration_s=900, keep_timeline=True)
    assert max(_knob_in_first_dwell(cold.timeline, first["t"])) == 64  # drafting where it loses
    short = parse_trace([[0, 48], [DWELL_S, 48]], source="busy")
    warm_tokens = simulate(profile, short, make_policy("learn", 64, initial_ceiling=16)).tokens
    # 1.4 % more in five minutes at 48, where GLM-5's drafting loses: the warm start gates 24-48, whose
    # exploration windows draft 3.9 % of their batches (a drafting stream, its turnover included), and come
    # ten times as often while bin 48 is thin (learn's thin share, control/policy/learn_share.py: 2.0 % more
    # without it)
    assert warm_tokens > simulate(profile, short, make_policy("learn", 64)).tokens * 1.01


def test_a_ceiling_already_there_still_holds_a_dwell_and_restored_counters_skip_the_warm_start() -> None:
    profile = load_profile(PROFILE)
    trace = parse_trace([[0, 48], [600, 48]], source="busy")
    there = simulate(profile, trace, make_policy("learn", 64, initial_ceiling=20), duration_s=600,
                     config=HarnessConfig(initial_max_bs=16), keep_timeline=True)  # fmt: skip
    first = there.timeline[0]
    assert first["set"] is None and "warm start: the ceiling is already 16" in first["reason"]
    assert set(_knob_in_first_dwell(there.timeline, first["t"])) == {16}

    learned = make_policy("learn", 64)
    simulate(profile, trace, learned, duration_s=600)
    state = learned.state()
    last, counters = state["snapshots"][-1]
    obs = Observation(ts=last + 15, num_running_reqs=48, num_queue_reqs=0, output_tok_s=None,
                      accept_length=None, spec_max_bs=64, max_running_requests=64, stale=False,
                      counters=counters)  # fmt: skip
    fresh = make_policy("learn", 64, initial_ceiling=16)
    assert fresh.decide(obs).max_bs == 16
    restarted = make_policy("learn", 64, initial_ceiling=16)
    restarted.load_state(state)  # its own counters of the last window: they decide, not the warm start
    decision = restarted.decide(obs)
    assert restarted.initial_ceiling is None and decision.max_bs != 16  # its own estimate's move
    # (a share learn had quieted is woken by the move it wants: that part leads the reason); the unused warm
    # start follows what the policy does
    assert "move the ceiling 64 -> " in decision.reason, decision.reason
    unused = "; warm start not used: counters of its own from the last window were restored"
    assert decision.reason.endswith(unused), decision.reason
    assert "warm start" not in restarted.decide(obs).reason  # said once


def test_a_sweep_stored_and_written_as_a_profile_keep_the_same_stack() -> None:
    """The same sweep saved (persist.to_models) and written with --profile-out (profile_out.build_profile)
    is known for the same stack."""
    from spectower.collectors.bench.persist import to_models
    from spectower.collectors.bench.profile_out import build_profile
    from spectower.simulator.profile import parse_profile

    from tests.test_bench_results import OFF, ON, _result

    result = _result(ON, OFF)
    result.server_info |= {"model_path": "org/target", "speculative_draft_model_path": "org/draft"}
    run, _ = to_models(result)
    run.id = 7
    stored = warm_start.known_from_run(run)
    doc = build_profile(result)
    profile = parse_profile(doc, source="measured")
    written = warm_start.known_from_profile(doc, "measured.json", "found", profile.crossover())
    assert stored is not None and stored.stack == written.stack
    assert stored.stack.model == "org/target" and stored.stack.draft == "org/draft"
    assert stored.stack.sglang_version == "0.5.23" and written.created_at == result.started_at
    # each reader's own crossover fit (the sweep's ratio fit, the simulator's curves): the same bin
    assert 8 < (stored.crossover or 0) < 16 and 8 < (written.crossover or 0) < 16


def test_auto_refuses_warm_start_flags_off_learn_and_a_bad_profile_in_one_line(tmp_path: Path) -> None:
    from spectower.console.cli import app
    from typer.testing import CliRunner

    base = ["control", "auto", "--server", "http://127.0.0.1:9", "--db", str(tmp_path / "d.db")]
    env = {"SPECTOWER_ADMIN_KEY": "k", "SPECTOWER_ADMIN_KEY_FILE": ""}
    other = CliRunner().invoke(app, [*base, "--policy", "threshold:3", "--warm-profile", "x.json"], env=env)
    assert other.exit_code == 2
    assert "only --policy learn starts warm (got --policy threshold:3)" in other.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    got = CliRunner().invoke(app, [*base, "--warm-profile", str(bad)], env=env)
    assert got.exit_code == 2 and "Traceback" not in got.output
    lines = [line for line in got.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --warm-profile: ") and "bad.json" in lines[0]


GPU_RUNS = Path(__file__).resolve().parents[1] / "data" / "gpu-runs"
EARLY_PAIR_RUN = GPU_RUNS / "h200-8b-early-pair-triton-policies-2026-12-03"


def test_a_measured_profile_warm_starts_where_its_own_sweep_puts_the_ceiling() -> None:
    """The H200 early-crossover pair's sweep (1 round of 7 s per level) dips at 12 and pays again at 16: its
    crossover (the ratios fitted non-increasing) is 16.1 and its best ceiling 16, which served the most of
    the fixed policies under the day load. Read as a --warm-profile, the same sweep's profile once gave 9.7
    (the simulator's first sign change), so learn started at 8 and served 0.971 of threshold:16. Both readers
    now find the crossover one way: the same ceiling."""
    from spectower.console.commands.control_auto import profile_known

    sweep_doc = json.loads((EARLY_PAIR_RUN / "sweep.json").read_text())
    known = profile_known(EARLY_PAIR_RUN / "profile.json")
    assert known.status == "found" and known.crossover is not None
    low, high = sweep_doc["crossover"]["bracket"]
    assert low <= known.crossover <= high, (known.crossover, sweep_doc["crossover"])
    assert known.ceiling(64) == sweep_doc["best_max_bs"] == 16
    # the simulator's own reading of the curves (a model's exact crossing, not an estimate) stays as it was
    assert 8 < (load_profile(EARLY_PAIR_RUN / "profile.json").crossover() or 0) < 12


def test_a_warm_start_the_counters_contradict_is_left_as_soon_as_they_are_decisive() -> None:
    """A sweep measures its own traffic: the fixed-share 0.5 H200 pair's closed-loop sweep crossed at 47, and
    under Azure's long prompts drafting loses from about 16. A warm start holds until this server's counters
    put it outside their interval, not for a whole dwell: on GLM-5 (crossover ~15) under 48 requests, warm at
    48, learn leaves it at 50 s, when bin 48 has its intervals (it held 300 s before). The move after that
    keeps the dwell (tests/test_open_loop.py)."""
    profile = load_profile(PROFILE)
    trace = parse_trace([[0, 48], [900, 48]], source="busy")
    run = simulate(profile, trace, make_policy("learn", 64, initial_ceiling=48), duration_s=900,
                   keep_timeline=True)  # fmt: skip
    moves = [(row["t"], row["set"]) for row in run.timeline if row["set"] is not None]
    assert moves[0][1] == 48 and "holds until this server's counters decide" in run.timeline[0]["reason"]
    assert moves[1][1] < 48 and moves[1][0] - moves[0][0] < DWELL_S / 4


# --- this server's own stored counters --------------------------------------------------------------------

URL = "http://gpu-7:30000"
# per bin: (speedup, mostly drafted?): drafting pays up to 16 and loses from 24 on
CURVE = {4: (1.6, True), 8: (1.5, True), 12: (1.4, True), 16: (1.3, True), 24: (0.8, False),
         32: (0.7, False), 48: (0.6, False)}  # fmt: skip


def store_counters(
    db_path: Path,
    url: str,
    curve: dict[int, tuple[float, bool]],
    *,
    end: float,
    intervals: int = 12,
    modes: tuple[str, ...] = ("drafted", "gated"),
    knob: int | None = None,
    extend_tax: float | None = None,
) -> None:
    """Decode-counter intervals as the collector stores them (``EngineCounterSample``: one row per bin and
    mode that saw steps, 5 s apart, ending at ``end``): a bin's mostly-run mode has 50 steps an interval, the
    explored one 10; gated 1000 tok/s of step time, drafted ``speedup`` times that, wobbling 2 %. With
    ``knob``, the scrape's ``EngineSample`` too, the knob it read. With ``extend_tax``, the extend block's
    rows (plugin 0.4.6 on) in each mostly gated bin: of its 50 gated steps, 20 kept the draft extend and ran
    ``1 - extend_tax`` of the 30 that skipped it."""
    from spectower.storage.counter_modes import EXTEND_MODES
    from spectower.storage.database import open_database
    from spectower.storage.models import EngineCounterSample, EngineSample

    with open_database(db_path) as db:
        sid = db.server_id(url)
        rows = []
        for i in range(intervals):
            ts, wobble = end - 5.0 * (intervals - 1 - i), 1 + 0.02 * (i % 3 - 1)
            for b, (ratio, drafting) in curve.items():
                tok_s = {"drafted": 1000.0 * b / 16 * ratio * wobble, "gated": 1000.0 * b / 16}
                steps = {"drafted": 50 if drafting else 10, "gated": 10 if drafting else 50}
                rows += [EngineCounterSample(server_id=sid, ts=ts, batch_size=b, mode=mode, steps=steps[mode],
                                             tokens=round(tok_s[mode] * steps[mode] * 0.01),
                                             time_s=steps[mode] * 0.01)
                         for mode in modes]  # fmt: skip
                if extend_tax is not None and not drafting:
                    for kind, steps_of, share in (("kept", 20, 1 - extend_tax), ("skipped", 30, 1.0)):
                        rows.append(EngineCounterSample(
                            server_id=sid, ts=ts, batch_size=b, mode=EXTEND_MODES[kind], steps=steps_of,
                            tokens=round(1000.0 * b / 16 * share * steps_of * 0.01), time_s=steps_of * 0.01,
                        ))  # fmt: skip
            if knob is not None:
                rows.append(EngineSample(server_id=sid, ts=ts, spec_max_bs=knob))
        writer = db.writer(maintenance=None)
        writer.put(*rows)
        assert writer.flush(30)
        writer.close()


def _find(db_path: Path, now: float, *sweeps: BenchRun) -> warm_start.WarmStart:
    from spectower.storage.database import open_database

    with open_database(db_path) as db:
        for run in sweeps:
            db.save_bench_run(run, [])
        return warm_start.find(db, SERVER, 64, server_url=URL, now=now)


def test_the_servers_own_counters_come_before_a_matching_sweep(tmp_path: Path) -> None:
    """The collector's counters of this server measured drafting paying up to bin 16 and losing from 24:
    learn starts at 16, where its own rule puts the ceiling on them, although a matching sweep (short
    prompts) says 48; the line says which source and what it read."""
    now = 10_000.0
    store_counters(tmp_path / "w.db", URL, CURVE, end=now - 60)
    warm = _find(tmp_path / "w.db", now, sweep(1, 48.0, created_at=now - 3600))
    assert warm.ceiling == 16
    assert warm.line.startswith("warm start: this server's own counters of the last 30 min (12 intervals, ")
    assert "crossover ~" in warm.line and warm.line.endswith("learn starts at ceiling 16")


def test_counters_without_both_modes_or_out_of_the_window_leave_it_to_the_sweep(tmp_path: Path) -> None:
    """An operator's lock explores nothing (gated steps only), and counters older than learn's window say
    nothing of the traffic now: either way the matching sweep decides, and a server the collector never saw
    too."""
    now = 10_000.0
    store_counters(tmp_path / "locked.db", URL, CURVE, end=now - 60, modes=("gated",))
    assert _find(tmp_path / "locked.db", now, sweep(1, 48.0)).ceiling == 48
    store_counters(tmp_path / "old.db", URL, CURVE, end=now - warm_start.COUNTERS_WINDOW_S - 120)
    assert _find(tmp_path / "old.db", now, sweep(1, 48.0)).ceiling == 48
    store_counters(tmp_path / "other.db", "http://gpu-8:30000", CURVE, end=now - 60)
    assert _find(tmp_path / "other.db", now, sweep(1, 48.0)).line.startswith("warm start: sweep #1 ")


def test_a_mostly_drafted_bins_gated_side_is_read_as_a_gated_streams() -> None:
    """A bin the ceiling drafted measured its gated side on explored batches that kept the draft extend, so
    it reads low by the extend's share: learn scales it up (``kept_extend_tax``), and so does the warm start.
    At 1.05x uncorrected, bin 16 pays; corrected (x0.93) it loses, and the ceiling drops below it."""
    bins = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]

    def interval(i: int) -> dict[str, Any]:
        curve = {8: 1.5, 12: 1.3, 16: 1.05, 24: 0.8}
        wobble = 1 + 0.02 * (i % 3 - 1)
        drafted_steps = [50 if b in (8, 12, 16) else (10 if b == 24 else 0) for b in bins]
        gated_steps = [10 if b in (8, 12, 16) else (50 if b == 24 else 0) for b in bins]

        def block(steps: list[int], ratio: dict[int, float]) -> dict[str, Any]:
            time_s = [n * 0.01 for n in steps]
            tokens = [t * 1000.0 * ratio.get(b, 1.0) for t, b in zip(time_s, bins, strict=True)]
            return {"steps": steps, "tokens": tokens, "time_s": time_s,
                    "tok_s": [k / t if t else None for k, t in zip(tokens, time_s, strict=True)]}  # fmt: skip

        return {"bins": bins, "restarted": False, "gated": block(gated_steps, {}),
                "drafted": block(drafted_steps, {b: r * wobble for b, r in curve.items()})}  # fmt: skip

    intervals = [interval(i) for i in range(12)]
    plain = warm_start.from_counters(intervals, 64, kept_extend_tax=0.0)
    corrected = warm_start.from_counters(intervals, 64)
    assert plain is not None and corrected is not None
    assert plain.ceiling == 16 and corrected is not None and corrected.ceiling is not None
    assert corrected.ceiling < 16
    assert warm_start.from_counters([], 64) is None


def test_the_knob_stored_beside_the_counters_says_which_bins_kept_the_extend(tmp_path: Path) -> None:
    """Under threshold:47 on the H200 the bins just below 47 ran mostly gated after each burst (holed
    requests drain gated, with the extend) yet the ceiling drafted them: their gated side kept the extend as
    an explored one does. With the knob the collector stored beside the counters the warm start scales those
    bins' gated side as learn scales its own (the bins the ceiling drafted); without it, it can only go by the
    mode a bin mostly ran, and reads bin 24's 1.05x as paying."""
    now = 10_000.0
    curve = {4: (1.6, True), 8: (1.5, True), 12: (1.4, True), 16: (1.25, True), 24: (1.05, False),
             32: (0.95, False), 48: (0.7, False)}  # fmt: skip
    store_counters(tmp_path / "no-knob.db", URL, curve, end=now - 60)
    store_counters(tmp_path / "knob.db", URL, curve, end=now - 60, knob=47)
    without, with_knob = _find(tmp_path / "no-knob.db", now), _find(tmp_path / "knob.db", now)
    assert without.ceiling == 24 and with_knob.ceiling == 16
    assert warm_start.knob_at([(1.0, 8), (5.0, 16)], 4.9) == 8 and warm_start.knob_at([(1.0, 8)], 0.5) is None
    with pytest.raises(ValueError, match="ceilings: one per interval"):
        warm_start.from_counters([{"bins": [1]}], 64, ceilings=[])


def test_a_measured_kept_extend_tax_corrects_a_drafting_bins_gated_side(tmp_path: Path) -> None:
    """Bin 16 drafted (mostly) at 1.10x its explored gated steps, which kept the draft extend. Learn's 7 %
    constant leaves it at 1.02x, paying; the 13 % the same counters measured in the gated bins (24-48: kept
    and skipped steady gated steps, plugin 0.4.6's extend rows) puts it at 0.96x, losing: the warm start drops
    the ceiling to 12 and its line says the tax was measured, and where. Measured at 7 % it stays at 16, and
    too few steps with the extend to measure (3 intervals: 60 a bin) is the constant, said to be assumed."""
    now = 10_000.0
    curve = {4: (1.6, True), 8: (1.5, True), 12: (1.4, True), 16: (1.10, True), 24: (0.8, False),
             32: (0.7, False), 48: (0.6, False)}  # fmt: skip
    store_counters(tmp_path / "none.db", URL, curve, end=now - 60)
    store_counters(tmp_path / "13.db", URL, curve, end=now - 60, extend_tax=0.13)
    store_counters(tmp_path / "7.db", URL, curve, end=now - 60, extend_tax=0.07)
    store_counters(tmp_path / "thin.db", URL, curve, end=now - 60, extend_tax=0.13, intervals=3)
    assumed, measured = _find(tmp_path / "none.db", now), _find(tmp_path / "13.db", now)
    assert assumed.ceiling == 16 and "; kept extend 7 % assumed (none measured); learn starts" in assumed.line
    assert measured.ceiling == 12, measured.line
    assert measured.line.endswith(
        "; kept extend 13.0 % measured (bins 24-48, 720 steps with the extend); learn starts at ceiling 12"
    )
    light = _find(tmp_path / "7.db", now)
    assert light.ceiling == 16 and "kept extend 7.0 % measured (bins 24-48, " in light.line
    thin = _find(tmp_path / "thin.db", now)
    assert thin.ceiling == 16 and "kept extend 7 % assumed (none measured)" in thin.line


H200_PAIR_REPLAY = Path(__file__).resolve().parents[1] / "data/gpu-runs/h200-8b-pair-triton-replay-2026-12-04"


def test_on_the_h200_replays_stored_counters_learn_would_start_at_12_where_the_sweep_said_48() -> None:
    """The collector's own database of the H200 replay (2026-12-04, the second launch: always off, then
    threshold:47, under Azure's prompts). Read at the end of the runs, its counters put learn at 12, and
    threshold:47's 4 minutes alone put it there too: below 47 that run drafted little and drained most of
    its steps (gated with the extend), and what drafting those bins served counts all of them
    (``learn_counters.as_choices``). Counting its drafted steps alone, the same counters said 16 and 24.
    The sweep of this stack said 48, and learn, started there, held 24."""
    from spectower.storage import queries
    from spectower.storage.database import open_recorded

    with open_recorded(H200_PAIR_REPLAY / "policy.db") as db:  # a copy: the archived run keeps its bytes
        url = queries.servers(db)[0].url
        end = 1796418887.96  # threshold:47's run ended (the control events)
        both = warm_start.from_stored_counters(db, url, 64, now=end)
        alone = warm_start.from_stored_counters(db, url, 64, now=end, window_s=end - 1796418644.43)
    assert both is not None and both.ceiling == 12 and "crossover ~14 (11-28)" in both.line, both
    assert alone is not None and alone.ceiling == 12 and "(loses at every load seen)" in alone.line, alone


H200_PAIR_REPLAY_FROZEN = (
    Path(__file__).resolve().parents[1] / "data/gpu-runs/h200-8b-pair-triton-replay-2026-12-05b/1-policies"
)


def test_with_the_drain_counted_the_frozen_replays_counters_start_learn_below_the_ceiling_it_held() -> None:
    """The 0.5 pair's replay with the collectors frozen (2026-12-05, always off first, then threshold:47 and
    learn twice). Learn started at 24 from these counters (`crossover < 32 (loses at every load seen)`) and
    held it: its few drafted steps in bin 24 paid, while that bin drained 99 % of its steps (gated with the
    extend) and served 0.92 of always off's rate. Counting what drafting such bins served, the same counters
    start it at 16 (before its first run) and 12 (before its second, whose interval no longer allows 24)."""
    from spectower.storage import queries
    from spectower.storage.database import open_recorded

    with open_recorded(H200_PAIR_REPLAY_FROZEN / "policy.db") as db:
        url = queries.servers(db)[0].url
        first = warm_start.from_stored_counters(db, url, 64, now=1796444812.2, current=47)
        second = warm_start.from_stored_counters(db, url, 64, now=1796445005.0, current=24)
    assert first is not None and first.ceiling == 16, first
    assert second is not None and second.ceiling == 12 and "crossover ~15 (7.1-22)" in second.line, second


def test_a_knob_within_what_the_counters_allow_stays_where_it_is(tmp_path: Path) -> None:
    """A quiet hour under threshold:47 measured bins 1-2 only, both paying: learn's rule holds a ceiling the
    estimate allows (here every ceiling from 2 up) and moves a ceiling between bin boundaries to the nearest
    one, so the warm start goes 47 -> 48, not to 2 (gating bins 3-47 that no interval measured). A rehearsal
    of the next H200 replay on the simulator at a tenth of its rate started learn at 2."""
    now = 10_000.0
    store_counters(tmp_path / "quiet.db", URL, {1: (1.5, True), 2: (1.4, True)}, end=now - 60, knob=47)
    warm = _find(tmp_path / "quiet.db", now)
    assert warm.ceiling == 48
    snapped = "learn starts at ceiling 48, the bin boundary nearest the knob (47) within what they allow"
    assert snapped + "; learn's window starts with" in warm.line
    store_counters(tmp_path / "at-48.db", URL, {1: (1.5, True), 2: (1.4, True)}, end=now - 60, knob=48)
    kept = "ceiling 48, where the knob is: within what they allow"
    assert kept + "; learn's window starts with" in _find(tmp_path / "at-48.db", now).line
    store_counters(tmp_path / "unknown.db", URL, {1: (1.5, True), 2: (1.4, True)}, end=now - 60)
    assert _find(tmp_path / "unknown.db", now).ceiling == 2  # no knob known: the estimate's own target


def test_always_ons_locked_counters_still_hand_learn_the_drafting_prefill_cost(tmp_path: Path) -> None:
    """A minute of always on under an operator's lock explores nothing, so its counters measure no bin in
    both modes and the matching sweep sets the ceiling; they still say what a drafting stream's prefills
    cost (plugin 0.4.14's rows), and the warm start hands that to learn, its line saying so. A rehearsal on
    `sim serve` (2026-12-07) started learn after such a minute with no cost at all."""
    from spectower.storage.counter_modes import PREFILLED_MODES
    from spectower.storage.database import open_database
    from spectower.storage.models import EngineCounterSample
    from sqlmodel import select

    now = 10_000.0
    db_path = tmp_path / "on.db"
    store_counters(db_path, URL, CURVE, end=now - 60, modes=("drafted",), knob=64)
    with open_database(db_path) as db:  # a fifth of each interval's steps held a prefill, 4 ms each
        with db.session() as session:
            drafted = list(session.exec(select(EngineCounterSample)))
        rows = [EngineCounterSample(server_id=row.server_id, ts=row.ts, batch_size=row.batch_size,
                                    mode=PREFILLED_MODES["drafted"], steps=row.steps // 5,
                                    tokens=row.tokens // 5, time_s=row.steps // 5 * (0.01 + 0.004))
                for row in drafted]  # fmt: skip
        writer = db.writer(maintenance=None)
        writer.put(*rows)
        assert writer.flush(30)
        writer.close()
    warm = _find(db_path, now, sweep(1, 48.0, created_at=now - 3600))
    assert warm.ceiling == 48 and warm.line.startswith("warm start: sweep #1 ")
    assert set(warm.prefill_costs) == {"drafted"} and warm.prefill_costs["drafted"] > 0
    assert "prefills a token as this server's stored counters measured them: drafted " in warm.line
    policy = make_policy("learn", 64, initial_ceiling=warm.ceiling, prefill_costs=warm.prefill_costs)
    assert policy._prefill_costs == dict(warm.prefill_costs)  # type: ignore[attr-defined]


def test_the_stored_intervals_whose_knob_is_known_start_learns_window(tmp_path: Path) -> None:
    """Whatever sets the ceiling, the warm start hands learn the server's stored intervals as the start of
    its window, each with the knob stored beside it as the ceiling it ran under, and says so; intervals whose
    knob is not known are left out (learn would read them as every bin drafted)."""
    from spectower.control.policy.learn_counters import CEILING_KEY

    now = 10_000.0
    store_counters(tmp_path / "knob.db", URL, CURVE, end=now - 60, knob=16)
    warm = _find(tmp_path / "knob.db", now)
    assert warm.ceiling == 16 and len(warm.history) == 12
    assert {h[CEILING_KEY] for h in warm.history} == {16}
    assert [h["ts"] for h in warm.history] == sorted(h["ts"] for h in warm.history)
    assert warm.line.endswith("; learn's window starts with the 12 stored intervals of 02:44:45-02:45:40 UTC")
    locked = tmp_path / "locked.db"  # always on, locked: no bin in both modes, the sweep sets the ceiling
    store_counters(locked, URL, CURVE, end=now - 60, modes=("drafted",), knob=64)
    warm = _find(locked, now, sweep(1, 48.0, created_at=now - 3600))
    assert warm.ceiling == 48 and {h[CEILING_KEY] for h in warm.history} == {64}
    assert "; learn's window starts with the 12 stored intervals of " in warm.line
    policy = make_policy("learn", 64, initial_ceiling=warm.ceiling, history=warm.history)
    assert len(policy._history) == 12  # type: ignore[attr-defined]
    store_counters(tmp_path / "unknown.db", URL, CURVE, end=now - 60)
    unknown = _find(tmp_path / "unknown.db", now)
    assert unknown.history == () and "learn's window" not in unknown.line
