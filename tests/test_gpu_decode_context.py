"""benchmarks/gpu/decode_context.py: the running requests' mean context per run and mode, from SGLang's own
decode lines (benchmarks/gpu/server_log.decode_lines). The lines are in SGLang 0.5.17's format, as the H100
of 2026-12-08 wrote them (data/gpu-runs/h100-8b-pair-triton-learn-history-2026-12-08)."""

from __future__ import annotations

import calendar
import gzip
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu import decode_context, server_log
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "decode_context.py"


def line(clock: str, running: int, tokens: int, accept: str) -> str:
    return (f"[2026-12-08 {clock}] Decode batch, #running-req: {running}, #token: {tokens}, "
            f"token usage: 0.12, accept len: {accept}, accept rate: 0.51, cuda graph: True, "
            f"gen throughput (token/s): 5980.87, #queue-req: 0")  # fmt: skip


LOG = [
    line("01:38:01", 48, 10560, "2.53"),  # always on: 220 tokens a request
    line("01:38:02", 48, 10464, "2.60"),  # 218
    line("01:39:10", 48, 10608, "1.00"),  # the ceiling's gated stream: 221
    line("01:39:11", 47, 10340, "1.00"),  # 220
    line("01:39:12", 48, 9984, "2.57"),  # an exploring part: 208
    line("01:39:13", 48, 10080, "1.31"),  # half in a part: neither mode
    line("01:39:14", 2, 100, "1.00"),  # the level's edge: too few running
]


def at(clock: str) -> float:
    return float(calendar.timegm(time.strptime(f"2026-12-08 {clock}", "%Y-%m-%d %H:%M:%S")))


def test_groups_split_a_run_by_its_lines_accepted_length() -> None:
    lines = server_log.decode_lines(LOG)
    on = decode_context.groups(lines, "on", at("01:38:00"), at("01:38:59"), 1.5, 1.2, min_running=40)
    assert [(g.mode, g.lines) for g in on] == [("drafted", 2)]
    assert on[0].kv_per_request == pytest.approx((220 + 218) / 2)
    assert on[0].low is not None and on[0].high is not None and 218 <= on[0].low <= on[0].high <= 220
    gated_run = decode_context.groups(lines, "t24", at("01:39:00"), at("01:39:59"), 1.5, 1.2, min_running=40)
    by_mode = {g.mode: g for g in gated_run}
    assert by_mode["drafted"].lines == 1 and by_mode["drafted"].kv_per_request == pytest.approx(208)
    assert by_mode["drafted"].low is None  # one line: no interval
    assert by_mode["gated"].lines == 2 and by_mode["gated"].mean_running == pytest.approx(47.5)
    # the 1.31 line is in neither mode; the 2-request line is below min_running
    assert sum(g.lines for g in gated_run) == 3


def test_the_script_prints_each_run_from_a_gzipped_log(tmp_path: Path) -> None:
    log = tmp_path / "spec-server.log.gz"
    with gzip.open(log, "wt") as handle:
        handle.write("\n".join(["[2026-12-08 01:37:00] something else", *LOG]) + "\n")
    span_on = f"on={at('01:38:00'):.0f}:{at('01:38:59'):.0f}"
    span_off = f"idle={at('02:00:00'):.0f}:{at('02:01:00'):.0f}"
    done = subprocess.run([sys.executable, str(SCRIPT), str(log), "--run", span_on, "--run", span_off,
                           "--min-running", "40"], capture_output=True, text=True, check=True)  # fmt: skip
    rows = done.stdout.splitlines()
    assert any(r.split()[:4] == ["on", "drafted", "2", "48.0"] and "219.0" in r for r in rows), rows
    assert any(r.startswith("idle") and "no decode line in its span" in r for r in rows), rows


@pytest.mark.parametrize("bad", ["on", "on=5", "on=9:5", "=1:2", "on=a:b"])
def test_a_bad_run_is_one_line_naming_the_option(tmp_path: Path, bad: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.log"), "--run", bad],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2
    assert "argument --run: expected NAME=START:END" in done.stderr and "Traceback" not in done.stderr


def test_an_unreadable_log_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.log"), "--run", "on=1:2"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "log:" in done.stderr and "Traceback" not in done.stderr
