"""How many of each policy run's decode batches the step counters counted, per run of one launch.

``measure_off.sh`` saves ``counters-<run>.json`` after every policy run: each rank's ``counters`` block
(plugin/engine_counters.py), cumulative from the launch. This sets the runs in the order they ran and prints
each as the difference from the one before, per rank: the steps counted in bins, the settling steps, the
verify results that matched no launch (``unmatched``) and the launches that never got one (``dropped``), and,
where the run's ``stalls-<run>.json`` lies beside it, the decode batches the scheduler loop ran (its DECODE
batches) and the share of them the counters counted. Where the run's ``load-<run>.log`` lies beside it and
ended (its last line says how long the load ran and the tokens its clients received), it sets the counters'
output tokens and step seconds (all ranks) against the clients': the clients' tok/s over the counters' tok/s
of step time is two factors, the tokens (the clients' over the counters') and the step seconds' share of the
load's (which holds the load's own start and teardown, 2 s or so a run: compare the modes, not 1). Learn
decides on the counters' rate, and the clients' read it 3-4 % lower for drafting runs than for gated ones;
on an H100 on 2026-12-06 both factors had a part: drafting's tokens 0.989 (a request's last step accepts past
its ``max_new_tokens``), its steps' share 3 % lower
(data/gpu-runs/h100-8b-pair-triton-counters-vs-clients-2026-12-06). Plugin 0.4.13 counts both: the tokens the
requests kept, and the seconds outside every step while the scheduler was busy, which this prints per run and,
per bin and mode, as a share of the step seconds there: they grow with the batch (on an H100 under a day load,
1-2 % of a step at 16 and 6-11 % at 48-64: data/gpu-runs/h100-8b-early-pair-triton-day-2026-12-06).

Why it exists: a step the counters lose takes its span with it, and learn decides on their rates; the
check wants the server's own cumulative counts per run, not the collector's intervals (one every 5-6 s),
whose edges cut a run's first and last seconds (on 2026-12-06 that read, at first, as 9-11 % of a drafting
run's batches lost: data/gpu-runs/NOTEBOOK.md).

    python3 benchmarks/gpu/counted_runs.py 1-policies/counters-*.json [--json OUT.json]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import loop_phases
from policy_table import read_total
from run_snapshots import counts_since, in_run_order, main_for, read_blocks
from spectower.plugin.engine_counters import MODES, served, sum_ranks, validate

MAX_COUNTERS_BYTES = 256 * 1024  # each rank's counters block: a few lists of ~20 bins
COUNTS = ("steps", "settling", "unmatched", "dropped", "tokens", "step_us", "outside_us", "not_kept")
# what the scheduler loop's blocks add where stalls-<run>.json lies beside: DECODE batches, and the run +
# result microseconds of its DECODE and of its EXTEND (prefill) batches
LOOP_KEYS = ("decode_batches", "decode_us", "extend_us")
MIN_BIN_STEP_S = 1.0  # fewer seconds of a mode's steps in a bin: its outside share is too few gaps to read


@dataclass(frozen=True)
class RunCounted:
    """One run's counting on one rank, and the scheduler loop's DECODE batches where its file was found."""

    run: str
    rank: int
    counts: dict[str, int]
    decode_batches: int | None
    since_launch: bool  # the first run: its counts hold the launch and warm-up too
    client: tuple[float, int] | None = None  # the load's (seconds, tokens) from load-<run>.log's last line
    loop_s: tuple[float, float] | None = None  # the loop's DECODE and EXTEND batches' run + result seconds

    @property
    def counted_share(self) -> float | None:
        if not self.decode_batches:
            return None
        return (self.counts["steps"] + self.counts["settling"]) / self.decode_batches


def run_name(path: Path) -> str:
    """``counters-threshold-16.json`` -> ``threshold-16``."""
    return path.stem.removeprefix("counters-")


def read_ranks(path: Path) -> list[dict[str, int]]:
    """Each rank's counts from its counters block saved after a run (a bad block: one line naming the
    file); the run's ``stalls-<run>.json`` beside it, where there is one, adds its DECODE batches."""
    out = []
    for i, block in enumerate(read_blocks(path, MAX_COUNTERS_BYTES, "counters")):
        why = validate(block)
        if why is not None:
            raise ValueError(f"{path}: rank {i}: {why}")
        summed = sum_ranks([block])  # its settling and outside blocks read as every reader reads them
        whole, settling = served(summed), summed["settling"]  # both modes' bins and the settling steps
        # plugin 0.4.13's seconds outside every span while the scheduler was busy (0 before it)
        outside = sum(sum(values) for values in summed.get("outside", {}).values())
        counts = per_bin(summed)
        counts |= {"steps": int(whole["steps"] - settling["steps"]),
                  "settling": int(settling["steps"]),
                  "unmatched": int(summed["unmatched"]),
                  "dropped": int(summed["dropped"]),
                  "tokens": int(whole["tokens"]),
                  "step_us": round(1e6 * whole["time_s"]),
                  "outside_us": round(1e6 * outside),
                  # plugin 0.4.13's verified tokens the requests did not keep, taken out of ``tokens``
                  "not_kept": int(block.get("tokens_not_kept", 0) or 0)}  # fmt: skip
        out.append(counts)
    loops = loop_phases.beside(path, run_name(path))
    if loops is not None:
        for counts, report in zip(out, loops, strict=False):
            mode = report.batch_modes.get("DECODE")  # batches run, or results (the simulator counts those)
            counts["decode_batches"] = int(max(mode[0], mode[2])) if mode else 0
            for key, kind in (("decode_us", "DECODE"), ("extend_us", "EXTEND")):  # run + result seconds
                found = report.batch_modes.get(kind)
                counts[key] = round(1e6 * (found[1] + found[3])) if found else 0
    load = path.with_name(f"load-{run_name(path)}.log")
    total = read_total(load) if load.is_file() else None
    if total is not None and out:
        out[0]["client_ms"], out[0]["client_tokens"] = round(1e3 * total[0]), total[1]
    return out


