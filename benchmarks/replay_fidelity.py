"""Does `sim evaluate --trace` reproduce a measured open-loop replay? Simulated against measured, per policy
and per batch-size bin.

A GPU run of ``measure_off.sh``'s policy phase under ``REPLAY_TRACE`` keeps, per policy, ``bench replay``'s
summary (``replay-<tag>.json``: goodput, TTFT, end-to-end latency, peak in flight) and, in its ``policy.db``,
the plugin's decode counters (per bin and mode: steps, tokens, step seconds). This replays the same arrivals
(the summary's trace, speedup, rate scale, seed and duration) through the simulator's open loop
(simulator/open_loop.py) under the same policies, and prints both side by side: the replay's figures, and
each bin's step time drafted and gated (the counters' seconds per step, prefills run beside a step
included, as the plugin counts them under overlap scheduling).

    python3 benchmarks/replay_fidelity.py [--run-dir DIR] [--profile NAME|PATH] [--json OUT]
    python3 benchmarks/replay_fidelity.py --fit  # least squares of prefill rate and context costs
    python3 benchmarks/replay_fidelity.py --speedups  # the replay's own speedup per bin, no simulation

``--fit`` searches the profile's ``prefill_tok_s`` and ``context_cost`` (gated and drafted seconds per
context token) for the values whose simulated step times (always off's gated bins, threshold's drafted ones)
and always off's TTFT p50 are nearest the measured ones (squared log ratios, each bin weighted by the square
root of its measured steps), and prints them: how the calibrated profile's constants were found.

Policies by tag: ``off`` is always off under an operator's lock (nothing explores, the draft's extend
skipped); ``threshold-N`` is ``threshold:N``; ``learn`` is learn warm-started at ``--learn-warm`` with
``--learn-dwell`` (the run's ``LEARN_ARGS``), on a server whose ceiling the run before it left. A repeat
(``-2``) is the same policy on the same arrivals: the simulator runs each policy once, seeded as the replay.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import math
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))

from explore_lean import runs_from_db  # noqa: E402
from number_lists import list_type  # noqa: E402
from replay_table import read_run  # noqa: E402
from spectower.control import speedup  # noqa: E402
from spectower.control.policy import make_policy  # noqa: E402
from spectower.plugin import explore  # noqa: E402
from spectower.plugin.engine_counters import MODES  # noqa: E402
from spectower.simulator.harness import HarnessConfig  # noqa: E402
from spectower.simulator.open_loop import OpenLoopResult, simulate_open_loop  # noqa: E402
from spectower.simulator.open_loop_cost import WindowStreams  # noqa: E402
from spectower.simulator.profile import ContextCost, Profile, load_profile  # noqa: E402
from spectower.storage import queries  # noqa: E402
from spectower.storage.database import Database, open_recorded  # noqa: E402
from spectower.storage.request_traces import Slo, load_request_trace, schedule  # noqa: E402

RUN_DIR = REPO_ROOT / "data" / "gpu-runs" / "h200-8b-early-pair-triton-replay-2026-12-04"
# the 2026-12-03 sweep's curves with the open-loop constants this script's --fit found (not shipped with the
# simulator: the built-in closed-loop traces do not cross its crossover, ~10, tests/test_traces.py);
# ``--fit`` searches them again from its ``prefill_tok_s_ttft_floor`` and ``context_cost.reference_tokens``
PROFILE = str(REPO_ROOT / "data" / "profiles" / "h200-8b-early-pair-triton.json")
FIGURES = ("goodput_rps", "ttft_p50_s", "ttft_p99_s", "e2e_p50_s", "e2e_p99_s", "peak_in_flight")
SWEEP_INPUT_LEN = 64  # the GPU sweeps' prompt length (the profile's description says it)
MIN_STEPS = 30  # a bin with fewer measured steps is left out of the per-bin table and the fit
TAG = re.compile(r"^replay-(?P<policy>off|on|threshold-\d+|learn)(?:-\d+)?$")


@dataclasses.dataclass(frozen=True)
class Measured:
    tag: str  # the run's tag, e.g. threshold-16-2
    policy: str  # off, threshold-16, learn
    replay: dict[str, Any]  # bench replay's summary


def measured_runs(run_dir: Path) -> list[Measured]:
    """The replay summaries of ``run_dir`` in the order they ran (``run_id``)."""
    out = []
    for path in sorted(run_dir.glob("replay-*.json")):
        m = TAG.match(path.stem)
        if m is None:
            continue
        # read as replay_table reads a replay: capped, its figures checked (one line naming the file)
        out.append(Measured(path.stem.removeprefix("replay-"), m["policy"], read_run(path).figures))
    if not out:
        raise ValueError(f"--run-dir: no replay-<tag>.json in {run_dir}")
    return sorted(out, key=lambda r: int(r.replay.get("run_id") or 0))


# bin -> mode -> [(tokens, time_s, steps) of each counters interval with steps there] (speedup's grouping)
Samples = dict[int, dict[str, list[tuple[float, float, int]]]]


def measured_samples(run_dir: Path, max_running: int) -> dict[str, Samples]:
    """Per policy (repeats pooled): its runs' counter intervals from ``policy.db`` (or ``policy.db.xz``, as
    data/gpu-runs/ keeps it), grouped per bin and mode as ``control.speedup.estimate_per_bin`` reads them
    (none where the run kept no policy.db)."""
    with contextlib.ExitStack() as stack:
        try:  # a copy: the run's own file keeps its bytes
            db = stack.enter_context(open_recorded(run_dir / "policy.db"))
        except FileNotFoundError:
            return {}
        return _samples_of(db, max_running)


def _samples_of(db: Database, max_running: int) -> dict[str, Samples]:
    servers = queries.servers(db)
    if len(servers) != 1:
        raise ValueError(f"--run-dir: expected one server's counters in policy.db, found {len(servers)}")
    out: dict[str, Samples] = {}
    for run in runs_from_db(db, max_running):
        policy = TAG.match("replay-" + run.name.split("@")[0])
        if policy is None:
            continue
        found = queries.counter_samples(db, servers[0].id, run.start, run.end, max_intervals=100_000)
        into = out.setdefault(policy["policy"], {})
        for b, modes in found.per_bin.items():
            for mode, rows in modes.items():
                into.setdefault(int(b), {m: [] for m in MODES})[mode].extend(rows)
    return out


def measured_bins(run_dir: Path, max_running: int) -> dict[str, dict[tuple[int, str], list[float]]]:
    """Per policy (repeats summed): (bin, mode) -> [steps, tokens, step seconds] (``measured_samples``
    summed)."""
    return bin_totals(measured_samples(run_dir, max_running))


def bin_totals(samples: dict[str, Samples]) -> dict[str, dict[tuple[int, str], list[float]]]:
    """``measured_samples`` summed per policy, bin and mode: [steps, tokens, step seconds]."""
    out: dict[str, dict[tuple[int, str], list[float]]] = {}
    for policy, per_bin in samples.items():
        cells = out.setdefault(policy, {})
        for b, modes in per_bin.items():
            for mode, rows in modes.items():
                cells[(b, mode)] = [float(sum(n for *_, n in rows)), math.fsum(t for t, _, _ in rows),
                                    math.fsum(x for _, x, _ in rows)]  # fmt: skip
    return out


def simulate(profile: Profile, run: Measured, trace_path: str, ceiling_before: int,
             learn_warm: int, learn_dwell_s: float, window_start: int = 0,
             draft_prefill_skipped: bool = False) -> OpenLoopResult:  # fmt: skip
    """The simulator's open loop on the replay's arrivals under the run's policy. ``draft_prefill_skipped``:
    the run's plugin (0.4.10 on) skipped the draft's prefill where it skipped the decode extend; every replay
    before it ran each prompt through the draft."""
    p = run.replay["params"]
    arrivals = schedule(load_request_trace(trace_path), float(p["speedup"]), float(p["rate_scale"]),
                        int(p["seed"]), float(p["duration_s"]))  # fmt: skip
    mrr = profile.max_running_requests
    slo = Slo(ttft_s=p["slo"]["ttft_s"], itl_s=p["slo"]["itl_s"], e2e_s=p["slo"]["e2e_s"])
    if run.policy == "off":  # an operator's lock: nothing explores, the knob at 0 from the start
        policy, config = make_policy("always-off", mrr), HarnessConfig(explore_share=0.0, initial_max_bs=0)
    elif run.policy == "learn":
        policy = make_policy("learn", mrr, initial_ceiling=learn_warm, min_dwell_s=learn_dwell_s)
        config = HarnessConfig(initial_max_bs=ceiling_before)
    elif run.policy == "on":
        policy, config = make_policy("always-on", mrr), HarnessConfig(initial_max_bs=mrr)
    else:
        policy = make_policy(run.policy.replace("-", ":"), mrr)
        config = HarnessConfig(initial_max_bs=ceiling_before)
    config = dataclasses.replace(config, skip_draft_prefill=draft_prefill_skipped)
    return simulate_open_loop(profile, arrivals, policy, trace_name=Path(trace_path).stem,
                              seed=int(p["seed"]), slo=slo, config=config,
                              window_start=window_start)  # fmt: skip


def sim_bins(result: OpenLoopResult) -> dict[tuple[int, str], list[float]]:
    """(bin, mode) -> [steps, tokens, step seconds] of the simulator's counters at the end of the run."""
    c = result.counters
    return {(int(b), mode): [c[mode]["steps"][i], c[mode]["tokens"][i], c[mode]["time_s"][i]]
            for i, b in enumerate(c["bins"]) for mode in ("drafted", "gated")}  # fmt: skip


