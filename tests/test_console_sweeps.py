"""Sweeps started from the console (spectower.console.sweeps): listed to every session through state files,
reaped the moment they end, overall progress and time left, the result when done."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from spectower.console import sweeps
from spectower.storage import open_database
from streamlit.testing.v1 import AppTest

from benchmarks import synthetic

APP = str(Path(__file__).resolve().parents[1] / "console" / "app.py")
# A stand-in for `spectower bench sweep`: waits for a go file (so the test decides when it ends), says what
# the real one says when it saved its run, and treats SIGINT as the real one does (keeps going to the end).
FAKE_SWEEP = r"""
import os, signal, sys, time
go = sys.argv[1]
stopped = []
signal.signal(signal.SIGINT, lambda *_: stopped.append(1))
print("C=1 spec on ...", flush=True)
while not os.path.exists(go) and not stopped:
    time.sleep(0.02)
if stopped:
    print("interrupted: kept 0 finished point(s)", flush=True)
    sys.exit(130)
print("saved as run 7 in sqlite:///x.db", flush=True)
"""


@pytest.fixture(autouse=True)
def _sweep_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "sweeps"
    monkeypatch.setenv(sweeps.ENV_SWEEP_DIR, str(folder))
    return folder


def _wait_until(what: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _start(tmp_path: Path, db_url: str = "sqlite:///x.db") -> tuple[sweeps.SweepRecord, Path]:
    go = tmp_path / "go"
    rec = sweeps.start_process(
        [sys.executable, "-c", FAKE_SWEEP, str(go)], db_url, server="http://127.0.0.1:9", levels="1,2",
        duration_s=4, tag=None, actor="operator:test", total_slices=8, expected_s=60,
    )  # fmt: skip
    return rec, go


def _status(rec: sweeps.SweepRecord, db_url: str = "sqlite:///x.db") -> str:
    return next(r for r in sweeps.list_sweeps(db_url) if r.id == rec.id).status


def test_a_sweep_is_seen_from_another_process_reaped_and_its_run_recorded(tmp_path: Path) -> None:
    rec, go = _start(tmp_path)
    assert rec.poll() is None
    # another console process (or session) reads the same state folder
    other = subprocess.run(
        [sys.executable, "-c", "from spectower.console import sweeps; "
         "print([(r.pid, r.status) for r in sweeps.list_sweeps('sqlite:///x.db')])"],
        capture_output=True, text=True, timeout=60, env=os.environ,
    )  # fmt: skip
    assert other.stdout.strip() == str([(rec.pid, "running")]), other.stderr
    go.touch()
    _wait_until(lambda: _status(rec) != "running")
    done = next(r for r in sweeps.list_sweeps("sqlite:///x.db") if r.id == rec.id)
    assert (done.status, done.rc, done.run_id) == ("finished", 0, 7)
    assert rec.poll() == 0  # the record the starting session keeps reads the outcome too
    # reaped at once by the console's waiter thread: no zombie left until the console stops
    with pytest.raises(ChildProcessError):
        os.waitpid(rec.pid, os.WNOHANG)
    assert not Path(f"/proc/{rec.pid}").exists()


def test_stop_interrupts_like_ctrl_c(tmp_path: Path) -> None:
    rec, _ = _start(tmp_path)
    _wait_until(lambda: "C=1" in rec.tail())  # the child has installed its SIGINT handler
    sweeps.stop_sweep(rec, "sqlite:///x.db")
    _wait_until(lambda: _status(rec) != "running")
    done = next(r for r in sweeps.list_sweeps("sqlite:///x.db") if r.id == rec.id)
    assert (done.status, done.rc) == ("stopped", 130)


def test_a_reader_while_the_waiter_records_the_exit_leaves_the_sweep_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiter thread writes the exit code; a reader (another session's rerun) in between must not close
    the sweep from its log first (it once read ("stopped", None) where the waiter then wrote 130)."""
    in_finish, release = threading.Event(), threading.Event()
    real_finish = sweeps._finish

    def held_finish(rec: sweeps.SweepRecord, rc: int | None, folder: Path) -> None:
        if rc is not None and not in_finish.is_set():  # the waiter, with the child's exit code
            in_finish.set()
            release.wait(60)
        real_finish(rec, rc, folder)

    monkeypatch.setattr(sweeps, "_finish", held_finish)
    rec, go = _start(tmp_path)
    go.touch()
    assert in_finish.wait(60), rec.tail()
    seen = _status(rec)  # the child is gone, its exit code not yet written
    release.set()
    _wait_until(lambda: _status(rec) != "running")
    assert seen == "running"
    done = next(r for r in sweeps.list_sweeps("sqlite:///x.db") if r.id == rec.id)
    assert (done.status, done.rc) == ("finished", 0)