def per_bin(summed: dict[str, Any]) -> dict[str, int]:
    """Each mode's step and outside microseconds per bin (``bin:<mode>:<bin>:step_us``, ``...:outside_us``):
    on the GPU the seconds outside the steps grow with the batch, so a run's total mixes its bins (a day
    load's gated side runs the large ones); a plugin before 0.4.13 has no outside block (0)."""
    outside = summed.get("outside") or {}
    out: dict[str, int] = {}
    for mode in MODES:
        for i, b in enumerate(summed["bins"]):
            out[f"bin:{mode}:{b}:step_us"] = round(1e6 * summed[mode]["time_s"][i])
            out[f"bin:{mode}:{b}:outside_us"] = round(1e6 * outside[mode][i]) if mode in outside else 0
    return out


def progress(counts: dict[str, int]) -> int:
    """How far a rank's counting had come: every count only grows within a launch."""
    return sum(counts[key] for key in COUNTS)


def per_run(saved: dict[str, list[dict[str, int]]]) -> list[RunCounted]:
    """Each run's own counts per rank, in the order the runs ran: the difference from the run before."""
    rows: list[RunCounted] = []
    for run, ranks, before in in_run_order(saved, progress):
        for rank, counts in enumerate(ranks):
            bins = tuple(key for key in counts if key.startswith("bin:"))
            # a bin the run before had not seen yet counted nothing then (bins only grow within a launch)
            earlier = {**dict.fromkeys(bins, 0), **before[rank]} if before is not None else None
            own = counts_since(run, rank, counts, earlier, COUNTS + bins)
            decode, loop_s = None, None
            if "decode_batches" in counts and (earlier is None or "decode_batches" in earlier):
                loop = {key: counts[key] - (earlier[key] if earlier else 0) for key in LOOP_KEYS}
                decode, loop_s = loop["decode_batches"], (loop["decode_us"] / 1e6, loop["extend_us"] / 1e6)
            client = (counts["client_ms"] / 1e3, counts["client_tokens"]) if "client_ms" in counts else None
            rows.append(RunCounted(run, rank, own, decode, since_launch=before is None, client=client,
                                   loop_s=loop_s))  # fmt: skip
    return rows


@dataclass(frozen=True)
class RunAgainstClients:
    """One run's counters (all ranks) against its load's clients."""

    run: str
    tokens: int
    step_s: float
    client_s: float
    client_tokens: int
    loop_s: tuple[float, float] | None  # the loop's DECODE and EXTEND run + result seconds (all ranks)
    outside_s: float = 0.0  # the counters' seconds outside every span (plugin 0.4.13 on; all ranks)
    not_kept: int = 0  # verified tokens the requests did not keep (plugin 0.4.13 on; all ranks)

    @property
    def token_share(self) -> float | None:
        """The clients' tokens over the counters'."""
        return self.client_tokens / self.tokens if self.tokens else None

    @property
    def step_share(self) -> float | None:
        """The counters' step seconds over the seconds the load ran."""
        return self.step_s / self.client_s if self.client_s > 0 else None

    @property
    def rate_share(self) -> float | None:
        """The clients' tok/s over the counters' tok/s of step time: ``token_share * step_share``."""
        if self.token_share is None or self.step_share is None:
            return None
        return self.token_share * self.step_share


def against_clients(rows: Sequence[RunCounted]) -> list[RunAgainstClients]:
    """Each run whose load ended, its ranks' counters summed, against its clients."""
    out = []
    for run in dict.fromkeys(row.run for row in rows):
        ranks = [row for row in rows if row.run == run]
        client = ranks[0].client
        if client is None:
            continue
        tokens = sum(row.counts["tokens"] for row in ranks)
        step_s = sum(row.counts["step_us"] for row in ranks) / 1e6
        loops = [row.loop_s for row in ranks]
        loop_s = None
        if all(loop is not None for loop in loops):
            loop_s = (sum(loop[0] for loop in loops if loop), sum(loop[1] for loop in loops if loop))
        outside_s = sum(row.counts["outside_us"] for row in ranks) / 1e6
        not_kept = sum(row.counts["not_kept"] for row in ranks)
        out.append(RunAgainstClients(run, tokens, step_s, client[0], client[1], loop_s, outside_s, not_kept))
    return out


