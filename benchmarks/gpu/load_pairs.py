"""Two policies alternated on one launch under the same closed-loop load, paired: each pair's client-side
output tok/s ratio, and over the pairs their geometric mean with a t-interval.

``measure_off.sh``'s policy phase with ``POLICIES="on threshold:64 on threshold:64 ..."`` and a steady
``LOAD_PATTERN`` keeps each run's ``bench load`` status lines as ``load-<run>.log`` (``on``, ``on-2``, ...,
``threshold-64``, ``threshold-64-2``, ...). The i-th run of the first policy is paired with the i-th of the
second: back to back on one server, so the drift between pairs drops out (``collectors/bench/ratio.py``'s
``paired_ratio_interval``). A run's figure is the mean of its 5-s lines after its first ``--skip-s`` seconds
(the clients ramping up); lengths must be mixed (``--output-len 64-448``), or the lines move in waves.

    python3 benchmarks/gpu/load_pairs.py --first on --second threshold-64 DIR [--skip-s 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spectower.collectors.bench.ratio import paired_ratio_interval

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its sibling
from benchmarks.gpu.policy_table import read_status, repeat_index

DEFAULT_SKIP_S = 10.0


def repeats_of(name: str, names: Iterable[str]) -> list[str]:
    """The run ``name`` and its repeats as measure_off.sh labels them (``on``, ``on-2``, ``on-3``:
    ``policy_table.repeat_label``), in the order given; none for ``""``."""
    if not name:
        return []
    return [n for n in names if repeat_index(name, n) is not None]


def runs_of(folder: Path, policy: str) -> list[Path]:
    """``load-<policy>.log`` and its repeats (``-2``, ``-3``, ...) in the order they ran."""
    label = policy.replace(":", "-")
    stems = [path.name.removeprefix("load-").removesuffix(".log") for path in folder.glob("load-*.log")]
    ordered = sorted(repeats_of(label, stems), key=lambda run: repeat_index(label, run) or 0)
    return [folder / f"load-{run}.log" for run in ordered]


def run_mean(path: Path, skip_s: float) -> tuple[float, int]:
    """(mean tok/s, lines) of a load log's status lines after ``skip_s``; ValueError naming the file when
    none is left."""
    values = [tok_s for t, _, tok_s in read_status(path) if t > skip_s]
    if not values:
        raise ValueError(f"{path.name}: no status line after {skip_s:g} s")
    return statistics.fmean(values), len(values)


def pairs(folder: Path, first: str, second: str, skip_s: float = DEFAULT_SKIP_S) -> dict[str, Any]:
    """Each pair's runs, means and ratio (second / first), and the paired ratio over them."""
    a, b = runs_of(folder, first), runs_of(folder, second)
    if not a or not b:
        missing = first if not a else second
        raise ValueError(f"--first/--second: no load-{missing.replace(':', '-')}.log in {folder}")
    if len(a) != len(b):
        raise ValueError(f"--first/--second: {len(a)} runs of {first} against {len(b)} of {second}; "
                         "pairs need as many of each")  # fmt: skip
    means = [(run_mean(run_a, skip_s), run_mean(run_b, skip_s)) for run_a, run_b in zip(a, b, strict=True)]
    rows = [{"first": run_a.name, "second": run_b.name, "first_tok_s": mean_a, "second_tok_s": mean_b,
             "lines": [lines_a, lines_b], "ratio": mean_b / mean_a}
            for run_a, run_b, ((mean_a, lines_a), (mean_b, lines_b))
            in zip(a, b, means, strict=True)]  # fmt: skip
    ratio, low, high = paired_ratio_interval([b_[0] for _, b_ in means], [a_[0] for a_, _ in means])
    return {"pairs": rows, "ratio": ratio, "low": low, "high": high}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the policy runs' files (load-<run>.log)")
    parser.add_argument("--first", required=True, help="the reference policy, e.g. on")
    parser.add_argument("--second", required=True, help="the policy set against it, e.g. threshold:64")
    parser.add_argument("--skip-s", type=float, default=DEFAULT_SKIP_S,
                        help=f"each run's first seconds left out (default {DEFAULT_SKIP_S:g})")  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        found = pairs(args.folder, args.first, args.second, args.skip_s)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"client-side output tok/s, {args.second} / {args.first}, each run's 5-s lines after "
          f"{args.skip_s:g} s")  # fmt: skip
    for row in found["pairs"]:
        print(f"  {row['first']:<24} {row['first_tok_s']:8.1f}  {row['second']:<28} "
              f"{row['second_tok_s']:8.1f}  {row['ratio']:.3f}  ({row['lines'][0]} and {row['lines'][1]} "
              "lines)")  # fmt: skip
    n, low, high = len(found["pairs"]), found["low"], found["high"]
    print(f"paired over {n} pair{'s' * (n != 1)}: {found['ratio']:.3f} (95 % {low:.3f}-{high:.3f})")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