def test_poll_reads_the_outcome_as_soon_as_the_waiter_has_written_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the waiter writing the outcome and letting the pid go, the starting session's record already
    reads the exit code (it once said None there: it trusted the pid over the file)."""
    written, release = threading.Event(), threading.Event()
    real_finish = sweeps._finish

    def finish_then_hold(rec: sweeps.SweepRecord, rc: int | None, folder: Path) -> None:
        real_finish(rec, rc, folder)
        if rc is not None:  # the waiter: the outcome is on disk, the pid not yet let go
            written.set()
            release.wait(60)

    monkeypatch.setattr(sweeps, "_finish", finish_then_hold)
    rec, go = _start(tmp_path)
    go.touch()
    try:
        assert written.wait(60), rec.tail()
        with sweeps._LOCK:
            assert rec.pid in sweeps._CHILDREN
        assert rec.poll() == 0
    finally:
        release.set()


def test_a_reader_that_read_the_state_before_the_waiter_recorded_the_exit_does_not_overwrite_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader reads the state file (running), then the sweep ends and its waiter records the exit code and
    lets the pid go, then the reader decides: it must not close the sweep again from its log (rc None)."""
    rec, go = _start(tmp_path)
    state = Path(rec.log_path).parent / f"{rec.id}.json"
    real_read = sweeps._read
    held = threading.Event()

    def ours() -> bool:
        with sweeps._LOCK:
            return rec.pid in sweeps._CHILDREN

    def read_then_let_the_waiter_finish(path: Path) -> sweeps.SweepRecord | None:
        got = real_read(path)
        if path == state and got is not None and got.running and not held.is_set():
            held.set()
            go.touch()  # the sweep ends now; its waiter records the exit and then lets the pid go
            _wait_until(lambda: not ours())
        return got

    monkeypatch.setattr(sweeps, "_read", read_then_let_the_waiter_finish)
    sweeps.list_sweeps("sqlite:///x.db")
    assert held.is_set()
    done = real_read(state)
    assert done is not None and (done.status, done.rc) == ("finished", 0)


def test_a_sweep_whose_console_went_away_is_closed_from_its_log(tmp_path: Path, _sweep_dir: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "print('saved as run 3 in x')"], stdout=subprocess.PIPE)
    out, _ = gone.communicate(timeout=60)
    log = tmp_path / "old.log"
    log.write_bytes(out)
    rec = sweeps.SweepRecord(
        id="1-1", server="http://h:1", levels="1", duration_s=2, rounds=2, tag=None, actor="operator:x",
        pid=gone.pid, started=time.time() - 60, total_slices=4, expected_s=30, log_path=str(log), argv=[],
    )  # fmt: skip
    _sweep_dir.mkdir(parents=True, exist_ok=True)
    (_sweep_dir / "1-1.json").write_text(json.dumps(sweeps.asdict(rec)))
    (listed,) = sweeps.list_sweeps("sqlite:///x.db")
    assert (listed.status, listed.run_id) == ("finished", 3)


def _rec(total: int = 8, expected: float = 100.0, started: float = 1000.0) -> sweeps.SweepRecord:
    return sweeps.SweepRecord(
        id="r", server="http://h:1", levels="1,2", duration_s=10, rounds=2, tag=None, actor="operator:x",
        pid=1, started=started, total_slices=total, expected_s=expected, log_path="/nonexistent", argv=[],
    )  # fmt: skip


def test_progress_uses_the_estimate_until_slices_are_timed() -> None:
    p = sweeps.progress(_rec(), [], now=1025.0)
    assert (p.fraction, p.left_s, p.measured) == (0.25, 75.0, False)
    assert sweeps.progress(_rec(), [], now=5000.0).fraction == 0.99  # overrun: never 100 % while running


def test_progress_follows_the_measured_pace() -> None:
    # slices start every 20 s (not the 12.5 s the estimate assumed): 3 done, half into the 4th
    starts = [1005.0, 1025.0, 1045.0, 1065.0]
    p = sweeps.progress(_rec(), starts, now=1075.0)
    assert p.measured and p.done_slices == 3
    assert p.fraction == pytest.approx(3.5 / 8)
    assert p.left_s == pytest.approx(4.5 * 20)


def test_the_up_front_estimate_counts_warm_up_and_drain() -> None:
    # 3 levels x 2 modes x 2 rounds = 12 slices of 2 s each, plus their overhead and the start
    assert sweeps.expected_seconds(3, 4.0) == sweeps.START_OVERHEAD_S + 12 * (2.0 + sweeps.SLICE_OVERHEAD_S)


def test_slice_starts_come_from_the_sweeps_own_writes() -> None:
    move = {"writer": "sweep", "value": 0, "previous": 64, "ts": 5.0}
    assert sweeps.is_slice_start(move) and sweeps.last_write_ts(move) == 5.0
    borrow = {"writer": "sweep", "value": 13, "previous": 13, "ts": 4.0}
    restore = {"writer": "sweep", "value": 13, "previous": 0, "ts": 9.0, "release": True}
    policy = {"writer": "policy", "value": 9, "previous": 13, "ts": 3.0}
    assert not any(sweeps.is_slice_start(b) for b in (borrow, restore, policy, {}, None))
    assert sweeps.last_write_ts(None) is None