def print_rows(rows: Sequence[RunCounted]) -> None:
    print("decode steps the counters counted per run (the difference from the run before): in bins, "
          "settling, verifies unmatched, launches dropped; the scheduler loop's DECODE batches and the share "
          "counted")  # fmt: skip
    for row in rows:
        c = row.counts
        share = f"{row.counted_share:.3f}" if row.counted_share is not None else "-"
        decode = row.decode_batches if row.decode_batches is not None else "-"
        label = row.run + (" *" if row.since_launch else "")
        print(f"  {label:<20}rank {row.rank}: {c['steps']:>7} {c['settling']:>6} {c['unmatched']:>6} "
              f"{c['dropped']:>6}  DECODE {decode:>7}  counted {share}")  # fmt: skip
    clients = against_clients(rows)
    if clients:
        print("each run against its clients (load-<run>.log's last line): the counters' output tokens and "
              "step s (all ranks), the clients' tokens and the s the load ran; tokens clients/counters, step "
              "s / load s, and their product: the clients' tok/s over the counters' tok/s of step "
              "time; the loop's DECODE and EXTEND (prefill) batches' run + result s, where "
              "stalls-<run>.json lies beside: in the overlap loop a prefill's time falls inside the decode "
              "steps' spans; and, from plugin 0.4.13, the counters' seconds outside every span while the "
              "scheduler was busy and the verified tokens the requests did not keep (out of the counters' "
              "tokens)")  # fmt: skip
        first = {row.run for row in rows if row.since_launch}
        for run in clients:
            label = run.run + (" *" if run.run in first else "")
            loop = f"  loop DECODE {run.loop_s[0]:.1f} s EXTEND {run.loop_s[1]:.1f} s" if run.loop_s else ""
            if run.outside_s > 0:
                loop += f"  outside the steps {run.outside_s:.2f} s"
            if run.not_kept > 0:
                loop += f"  tokens not kept {run.not_kept}"
            print(f"  {label:<20}{run.tokens:>9} {run.step_s:>8.1f} s  clients {run.client_tokens:>9} "
                  f"{run.client_s:>8.1f} s  tokens {_share(run.token_share)}  "
                  f"steps {_share(run.step_share)}  tok/s {_share(run.rate_share)}{loop}")  # fmt: skip
    print_outside(rows)
    if any(row.since_launch for row in rows):
        print("* the first run: its counts also hold everything since the launch (warm-up)")


def outside_shares(rows: Sequence[RunCounted], min_step_s: float = MIN_BIN_STEP_S
                   ) -> dict[str, dict[int, dict[str, tuple[float, float]]]]:  # fmt: skip
    """Per run, bin and mode (all ranks): (the seconds outside the steps over the step seconds, the step
    seconds), where the mode ran at least ``min_step_s`` of steps in the bin."""
    seconds: dict[str, dict[int, dict[str, list[float]]]] = {}  # run -> bin -> mode -> [outside, step]
    for row in rows:
        for key, value in row.counts.items():
            if key.startswith("bin:"):
                _, mode, b, field = key.split(":")
                cell = seconds.setdefault(row.run, {}).setdefault(int(b), {}).setdefault(mode, [0.0, 0.0])
                cell[0 if field == "outside_us" else 1] += value / 1e6
    return {run: {b: {mode: (outside / step, step) for mode, (outside, step) in cell.items()
                      if step > 0 and step >= min_step_s}
                  for b, cell in sorted(bins.items())}
            for run, bins in seconds.items()}  # fmt: skip


def print_outside(rows: Sequence[RunCounted]) -> None:
    shares = outside_shares(rows)
    if not any(v[0] > 0 for bins in shares.values() for cell in bins.values() for v in cell.values()):
        return  # no outside block (a plugin before 0.4.13)
    print(f"the seconds outside the steps per bin, as a share of each mode's step seconds there (all ranks; "
          f"a mode with {MIN_BIN_STEP_S:.0f} s of steps in the bin or more; d drafted, g gated)")  # fmt: skip
    for run, bins in shares.items():
        cells = [f"{b}: " + " ".join(f"{mode[0]} {share:.1%}" for mode, (share, _) in sorted(cell.items()))
                 for b, cell in bins.items() if cell]  # fmt: skip
        print(f"  {run:<20}" + "  ".join(cells))


def _share(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def as_json(rows: Sequence[RunCounted]) -> list[dict[str, Any]]:
    return [{"run": r.run, "rank": r.rank, "since_launch": r.since_launch, **r.counts,
             "decode_batches": r.decode_batches, "counted_share": r.counted_share,
             "client_s": r.client[0] if r.client else None,
             "client_tokens": r.client[1] if r.client else None,
             "loop_decode_s": r.loop_s[0] if r.loop_s else None,
             "loop_extend_s": r.loop_s[1] if r.loop_s else None} for r in rows]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(argv, (__doc__ or "").split("\n\n")[0], "counters-<run>.json files of one launch",
                    run_name, read_ranks, per_run, print_rows, as_json)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
