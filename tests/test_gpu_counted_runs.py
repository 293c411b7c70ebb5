"""benchmarks/gpu/counted_runs.py: how many of each run's decode batches the step counters counted, from the
counters and loop blocks measure_off.sh saves after every run, here the plugin's own objects' reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from spectower.plugin.engine_counters import EngineCounters
from spectower.plugin.loop_stalls import LoopStalls

from tests.conftest import REPO_ROOT
from tests.test_engine_counters import FakeClock

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import counted_runs

SCRIPT = REPO_ROOT / "benchmarks/gpu/counted_runs.py"


class Server:
    """One rank's counters and scheduler loop, driven as SGLang's hooks drive them."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.counters = EngineCounters(64, clock=self.clock)
        self.loop = LoopStalls(clock=self.clock, wall=lambda: 1_796_463_029.5)

    def decode(self, size: int, drafted: bool, verified_size: int | None = None) -> None:
        """A decode batch launched and run; its verify comes back with ``verified_size`` requests (None: as
        launched), or never (0)."""
        started = self.clock.now
        self.counters.begin(size, drafted)
        self.loop.run_started(started)
        self.clock.now += 0.010
        self.loop.run_done(started, {"mode": "DECODE", "requests": size, "tokens": None})
        if verified_size != 0:
            self.counters.end(verified_size or size, [2 if drafted else 0] * (verified_size or size))
        self.loop.result_done(self.clock.now, {"mode": "DECODE", "requests": size, "tokens": None})

    def prefill(self, seconds: float) -> None:
        """A prefill batch between two decode steps (outside both their spans, as in the loop without
        overlap)."""
        started = self.clock.now
        self.loop.run_started(started)
        self.clock.now += seconds
        self.loop.run_done(started, {"mode": "EXTEND", "requests": 4, "tokens": 256})
        self.loop.result_done(self.clock.now, {"mode": "EXTEND", "requests": 4, "tokens": 256})

    def save(self, folder: Path, run: str) -> Path:
        (folder / f"stalls-{run}.json").write_text(json.dumps([self.loop.report()]))
        path = folder / f"counters-{run}.json"
        path.write_text(json.dumps([self.counters.snapshot()]))
        return path


def test_each_run_counts_its_own_steps_and_losses_against_the_loops_decode_batches(tmp_path: Path) -> None:
    """Always off counts every batch; a drafting run whose verify comes back with another batch size loses
    that step (unmatched, its launch dropped), and the share counted says so."""
    server = Server()
    for _ in range(10):
        server.decode(16, drafted=False)
    off = server.save(tmp_path, "off")
    for _ in range(8):
        server.decode(16, drafted=True)
    server.decode(16, drafted=True, verified_size=15)  # a verify that matches no launch: that launch dropped
    server.decode(16, drafted=True, verified_size=0)  # a launch that never gets one
    server.decode(16, drafted=True)  # its verify takes that older launch of its size: one step, not two
    on = server.save(tmp_path, "on")
    saved = {counted_runs.run_name(p): counted_runs.read_ranks(p) for p in (on, off)}
    rows = {r.run: r for r in counted_runs.per_run(saved)}
    assert rows["off"].since_launch and not rows["on"].since_launch
    losses = ("steps", "settling", "unmatched", "dropped")
    assert [rows["off"].counts[k] for k in losses] == [10, 0, 0, 0]
    assert rows["off"].decode_batches == 10 and rows["off"].counted_share == 1.0
    assert [rows["on"].counts[k] for k in losses] == [9, 0, 1, 1]
    assert rows["on"].decode_batches == 11 and rows["on"].counted_share == pytest.approx(9 / 11)
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(off), str(on), "--json", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "counted 0.818" in proc.stdout and "off *" in proc.stdout
    assert json.loads(out.read_text())[1]["counted_share"] == pytest.approx(9 / 11)


def test_without_the_loop_file_the_runs_still_print_and_a_bad_block_is_one_line(tmp_path: Path) -> None:
    server = Server()
    server.decode(8, drafted=True)
    path = server.save(tmp_path, "learn")
    (tmp_path / "stalls-learn.json").unlink()
    [row] = counted_runs.per_run({"learn": counted_runs.read_ranks(path)})
    assert row.decode_batches is None and row.counted_share is None
    bad = tmp_path / "counters-threshold-16.json"
    bad.write_text(json.dumps([{"bins": [1, 2], "drafted": {}}]))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {bad}: rank 0: counters.drafted.steps must be a list as long as bins"
    ]