def test_a_last_write_time_no_float_can_hold_is_no_time() -> None:
    assert sweeps.last_write_ts({"ts": 10**400}) is None
    assert sweeps.last_write_ts({"ts": float("nan")}) is None and sweeps.last_write_ts({"ts": True}) is None
    assert sweeps.last_write_ts({"ts": 12.5}) == 12.5


def test_a_server_answering_odd_rows_does_not_stop_the_watch_reaping_the_sweep(
    tmp_path: Path, real_data: Path
) -> None:
    """The watch thread once died on a 400-digit last-write time: the child was never reaped and the sweep
    showed "running" for ever."""
    capture = real_data / "sglang-0.5.17-h200" / "server_info_after.json"
    doc = json.loads(capture.read_text(encoding="utf-8"))
    answers = []
    for ts in (10**400, "later", 10**400 + 1):
        bad = json.loads(json.dumps(doc))
        bad["internal_states"][0]["spectower"]["last_write"] = {"ts": ts, "writer": "sweep", "value": 0,
                                                                "previous": 64}  # fmt: skip
        answers.append(json.dumps(bad).encode())
    answers.append(b"[1, 2")  # not JSON at all
    served = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers[len(served) % len(answers)]
            served.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        go = tmp_path / "go"
        rec = sweeps.start_process(
            [sys.executable, "-c", FAKE_SWEEP, str(go)], "sqlite:///x.db",
            server=f"http://127.0.0.1:{server.server_address[1]}", levels="1", duration_s=4, tag=None,
            actor="operator:test", total_slices=2, expected_s=60,
        )  # fmt: skip
        _wait_until(lambda: len(served) >= 5)  # every kind of odd answer read at least once
        go.touch()
        _wait_until(lambda: _status(rec) != "running")
        done = next(r for r in sweeps.list_sweeps("sqlite:///x.db") if r.id == rec.id)
        assert (done.status, done.rc, done.run_id) == ("finished", 0, 7)
        with pytest.raises(ChildProcessError):
            os.waitpid(rec.pid, os.WNOHANG)
    finally:
        server.shutdown()
        server.server_close()


def test_sweep_argv_saves_where_the_console_reads() -> None:
    argv = sweeps.sweep_argv(
        sweeps.SweepRequest("http://h:1", "1,2", 5, "t", "sqlite:///a.db", "dana", force=True)
    )
    assert argv[argv.index("--db") + 1] == "sqlite:///a.db" and "--save" in argv
    assert argv[-3:] == ["--as", "dana", "--force"]


def test_a_sweep_request_gives_the_command_and_the_record_the_same_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one SweepRequest: the argv gets the URL as typed, the record (one sweep per server) the trimmed URL,
    # and the slice count and estimate the levels that are there
    request = sweeps.SweepRequest(" http://h:1/ ", "1, 4,,16", 5, None, "sqlite:///a.db", None)
    assert request.server_url == "http://h:1" and request.n_levels == 3
    seen: dict[str, object] = {}

    def fake_start(argv: list[str], db_url: str, **record: object) -> None:
        seen.update(record, argv=argv, db_url=db_url)

    monkeypatch.setattr(sweeps, "start_process", fake_start)
    sweeps.start_sweep(request)
    assert seen["argv"] == sweeps.sweep_argv(request) and seen["db_url"] == "sqlite:///a.db"
    assert seen["server"] == "http://h:1" and seen["levels"] == "1, 4,,16"
    assert seen["actor"] == "operator:unknown"
    assert seen["total_slices"] == 3 * len(sweeps.MODE_CHOICES) * sweeps.DEFAULT_ROUNDS
    assert seen["expected_s"] == sweeps.expected_seconds(3, 5) and seen["duration_s"] == 5.0


def test_benchmarks_page_lists_a_sweep_another_session_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    with open_database(url) as store:
        now = time.time()
        synthetic.fill(store, t0=now - 600, t1=now, servers=1, gpus=0, step_s=5.0)
    rec, go = _start(tmp_path, url)
    try:
        monkeypatch.setenv("SPECTOWER_DB", url)
        at = AppTest.from_file(APP, default_timeout=120)
        at.run()
        at.switch_page("pages/benchmarks.py")
        at.run()
        at.radio(key="bench_section").set_value("Start a sweep").run()
        assert not at.exception
        bars = at.get("progress")
        assert len(bars) == 1 and "slice 0 of 8" in bars[0].proto.text and "left" in bars[0].proto.text
        assert any("operator:test" in c.value for c in at.caption)
    finally:
        go.touch()
    _wait_until(lambda: _status(rec, url) == "finished")


@pytest.fixture(autouse=True)
def _no_stray_children() -> None:
    yield
    for pid in list(sweeps._CHILDREN):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
