"""Sum a SPECTOWER_TEST_CPU_LOG file (tests/conftest.py): the tests and the files that cost the most CPU.

SPECTOWER_TEST_CPU_LOG=/tmp/cpu.tsv ./tests/run --fast && python3 tests/cpu_report.py /tmp/cpu.tsv
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path


def main(path: str, top: int = 40) -> None:
    tests: list[tuple[float, float, float, str]] = []
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        nodeid, own, children, wall = line.split("\t")
        cost = (float(own), float(children), float(wall))
        tests.append((cost[0] + cost[1], *cost[:2], nodeid))
        totals = by_file[nodeid.split("::")[0]]
        for k, v in enumerate((cost[0] + cost[1], *cost)):
            totals[k] += v
    own, children = sum(t[1] for t in tests), sum(t[2] for t in tests)
    print(f"{len(tests)} tests: {own:.1f} CPU-s own + {children:.1f} children")
    print("\ntests, CPU-s (own + children):")
    for total, own, children, nodeid in sorted(tests, reverse=True)[:top]:
        print(f"{total:7.2f} {own:7.2f} {children:7.2f}  {nodeid}")
    print("\nfiles, CPU-s (own + children), wall-s:")
    for name, (total, own, children, wall) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{total:7.2f} {own:7.2f} {children:7.2f} {wall:7.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