def test_each_run_is_set_against_its_clients_tokens_and_seconds(tmp_path: Path) -> None:
    """The clients' tok/s over the counters' splits into tokens (clients over counters) and the step seconds'
    share of the load's: here the drafting run's clients got 5 % fewer tokens than its steps counted and its
    load ran 1.25x its step seconds; a load cut before its last line is left out."""
    server = Server()
    for _ in range(10):
        server.decode(16, drafted=False)  # 10 ms a step, 16 tokens each: 160 tokens in 0.1 s
    off = server.save(tmp_path, "off")
    (tmp_path / "load-off.log").write_text(
        "t=     5s  target C=16  in flight 16  tok/s   1600.0  done 1  errors 0\n"
        "stopped (duration reached) after 0.1 s: 1 requests done, 0 errors, 160 tokens\n"
    )
    for i in range(20):
        server.decode(16, drafted=True)  # 3 tokens a request a step: 960 tokens in 0.2 s
        if i == 9:
            server.prefill(0.06)  # between two steps: outside both spans, counted (plugin 0.4.13)
    server.counters.keep_tokens(42)  # the last step's requests kept 42 of its 48 (plugin 0.4.13)
    on = server.save(tmp_path, "on")
    (tmp_path / "load-on.log").write_text(
        "stopped (duration reached) after 0.25 s: 3 requests done, 0 errors, 906 tokens\n"
    )
    server.decode(16, drafted=False)
    cut = server.save(tmp_path, "threshold-8")
    cut_log = "t=     5s  target C=16  in flight 16  tok/s  1.0  done 1  errors 0\n"  # no last line
    (tmp_path / "load-threshold-8.log").write_text(cut_log)
    saved = {counted_runs.run_name(p): counted_runs.read_ranks(p) for p in (on, off, cut)}
    clients = {c.run: c for c in counted_runs.against_clients(counted_runs.per_run(saved))}
    assert set(clients) == {"off", "on"}
    assert clients["off"].tokens == 160 and clients["off"].rate_share == pytest.approx(1.0)
    assert clients["on"].tokens == 954 and clients["on"].step_s == pytest.approx(0.2)
    assert clients["on"].not_kept == 6 and clients["off"].not_kept == 0
    assert clients["on"].token_share == pytest.approx(906 / 954)
    assert clients["on"].step_share == pytest.approx(0.8)
    assert clients["on"].rate_share == pytest.approx(0.8 * 906 / 954)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(off), str(on), str(cut)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert clients["on"].loop_s == pytest.approx((0.2, 0.06))  # the loop's DECODE batches: 10 ms each
    assert clients["on"].outside_s == pytest.approx(0.06) and clients["off"].outside_s == 0
    line = "tokens 0.950  steps 0.800  tok/s 0.760  loop DECODE 0.2 s EXTEND 0.1 s  outside the steps 0.06 s"
    assert line + "  tokens not kept 6" in proc.stdout


def test_the_seconds_outside_the_steps_are_shared_per_bin_and_mode_for_each_run(tmp_path: Path) -> None:
    """On the GPU the gaps between steps grow with the batch (2026-12-06: 1-2 % of a step at 16, 6-11 % at
    48-64), so a run's total mixes its bins: each run's own gaps per bin and mode, the run before's taken
    out; a mode with too little step time in a bin is left out."""
    server = Server()
    for i in range(4):
        if i:
            server.prefill(0.004)  # a gap before three of the four drafted steps at 16
        server.decode(16, drafted=True)
    first = server.save(tmp_path, "first")
    server.prefill(0.008)
    for _ in range(4):
        server.decode(48, drafted=False)
        server.prefill(0.008)  # before the next step: three inside the run, the fourth before run two's
    server.decode(16, drafted=True)  # the second run's one drafted step, after that last gap
    second = server.save(tmp_path, "second")
    saved = {counted_runs.run_name(p): counted_runs.read_ranks(p) for p in (first, second)}
    shares = counted_runs.outside_shares(counted_runs.per_run(saved), min_step_s=0.0)
    assert shares["first"][16]["drafted"] == pytest.approx((0.012 / 0.040, 0.040))
    gated = shares["second"][48]["gated"]
    assert gated == pytest.approx((0.032 / 0.040, 0.040))  # the first gap (after run one's steps) and three
    assert shares["second"][16]["drafted"] == pytest.approx((0.008 / 0.010, 0.010))
    assert 48 not in shares["first"] or not shares["first"][48]
    # the default leaves out a mode with under a second of steps in a bin: here, all of them
    assert all(not cell for bins in counted_runs.outside_shares(counted_runs.per_run(saved)).values()
               for cell in bins.values())  # fmt: skip