def simulate_all(profile: Profile, runs: Sequence[Measured], trace: str, learn_warm: int,
                 learn_dwell_s: float, window_start: int = 0,
                 draft_prefill_skipped: bool = False) -> dict[str, OpenLoopResult]:  # fmt: skip
    """One simulated run per policy, each on a server whose ceiling the measured run before it left."""
    out: dict[str, OpenLoopResult] = {}
    ceiling = profile.max_running_requests
    for run in runs:
        if run.policy not in out:
            out[run.policy] = simulate(profile, run, trace, ceiling, learn_warm, learn_dwell_s, window_start,
                                       draft_prefill_skipped)  # fmt: skip
        ceiling = out[run.policy].final_max_bs
    return out


def step_ms(cell: Sequence[float] | None) -> float | None:
    return 1000.0 * cell[2] / cell[0] if cell is not None and cell[0] >= MIN_STEPS else None


def bin_rows(measured: dict[str, dict[tuple[int, str], list[float]]],
             sims: dict[str, OpenLoopResult]) -> list[dict[str, Any]]:  # fmt: skip
    """Per policy, bin and mode with enough measured steps: measured and simulated ms per step."""
    rows = []
    for policy, cells in measured.items():
        simulated = sim_bins(sims[policy]) if policy in sims else {}
        for (b, mode), cell in sorted(cells.items()):
            ms = step_ms(cell)
            if ms is None:
                continue
            sim_cell = simulated.get((b, mode))
            sim_ms = _round(step_ms(sim_cell))
            # the steps too: how much of a bin ran in each mode, measured and simulated (the simulator has
            # the gate, its hysteresis and the drain; what it lacks shows here, e.g. SGLang's own band at 0)
            rows.append({"policy": policy, "bin": b, "mode": mode, "steps": int(cell[0]),
                         "sim_steps": int(sim_cell[0]) if sim_cell is not None else 0,
                         "measured_ms": round(ms, 3), "sim_ms": sim_ms})  # fmt: skip
    return rows


