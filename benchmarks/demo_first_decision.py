"""How soon `spectower demo`, as shipped, shows data and the learn policy's first decision.

The issue's bound: data and a policy decision within two minutes of the console answering. Starts the demo
in a temporary folder (its own ports, the next free ones), polls its database and prints when each thing
first appeared, then stops it with SIGINT and prints how long that took.

    python benchmarks/demo_first_decision.py [--profile NAME] [--timeout 300]

2-core VM shared with other work, 2026-11-30: console up 4.7 s after start, first engine and GPU samples
3.6 s, first policy set 109 s after the console answered (64 -> 16, once the compressed day's load passed
the crossover).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.sim_fidelity import machine  # noqa: E402
from benchmarks.simulator_process import SPECTOWER_CLI, free_port  # noqa: E402

BOUND_S = 120.0
QUERIES = {
    "first engine sample": "SELECT count(*) FROM engine_sample",
    "first GPU sample": "SELECT count(*) FROM gpu_sample",
    "first policy set": "SELECT count(*) FROM control_event WHERE actor LIKE 'policy:%' AND action = 'set'",
}


def _count(db: Path, sql: str) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            return int(conn.execute(sql).fetchone()[0])
    except sqlite3.Error:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default=None, help="simulator profile (default: the demo's)")
    ap.add_argument("--timeout", type=float, default=300.0, help="give up after this long (s)")
    args = ap.parse_args(argv)
    print(f"spectower demo, first data and decision; {machine()}")
    with tempfile.TemporaryDirectory(prefix="demo-bench-") as tmp:
        db = Path(tmp) / "demo" / "spectower.db"
        extra = ["--profile", args.profile] if args.profile else []
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
        start = time.monotonic()
        proc = subprocess.Popen(
            [*SPECTOWER_CLI, "demo", "--port", str(free_port()), "--db", str(db), *extra],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        lines: list[str] = []
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=lambda: lines.extend(iter(out.readline, "")), daemon=True).start()
        seen: dict[str, float] = {}
        try:
            while (
                time.monotonic() - start < args.timeout and proc.poll() is None and len(seen) <= len(QUERIES)
            ):
                now = time.monotonic() - start
                if "console up" not in seen and "spectower demo is up" in "".join(lines):
                    seen["console up"] = now
                for what, sql in QUERIES.items():
                    if what not in seen and _count(db, sql):
                        seen[what] = now
                time.sleep(0.5)
        finally:
            stop_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
            stopped = time.monotonic() - stop_at
        up = seen.get("console up")
        for what in ("console up", *QUERIES):
            at = seen.get(what)
            since_up = f" ({at - up:+.1f} s from the console answering)" if at is not None and up else ""
            print(f"  {what:<20} {'never' if at is None else f'{at:6.1f} s'}{since_up}")
        decided = seen.get("first policy set")
        log = db.parent / "policy.log"
        sets = [ln for ln in log.read_text().splitlines() if re.search(r" set: ", ln)] if log.exists() else []
        if sets:
            print(f"  policy: {sets[0]}")
        print(f"  SIGINT to exit: {stopped:.1f} s (exit code {proc.returncode})")
        if up is not None and decided is not None:
            verdict = "within" if decided - up <= BOUND_S else "OVER"
            print(
                f"first decision {decided - up:.0f} s after the console answered: {verdict} {BOUND_S:.0f} s"
            )
    print(f"({machine()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
