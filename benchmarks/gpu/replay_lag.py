"""How far each replay run's delivered output fell behind a reference run of the same arrivals, over time.

An open-loop replay ends with every policy having served the same tokens, and its p99 TTFT rests on about 20
requests. Near the server's capacity a small lag decides that tail: on the H100 of 2026-12-05 learn at 16
delivered 0.989-0.998 of always off's tokens from 20 s on, held a median of 5 more requests in flight, and
read 1.43x its p99 TTFT (data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05c). This prints that lag for
every run from its per-request records (``bench replay --json``'s ``records``):

- **delivered by t**: each request's output tokens spread evenly over its decode time (its first token at
  sent + TTFT, its last at sent + end-to-end), summed at every ``--every`` seconds of the replay, over the
  reference run's;
- **in flight**: the requests sent and not finished at every ``IN_FLIGHT_STEP_S`` from ``--from`` on, less
  the reference's at the same moment: the median and the most.

    python3 benchmarks/gpu/replay_lag.py replay-*.json [--reference off] [--every 20] [--from 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from spectower.collectors.bench.replay_records import ReplayRecords, read_replay_records
from spectower.storage.files import parse_json_text, read_text_capped

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.replay_table import MAX_REPLAY_BYTES

IN_FLIGHT_STEP_S = 2.0
DEFAULT_EVERY_S = 20.0
DEFAULT_FROM_S = 30.0  # the first seconds ramp up from an idle server: every run starts level


@dataclass(frozen=True)
class Lag:
    run: str
    marks_s: list[float]
    delivered_ratio: list[float | None]  # per mark: delivered by then over the reference's (None: it had 0)
    lowest_ratio: float | None  # from --from on
    in_flight_more_median: float | None
    in_flight_more_max: int | None


def read_records(path: Path) -> ReplayRecords:
    """A run's per-request records; a file without them is one line naming it."""
    try:
        doc = parse_json_text(read_text_capped(path, MAX_REPLAY_BYTES))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or "records" not in doc:
        raise ValueError(f"{path}: no per-request records (a bench replay --json from before it kept them?)")
    return read_replay_records(doc["records"], str(path))


def _spans(records: ReplayRecords) -> list[tuple[float, float, float, int]]:
    """(sent, first token, last token, output tokens) of every request that finished."""
    out = []
    for sent, ttft, e2e, tokens in zip(records.sent_s, records.ttft_s, records.e2e_s, records.output_tokens,
                                       strict=True):  # fmt: skip
        if sent is not None and ttft is not None and e2e is not None:
            out.append((sent, sent + ttft, sent + e2e, tokens))
    return out


def delivered(spans: Sequence[tuple[float, float, float, int]], t: float) -> float:
    """Output tokens delivered by ``t``: a request's first at its first token, the rest evenly to its last."""
    total = 0.0
    for _sent, first, last, tokens in spans:
        if t < first or tokens <= 0:
            continue
        if t >= last or last <= first:
            total += tokens
        else:
            total += 1 + (tokens - 1) * (t - first) / (last - first)
    return total


def in_flight(spans: Sequence[tuple[float, float, float, int]], t: float) -> int:
    return sum(1 for sent, _first, last, _tokens in spans if sent <= t < last)


def lag(run: str, records: ReplayRecords, reference: ReplayRecords, every_s: float, from_s: float) -> Lag:
    mine, ref = _spans(records), _spans(reference)
    end = max((last for _s, _f, last, _t in ref), default=0.0)
    marks = [every_s * i for i in range(1, int(end // every_s) + 1)]
    ratios: list[float | None] = []
    for t in marks:
        base = delivered(ref, t)
        ratios.append(delivered(mine, t) / base if base > 0 else None)
    later = [r for t, r in zip(marks, ratios, strict=True) if t >= from_s and r is not None]
    steps = [from_s + IN_FLIGHT_STEP_S * i for i in range(int(max(0.0, end - from_s) // IN_FLIGHT_STEP_S))]
    more = [in_flight(mine, t) - in_flight(ref, t) for t in steps]
    return Lag(run=run, marks_s=marks, delivered_ratio=ratios, lowest_ratio=min(later, default=None),
               in_flight_more_median=statistics.median(more) if more else None,
               in_flight_more_max=max(more, default=None))  # fmt: skip


def print_lags(lags: Sequence[Lag], reference: str, from_s: float) -> None:
    if not lags:
        return
    marks = lags[0].marks_s
    print(f"delivered output by t over {reference}'s (each request's tokens spread over its decode time); "
          f"in flight less {reference}'s every {IN_FLIGHT_STEP_S:g} s from {from_s:g} s")  # fmt: skip
    heads = "".join(f"{t:>7.0f}s" for t in marks)
    print(f"{'run':<16}{heads}{'lowest':>9}{'more: median':>14}{'max':>6}")
    for row in lags:
        cells = "".join(f"{r:>8.3f}" if r is not None else f"{'-':>8}" for r in row.delivered_ratio)
        low = f"{row.lowest_ratio:.3f}" if row.lowest_ratio is not None else "-"
        median = f"{row.in_flight_more_median:g}" if row.in_flight_more_median is not None else "-"
        most = str(row.in_flight_more_max) if row.in_flight_more_max is not None else "-"
        print(f"{row.run:<16}{cells}{low:>9}{median:>14}{most:>6}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="replay-<run>.json files of one trace")
    parser.add_argument("--reference", default="off", help="the run the others are set against (default off)")
    parser.add_argument("--every", type=float, default=DEFAULT_EVERY_S, help="seconds between marks")
    parser.add_argument("--from", dest="from_s", type=float, default=DEFAULT_FROM_S,
                        help="the lowest ratio and the in-flight counts from this second on")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    if not args.every > 0 or args.from_s < 0:
        print("error: --every must be > 0 s and --from >= 0 s", file=sys.stderr)
        return 2
    try:
        runs = {path.stem.removeprefix("replay-"): read_records(path) for path in args.runs}
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.reference not in runs:
        print(f"error: --reference: no run named {args.reference!r} among {', '.join(runs)}", file=sys.stderr)
        return 2
    if any(runs[name].index != runs[args.reference].index for name in runs):
        print("error: the runs did not replay the same arrivals (their records' index columns differ)",
              file=sys.stderr)  # fmt: skip
        return 2
    reference = runs[args.reference]
    lags = [lag(name, records, reference, args.every, args.from_s) for name, records in runs.items()]
    print_lags(lags, args.reference, args.from_s)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(row) for row in lags], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