def _round(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def figure_rows(runs: Sequence[Measured],
                by_start: dict[int, dict[str, OpenLoopResult]]) -> list[dict[str, Any]]:  # fmt: skip
    """Per measured run: its replay figures and the simulated runs' of the same policy, one per window
    start (``simulated``: their median, ``sim_range``: their least and most)."""
    rows = []
    for run in runs:
        sims = [by_start[start][run.policy].to_json() for start in sorted(by_start)]
        simulated, ranges = {}, {}
        for k in FIGURES:
            values = sorted(v for s in sims if (v := s.get(k)) is not None)
            simulated[k] = statistics.median(values) if values else None
            ranges[k] = [values[0], values[-1]] if values else None
        measured = {k: run.replay.get(k) for k in FIGURES}
        rows.append({"tag": run.tag, "policy": run.policy, "measured": measured,
                     "simulated": simulated, "sim_range": ranges})  # fmt: skip
    return rows


def fit_error(profile: Profile, runs: Sequence[Measured], measured: dict[str, Any], trace: str,
              learn_warm: int, learn_dwell_s: float,
              draft_prefill_skipped: bool = False) -> float:  # fmt: skip
    """Squared log ratios: always off's gated step times, threshold's drafted ones (each weighted by the
    square root of its measured steps) and always off's TTFT p50 (weighted as the bins together)."""
    chosen = [r for r in runs if r.policy == "off" or r.policy.startswith("threshold")]
    once = list({r.policy: r for r in chosen}.values())
    sims = simulate_all(profile, once, trace, learn_warm, learn_dwell_s,
                        draft_prefill_skipped=draft_prefill_skipped)
    total = weight = 0.0
    for row in bin_rows(measured, sims):
        wanted = "gated" if row["policy"] == "off" else "drafted"
        if row["policy"] in sims and row["mode"] == wanted and row["sim_ms"]:
            w = math.sqrt(row["steps"])
            total += w * math.log(row["sim_ms"] / row["measured_ms"]) ** 2
            weight += w
    off = next(r for r in runs if r.policy == "off")
    ttft = sims["off"].to_json()["ttft_p50_s"]
    total += weight * math.log(ttft / off.replay["ttft_p50_s"]) ** 2
    return total / (2 * weight)


def sweep_ttft_s(profile: Profile) -> float:
    """The sweep's time to first token of a lone short prompt: what its TTFT-floor ``prefill_tok_s`` was
    made of (collectors/bench/profile_out.py: prompt tokens over TTFT at the lowest concurrency); a
    calibrated profile keeps that figure as ``prefill_tok_s_ttft_floor``."""
    floor = float(profile.raw.get("prefill_tok_s_ttft_floor", profile.prefill_tok_s))
    return SWEEP_INPUT_LEN / floor


def with_constants(profile: Profile, prefill: float, gated: float, drafted: float, ref: float) -> Profile:
    """The profile with a prefill rate and context costs; its first-token latency is what is left of the
    sweep's lone TTFT once its short prompt's prefill at that rate is taken out."""
    cost = ContextCost(gated_s_per_token=gated, drafted_s_per_token=drafted, reference_tokens=ref)
    latency = max(0.0, sweep_ttft_s(profile) - SWEEP_INPUT_LEN / prefill)
    return dataclasses.replace(profile, prefill_tok_s=prefill, context_cost=cost,
                               first_token_latency_s=latency)  # fmt: skip


def fit(profile: Profile, runs: Sequence[Measured], measured: dict[str, Any],
        args: argparse.Namespace) -> None:  # fmt: skip
    """A coarse grid, then one finer round around its best: prefill tok/s, gated and drafted s/token."""
    ref = profile.context_cost.reference_tokens if profile.context_cost else args.reference_tokens
    grids = ([30e3, 40e3, 50e3, 60e3, 70e3], [0.0, 1e-8, 2e-8, 4e-8, 6e-8],
             [1e-7, 2e-7, 3e-7, 4e-7, 5e-7, 6e-7])  # fmt: skip
    best: tuple[float, tuple[float, float, float]] | None = None
    for _ in range(2):
        for point in itertools.product(*grids):
            err = fit_error(with_constants(profile, *point, ref), runs, measured, args.trace,
                            args.learn_warm, args.learn_dwell, args.draft_prefill_skipped)  # fmt: skip
            if best is None or err < best[0]:
                best = (err, point)
        assert best is not None
        grids = tuple([v * f for f in (0.8, 0.9, 1.0, 1.1, 1.25)] for v in best[1])  # type: ignore[assignment]
    assert best is not None
    prefill, gated, drafted = best[1]
    latency = with_constants(profile, prefill, gated, drafted, ref).first_token_latency_s
    print(f"fit: prefill_tok_s {prefill:.0f} (first_token_latency_s {latency:.4f}), context_cost "
          f"gated_s_per_token {gated:.3g}, "
          f"drafted_s_per_token {drafted:.3g} (reference_tokens {ref:g}); "
          f"rms log error {math.sqrt(best[0]):.3f}")  # fmt: skip


def measured_speedups(samples: dict[str, Samples]) -> list[dict[str, Any]]:
    """Per bin: what drafting served under the replay's traffic against what gating did, in output tokens
    per second of step time: each threshold run's drafted steps against always off's gated ones (a locked
    off: no extend, nothing explored; the steady gated stream), with the 95 % interval the one estimator
    gives (``control.speedup.estimate_per_bin``: each side's counter intervals as batch means). The two sides
    ran at other moments of the same arrivals, so a bin's context mix is the trace's in both; the sweep's
    curves, measured with short prompts, say what drafting gives there, this what it gave under the trace.
    Bins with fewer than MIN_STEPS steps on either side are left out."""
    gated = samples.get("off", {})
    rows = []
    for policy, per_bin in sorted(samples.items()):
        if not policy.startswith("threshold"):
            continue
        paired = {b: {"drafted": modes["drafted"], "gated": gated[b]["gated"]}
                  for b, modes in per_bin.items() if b in gated}  # fmt: skip
        est = speedup.estimate_per_bin(paired, 0)
        for b in est.bins:
            if b.speedup is None or min(b.drafted_steps, b.gated_steps) < MIN_STEPS:
                continue
            rows.append({"policy": policy, "bin": b.batch_size, "drafted_steps": b.drafted_steps,
                         "gated_steps": b.gated_steps, "drafted_tok_s": round(b.drafted_tok_s or 0.0, 1),
                         "gated_tok_s": round(b.gated_tok_s or 0.0, 1), "speedup": round(b.speedup, 3),
                         "lo": _round(b.lo), "hi": _round(b.hi), "intervals": b.intervals})  # fmt: skip
    return rows


def print_speedups(rows: list[dict[str, Any]]) -> None:
    print("per bin: output tok/s of step time, drafted (the threshold run) against gated (always off); 95 % "
          "interval, the counter intervals of the scarcer side as batch means")  # fmt: skip
    print(f"{'policy':<14}{'bin':>4}{'drafted':>9}{'steps':>7}{'gated':>9}{'steps':>7}{'speedup':>9}"
          f"{'95 %':>15}{'intervals':>10}")  # fmt: skip
    for r in rows:
        bounds = f"{r['lo']:.3f}-{r['hi']:.3f}" if r["lo"] is not None else "-"
        print(f"{r['policy']:<14}{r['bin']:>4}{r['drafted_tok_s']:>9.0f}{r['drafted_steps']:>7}"
              f"{r['gated_tok_s']:>9.0f}{r['gated_steps']:>7}{r['speedup']:>9.3f}{bounds:>15}"
              f"{r['intervals']:>10}")  # fmt: skip


def _cell(v: Any, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def print_tables(figures: list[dict[str, Any]], bins: list[dict[str, Any]]) -> None:
    print(f"{'run':<16}" + "".join(f"{k:>22}" for k in FIGURES))
    for row in figures:
        cells = []
        for k in FIGURES:
            m, s = row["measured"][k], row["simulated"][k]
            fmt = ".0f" if k == "peak_in_flight" else ".3f"
            ratio = f" ({s / m:.2f}x)" if m and s is not None else ""
            cells.append(f"{_cell(m, fmt)}/{_cell(s, fmt)}{ratio}")
        print(f"{row['tag']:<16}" + "".join(f"{c:>22}" for c in cells))
        spans = [f"sim {_cell(r[0], '.3g')}-{_cell(r[1], '.3g')}" if (r := row["sim_range"][k]) else "-"
                 for k in FIGURES]  # fmt: skip
        print(f"{'':<16}" + "".join(f"{c:>22}" for c in spans))
    print("\nper bin: steps and ms per step, measured / simulated (prefills beside a step counted in it)")
    head = f"{'policy':<14}{'bin':>4} {'mode':<8}{'steps':>7}{'sim':>7}"
    print(f"{head}{'measured':>10}{'sim':>10}{'ratio':>7}")
    for r in bins:
        ratio = f"{r['sim_ms'] / r['measured_ms']:.2f}" if r["sim_ms"] else "-"
        print(f"{r['policy']:<14}{r['bin']:>4} {r['mode']:<8}{r['steps']:>7}{r.get('sim_steps', 0):>7}"
              f"{r['measured_ms']:>10.2f}{_cell(r['sim_ms'], '.2f'):>10}{ratio:>7}")  # fmt: skip


_starts = list_type(int, lambda v: v >= 0, "each 0 or more")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR)
    parser.add_argument("--profile", default=PROFILE, help="a profile JSON path or a shipped profile's name")
    parser.add_argument("--trace", default=None, help="default: the trace the replays name")
    parser.add_argument("--learn-warm", type=int, default=16, help="learn's warm-start ceiling")
    parser.add_argument("--learn-dwell", type=float, default=60.0, help="learn's --dwell, seconds")
    parser.add_argument("--reference-tokens", type=float, default=216.0,
                        help="--fit: context per request of the profile's curves where it does not say")
    parser.add_argument("--fit", action="store_true", help="search prefill rate and context costs")
    parser.add_argument("--speedups", action="store_true",
                        help="print the replay's own speedup per bin (threshold's drafted against always "
                        "off's gated steps) and stop: no simulation")
    parser.add_argument("--windows-by-batches", action="store_true",
                        help="model the run's plugin (0.4.1, with --stream-unlimited): a window's parts are "
                        "a share of the gated batches, not of their time (the fix after the run: "
                        "ExploreWindows.step(now=...))")
    parser.add_argument("--stream-unlimited", action="store_true",
                        help="model the run's plugin (0.4.1): a window's exploring part drafts at any "
                        "batch size (0.4.2 drafts up to plugin.explore.stream_limit: twice the ceiling, at "
                        "least 8; 0.4.3 doubles it after each part above it)")
    parser.add_argument("--stream-fixed", action="store_true",
                        help="model plugin 0.4.2: the stream's limit never doubles (explore.next_doublings)")
    parser.add_argument("--window-starts", type=_starts, default=[1024 * i for i in range(8)],
                        help="where in the exploration cycle each simulated server begins (gated batches, "
                        "comma-separated): which burst a window's drafting stream meets is chance")
    parser.add_argument("--draft-prefill-skipped", action="store_true",
                        help="model plugin 0.4.10 or later: a prefill skips the draft's pass where the "
                        "decode batches skip their extend (the profile's draft_prefill_share); the replays "
                        "before it ran every prompt through the draft")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.windows_by_batches:
        explore.timed_share = lambda share, cost_ratio: share  # the share of batches, whatever a step costs
        WindowStreams.TIMED = False
    if args.stream_fixed:
        explore.next_doublings = lambda doublings, largest, ceiling: 0  # the rule ExploreWindows reads
    if args.stream_unlimited:
        WindowStreams.drafts = lambda self, batch, ceiling: True  # type: ignore[method-assign]  # the one rule
    try:
        profile = load_profile(args.profile)
        runs = measured_runs(args.run_dir)
        args.trace = args.trace or str(REPO_ROOT / runs[0].replay["params"]["trace"])
        samples = measured_samples(args.run_dir, profile.max_running_requests)  # policy.db read once
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    measured = bin_totals(samples)
    if args.speedups:
        rows = measured_speedups(samples)
        if not rows:
            print("--speedups: the run needs an always-off and a threshold run with counters in policy.db",
                  file=sys.stderr)  # fmt: skip
            return 2
        print_speedups(rows)
        if args.json:
            args.json.write_text(json.dumps({"speedups": rows}, indent=1))
        return 0
    if args.fit:
        fit(profile, runs, measured, args)
        return 0
    by_start = {start: simulate_all(profile, runs, args.trace, args.learn_warm, args.learn_dwell, start,
                                    args.draft_prefill_skipped)
                for start in args.window_starts}  # fmt: skip
    figures, bins = figure_rows(runs, by_start), bin_rows(measured, by_start[args.window_starts[0]])
    starts = ", ".join(map(str, args.window_starts))
    print(f"profile {args.profile}; runs {args.run_dir}; measured / simulated (the median of "
          f"{len(args.window_starts)} window starts, {starts} gated batches)")
    print_tables(figures, bins)
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "bins": bins}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
