"""What one ``/server_info`` read's gc block costs a process whose collector SGLang's ``/freeze_gc`` froze:
``gc.get_freeze_count()`` (what plugin 0.4.8-0.4.10 read on every call) against the plugin's cached count
(plugin/gc_pauses.py ``FrozenCount``, 0.4.11), after freezing ``--objects`` objects scattered in memory as a
serving process's are (a third of the allocations kept, shuffled, the rest freed).

    python3 benchmarks/frozen_count_cost.py [--objects 480000] [--reads 20]

Why: on the H100 of 2026-12-05 every ``GetInternalStateReq`` took the scheduler 70-100 ms after the freeze
(about 956 000 objects frozen; plugin 0.4.11's ``loop.input_kinds``), 93 of them in a 150-s replay under
learn, which reads ``/server_info`` every 2 s. Prints ms per read, best and median of ``--reads``; nothing
is asserted (tests/test_gc_pauses.py counts the reads instead).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from collections.abc import Callable

from spectower.plugin import gc_pauses


def scattered(count: int, seed: int = 1) -> list[dict[str, object]]:
    """``count`` small containers spread over three times as many allocations: all are made first and two in
    three freed afterwards, at random, so the survivors lie apart in memory as a long-running server's do."""
    rng = random.Random(seed)
    made = [{"i": i, "tokens": [i], "text": "x" * rng.randint(1, 200)} for i in range(3 * count)]
    kept = rng.sample(made, count)
    del made
    return kept


def per_read_ms(read: Callable[[], object], reads: int) -> list[float]:
    out = []
    for _ in range(reads):
        start = time.perf_counter()
        read()
        out.append(1000.0 * (time.perf_counter() - start))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=480_000,
                        help="containers kept, a dict and a list each (480 000: about the 956 000 objects a "
                             "scheduler had frozen on 2026-12-05)")  # fmt: skip
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    kept = scattered(args.objects)
    gc.collect()
    gc.freeze()
    try:
        frozen = gc_pauses.FrozenCount()
        pauses = gc_pauses.GcPauses()
        for name, read in (("gc.get_freeze_count() (plugin 0.4.8-0.4.10)", gc.get_freeze_count),
                           ("FrozenCount.count() (plugin 0.4.11)", frozen.count),
                           ("the whole gc block, 0.4.11", pauses.report)):  # fmt: skip
            times = per_read_ms(read, args.reads)
            print(f"{name:<46} best {min(times):9.3f} ms, median {statistics.median(times):9.3f} ms per read")
        print(f"{gc.get_freeze_count()} objects frozen ({len(kept)} containers kept)")
    finally:
        gc.unfreeze()


if __name__ == "__main__":
    main()
