"""Start a benchmark sweep from the Benchmarks page: `spectower bench sweep` as a child process.

A subprocess (not an in-page coroutine) so a sweep survives page reloads and its output is a plain log
the page tails. Every sweep is a small JSON state file in a folder shared by every session of every console
on this database (``state_dir``), so a second browser sees a sweep the first one started; a thread per
child waits on it, so a finished sweep is reaped at once (no zombie) and its outcome written to its file.

Progress is measured where it can be: the sweep moves the knob once per slice (levels x rounds x modes
slices), and the server's /server_info reports its last write (writer ``sweep``, with a timestamp). The
waiter thread reads it twice a second and appends each new slice's start to ``<id>.moves``; done / total
slices and the pace so far give the overall progress and the time left. Before the first slices (or when
/server_info cannot be read) an up-front estimate that counts warm-up and drain.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import streamlit as st

from ..collectors.bench.sweep import DEFAULT_CONCURRENCY, DEFAULT_ROUNDS, MODE_CHOICES
from ..collectors.bench.sweep import DEFAULT_DURATION_S as SWEEP_DURATION_S
from . import settings

DEFAULT_LEVELS = ",".join(str(c) for c in DEFAULT_CONCURRENCY)
DEFAULT_DURATION_S = int(SWEEP_DURATION_S)
LOG_TAIL_LINES = 12
ENV_SWEEP_DIR = "SPECTOWER_SWEEP_DIR"
# Before the first slice is timed: per slice, the warm-up requests and the in-flight requests finishing
# after the slice's duration; per sweep, reading the server and the final knob restore.
SLICE_OVERHEAD_S = 5.0
START_OVERHEAD_S = 5.0
RECENT_FINISHED = 3  # finished sweeps listed under the running ones
_MODES = len(MODE_CHOICES)  # the sweep's knob modes at each level (spec on, spec off)
SEEN_RUNNING_KEY = "sw_seen_running"
SWEEP_KEY = "sweep_job"  # the SweepRecord this session started last (every session lists all of them)
_SAVED_RE = re.compile(r"saved as run (\d+)")

# Children this console process started: a waiter thread per child reaps it and records the outcome.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_LOCK = threading.Lock()


@dataclass
class SweepRecord:
    """One sweep, as every session sees it (the JSON state file's content)."""

    id: str
    server: str
    levels: str
    duration_s: float
    rounds: int
    tag: str | None
    actor: str
    pid: int
    started: float
    total_slices: int
    expected_s: float
    log_path: str
    argv: list[str]
    status: str = "running"  # running | finished | failed | stopped
    rc: int | None = None
    finished: float | None = None
    run_id: int | None = None
    stop_requested: bool = False

    @property
    def running(self) -> bool:
        return self.status == "running"

    def poll(self) -> int | None:
        """The exit code once the sweep has ended (its state file says so), None while it runs. The file
        alone decides: the waiter thread writes the outcome there before it lets the pid go."""
        latest = _read(Path(self.log_path).parent / f"{self.id}.json")
        if latest is None or latest.running:
            return None
        return latest.rc if latest.rc is not None else (0 if latest.status == "finished" else 1)

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        try:
            lines = Path(self.log_path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def state_dir(db_url: str) -> Path:
    """Where this database's sweeps are recorded: ``$SPECTOWER_SWEEP_DIR`` or a folder per database URL
    in the system's temp folder (shared by every console process on this host)."""
    root = os.environ.get(ENV_SWEEP_DIR)
    if root:
        path = Path(root)
    else:
        digest = hashlib.sha256(db_url.encode()).hexdigest()[:12]
        path = Path(tempfile.gettempdir()) / f"spectower-sweeps-{digest}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write(rec: SweepRecord, folder: Path) -> None:
    from ..storage.files import atomic_write_text

    atomic_write_text(folder / f"{rec.id}.json", json.dumps(asdict(rec)))  # a reader never sees half a file


def _read(path: Path) -> SweepRecord | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    names = {f.name for f in fields(SweepRecord)}
    try:
        return SweepRecord(**{k: v for k, v in raw.items() if k in names})
    except TypeError:
        return None


def expected_seconds(n_levels: int, duration_s: float, rounds: int = DEFAULT_ROUNDS) -> float:
    """The sweep's length before any slice is timed: every slice's share of the duration plus its
    warm-up and drain, and the start and restore."""
    slices = n_levels * _MODES * rounds
    return START_OVERHEAD_S + slices * (duration_s / rounds + SLICE_OVERHEAD_S)


@dataclass(frozen=True)
class SweepRequest:
    """One sweep as the Benchmarks form asks for it: the server URL and the comma-separated ``levels`` as
    typed, seconds per level and mode, the database the run is saved into, the signed-in operator. One
    object, so the command line (``sweep_argv``) and the record (``start_sweep``) read the same fields."""

    server: str
    levels: str
    duration_s: int
    tag: str | None
    db_url: str
    operator: str | None = None
    force: bool = False

    @property
    def server_url(self) -> str:
        """The server as a sweep's record names it: one sweep at a time runs per this URL."""
        return self.server.strip().rstrip("/")

    @property
    def n_levels(self) -> int:
        """How many concurrency levels ``levels`` names (empty items, as in ``1,,4``, do not count)."""
        return len([x for x in self.levels.split(",") if x.strip()])


def sweep_argv(request: SweepRequest) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "spectower.console.cli",
        "bench",
        "sweep",
        "--server",
        request.server,
        "--concurrency",
        request.levels,
        "--duration-per-level",
        str(request.duration_s),
        "--db",
        request.db_url,
        "--save",
    ]
    if request.tag:
        argv += ["--tag", request.tag]
    if request.operator:
        argv += ["--as", request.operator]
    if request.force:
        argv += ["--force"]
    return argv


def start_sweep(request: SweepRequest) -> SweepRecord:
    actor = f"operator:{request.operator}" if request.operator else "operator:unknown"
    return start_process(
        sweep_argv(request), request.db_url, server=request.server_url, levels=request.levels,
        duration_s=float(request.duration_s), tag=request.tag, actor=actor,
        total_slices=request.n_levels * _MODES * DEFAULT_ROUNDS,
        expected_s=expected_seconds(request.n_levels, request.duration_s),
    )  # fmt: skip


def start_process(
    argv: list[str],
    db_url: str,
    *,
    server: str,
    levels: str,
    duration_s: float,
    tag: str | None,
    actor: str,
    total_slices: int,
    expected_s: float,
) -> SweepRecord:
    """Start ``argv`` as a recorded sweep (log and state file in ``state_dir``), reaped when it ends."""
    folder = state_dir(db_url)
    started = time.time()
    log_path = folder / f"sweep-{int(started * 1000)}.log"
    with open(log_path, "wb") as log:
        # The admin key travels in the environment (it is already there for the console), never in argv.
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"},
        )
    rec = SweepRecord(
        id=f"{int(started * 1000)}-{proc.pid}", server=server, levels=levels, duration_s=duration_s,
        rounds=DEFAULT_ROUNDS, tag=tag, actor=actor, pid=proc.pid, started=started,
        total_slices=max(1, total_slices), expected_s=max(1.0, expected_s), log_path=str(log_path), argv=argv,
    )  # fmt: skip
    _write(rec, folder)
    with _LOCK:
        _CHILDREN[proc.pid] = proc
    threading.Thread(target=_wait, args=(proc, rec, folder), daemon=True, name=f"sweep-{proc.pid}").start()
    return rec


WATCH_INTERVAL_S = 0.5
WATCH_READ_S = 2.0  # one /server_info read of the watch, all of it


def last_write_ts(last_write: Mapping[str, Any] | None) -> float | None:
    ts = (last_write or {}).get("ts")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return None
    try:
        value = float(ts)
    except OverflowError:  # an integer past a float's range: no time
        return None
    return value if math.isfinite(value) else None


def is_slice_start(last_write: Mapping[str, Any] | None) -> bool:
    """Whether one rank's last write (``RankState.last_write``) is the sweep's start of a slice: a move to a
    new value (not the borrow, which keeps the value, nor the restore)."""
    return (
        last_write is not None
        and last_write.get("writer") == "sweep"
        and not last_write.get("release")
        and last_write.get("value") != last_write.get("previous")
    )


def _watch_headers() -> dict[str, str]:
    """The API key of an --api-key server (the one key reader); none when it cannot be read: the watch is
    only for the progress bar, and the sweep itself reports a bad key."""
    from ..collectors.auth import CredentialError, auth_headers, load_api_key

    try:
        return auth_headers(load_api_key())
    except CredentialError:
        return {}


def _wait(proc: subprocess.Popen[bytes], rec: SweepRecord, folder: Path) -> None:
    """Watch the sweep's knob moves until the child exits, reap it at once and record how it ended."""
    moves = folder / f"{rec.id}.moves"
    seen: set[float] = set()
    baseline: float | None = None  # the write before the sweep (server clock; only compared with itself)
    first = True
    from ..collectors.http import request_bounded_sync
    from ..collectors.sglang.server_info import parse_server_info
    from ..control.knob import MAX_SERVER_INFO_BYTES

    try:
        with httpx.Client(headers=_watch_headers()) as http:
            while True:
                try:
                    proc.wait(timeout=WATCH_INTERVAL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                try:
                    url = f"{rec.server}/server_info"
                    answer = request_bounded_sync(http, "GET", url, timeout_s=WATCH_READ_S,
                                                  max_bytes=MAX_SERVER_INFO_BYTES)  # fmt: skip
                    info = parse_server_info(answer.json())
                    last = info.ranks[0].last_write if info.ranks else None
                    ts = last_write_ts(last)
                    if first:  # read before the child has written anything (it takes a second to start)
                        baseline, first = ts, False
                        continue
                    if ts is None or ts in seen or (baseline is not None and ts <= baseline):
                        continue
                    seen.add(ts)
                    if is_slice_start(last):
                        with open(moves, "a", encoding="utf-8") as fh:
                            fh.write(f"{time.time()}\n")  # this host's clock, as the progress maths uses
                except Exception:  # no reading this time (an odd answer, a full disk): the estimate stands in
                    continue
    finally:
        # Reap and record however the watch went: a record left open would show "running" for ever.
        if proc.returncode is None:
            proc.wait()
        _reap(proc, rec, folder)


def _reap(proc: subprocess.Popen[bytes], rec: SweepRecord, folder: Path) -> None:
    rc = proc.returncode
    latest = _read(folder / f"{rec.id}.json")  # it may say stop_requested since
    if latest is not None:
        _finish(latest, rc, folder)
    # Only now: while the pid is ours, list_sweeps leaves the record to this thread; popped before the exit
    # code was written, a reader in that gap closed it from its log without one (rc None).
    with _LOCK:
        _CHILDREN.pop(proc.pid, None)


def _finish(rec: SweepRecord, rc: int | None, folder: Path) -> None:
    saved = _SAVED_RE.findall(rec.tail(400))
    rec.run_id = int(saved[-1]) if saved else None
    rec.rc = rc
    rec.finished = time.time()
    if rec.stop_requested:
        rec.status = "stopped"
    elif rc == 0 or (rc is None and rec.run_id is not None):
        rec.status = "finished"
    else:
        rec.status = "failed"
    _write(rec, folder)


def _alive(rec: SweepRecord) -> bool:
    """Whether the sweep's process still runs (a zombie, or a reused pid running something else, does not)."""
    try:
        with open(f"/proc/{rec.pid}/stat", encoding="utf-8") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/{rec.pid}/cmdline", "rb") as fh:
            cmd = fh.read().split(b"\0")
    except (OSError, IndexError):
        try:  # no /proc: the pid's existence is all there is
            os.kill(rec.pid, 0)
        except OSError:
            return False
        return True
    return state != "Z" and cmd[: len(rec.argv)] == [a.encode() for a in rec.argv]


def list_sweeps(db_url: str) -> list[SweepRecord]:
    """Every recorded sweep, newest first; a running one whose process is gone (a console that stopped,
    another host's console) is closed from its log."""
    folder = state_dir(db_url)
    # This console's children, taken BEFORE any file is read: a waiter writes its sweep's outcome and only
    # then lets the pid go, so a pid missing here has its outcome on disk already. (Checked after the read,
    # a waiter finishing in between made this reader close the sweep again from its log, without the code.)
    with _LOCK:
        ours = set(_CHILDREN)
    out = []
    for path in folder.glob("*.json"):
        rec = _read(path)
        if rec is None:
            continue
        if rec.running and rec.pid not in ours and not _alive(rec):
            # Another console's sweep, or one whose console went away: read again just before closing it
            # from its log, in case its own waiter (in another process) has recorded it meanwhile.
            latest = _read(path) or rec
            if latest.running:
                _finish(latest, None, folder)
            rec = latest
        out.append(rec)
    return sorted(out, key=lambda r: r.started, reverse=True)


def stop_sweep(rec: SweepRecord, db_url: str) -> None:
    """SIGINT, as Ctrl-C: the sweep keeps its finished points and restores the knob it found."""
    rec.stop_requested = True
    _write(rec, state_dir(db_url))
    with contextlib.suppress(OSError):
        os.kill(rec.pid, signal.SIGINT)


@dataclass(frozen=True)
class Progress:
    fraction: float  # 0..1 of the whole sweep
    done_slices: int
    left_s: float | None  # None: nothing to go on yet
    measured: bool  # True when the pace comes from the slices so far, not the up-front estimate


def progress(rec: SweepRecord, knob_set_ts: list[float], now: float | None = None) -> Progress:
    """Overall progress from the sweep's knob moves (one per slice start, ``knob_set_ts`` sorted)."""
    now = time.time() if now is None else now
    elapsed = max(0.0, now - rec.started)
    started = len(knob_set_ts)
    done = max(0, min(rec.total_slices, started - 1))
    if done >= 1:
        per_slice = (knob_set_ts[-1] - knob_set_ts[0]) / done
        into = min(1.0, (now - knob_set_ts[-1]) / per_slice) if per_slice > 0 else 0.0
        fraction = min(0.99, (done + into) / rec.total_slices)
        left = max(0.0, (rec.total_slices - done - into) * per_slice)
        return Progress(fraction, done, left, True)
    fraction = min(0.99, elapsed / rec.expected_s)
    return Progress(fraction, done, max(0.0, rec.expected_s - elapsed), False)


def duration_text(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


DEFAULT_SERVER = "http://127.0.0.1:30000"


def render_sweep_form(default_server: str | None = None) -> None:
    """Running and recent sweeps (every session sees them), then the form to start one (``default_server``:
    the collected server the form offers first)."""
    from .views import common

    st.fragment(run_every=2.0)(common.shows_database_errors(_sweeps_panel))()
    creds = settings.operator_credentials()
    st.subheader("Start a sweep")
    if creds.operator is None:
        st.warning(
            f"A sweep flips the knob on the server, so it needs operator credentials: {creds.why_not}."
        )
        return
    server = st.text_input("Server URL", default_server or DEFAULT_SERVER, key="sw_server")
    levels = st.text_input("Concurrency levels", DEFAULT_LEVELS, key="sw_levels")
    duration = st.number_input("Seconds per level and mode", 2, 3600, DEFAULT_DURATION_S, key="sw_dur")
    tag = st.text_input("Tag", key="sw_tag")
    force = st.checkbox(
        "Even while the server serves traffic (--force)", key="sw_force",
        help="A sweep moves the knob for everyone on the server; without this it refuses a busy server.",
    )  # fmt: skip
    request = SweepRequest(
        server, levels, int(duration), tag or None, settings.db_url(), creds.operator.name, force
    )
    st.caption(
        "Measures spec on and spec off at every level, restores the knob afterwards, and saves the run "
        f"here (`--save`). About {duration_text(expected_seconds(request.n_levels, float(duration)))}. "
        "Tip: run it off-peak."
    )
    busy = [r for r in list_sweeps(request.db_url) if r.running and r.server == request.server_url]
    if busy:
        st.info(
            f"A sweep is already running on {server} (started by {busy[0].actor}); one at a time per server."
        )
    if st.button("Start sweep", type="primary", key="sw_start", disabled=bool(busy)):
        st.session_state[SWEEP_KEY] = start_sweep(request)
        st.rerun()


def slice_starts(rec: SweepRecord, db_url: str) -> list[float]:
    """The slice starts the waiter thread saw (sorted)."""
    try:
        text = (state_dir(db_url) / f"{rec.id}.moves").read_text(encoding="utf-8")
    except OSError:
        return []
    return sorted(float(x) for x in text.split())


def _sweeps_panel() -> None:
    db_url = settings.db_url()
    recs = list_sweeps(db_url)
    running = [r for r in recs if r.running]
    done = [r for r in recs if not r.running][:RECENT_FINISHED]
    # a sweep this page saw running has ended: redraw the whole page (the form, the Runs list) once
    ids = {r.id for r in running}
    seen = st.session_state.get(SEEN_RUNNING_KEY, set())
    st.session_state[SEEN_RUNNING_KEY] = ids
    if seen - ids:
        st.rerun(scope="app")
    st.subheader("Sweeps")
    if not recs:
        st.caption("No sweep started from a console on this database yet.")
        return
    for rec in running:
        with st.container(border=True):
            p = progress(rec, slice_starts(rec, db_url))
            left = "estimating" if p.left_s is None else f"about {duration_text(p.left_s)} left"
            basis = "measured pace" if p.measured else "estimate"
            st.progress(
                p.fraction,
                text=f"{rec.server} · levels {rec.levels} · slice {p.done_slices} of {rec.total_slices} · "
                f"{100 * p.fraction:.0f} % · {left} ({basis})",
            )
            st.caption(
                f"Started by {rec.actor} {duration_text(time.time() - rec.started)} ago · pid {rec.pid}"
                + (" · stopping (restoring the knob)" if rec.stop_requested else "")
            )
            if not rec.stop_requested and st.button("Stop sweep", key=f"sw_stop_{rec.id}"):
                stop_sweep(rec, db_url)
                st.rerun(scope="fragment")
            with st.expander("Log"):
                st.code(rec.tail() or "(no output yet)", language="text")
    for i, rec in enumerate(done):
        took = duration_text((rec.finished or rec.started) - rec.started)
        if rec.status == "finished":
            st.success(
                f"Sweep finished in {took} on {rec.server} ({rec.levels})"
                + (f": run #{rec.run_id}, in the Runs list." if rec.run_id is not None else ".")
            )
            if i == 0 and rec.run_id is not None:
                _result(rec.run_id)
        elif rec.status == "stopped":
            st.warning(f"Sweep on {rec.server} stopped after {took}; the knob was restored.")
        else:
            st.error(f"Sweep on {rec.server} exited with code {rec.rc} after {took}.")
            with st.expander("Log"):
                st.code(rec.tail() or "(no output)", language="text")


def _result(run_id: int) -> None:
    """The newest finished sweep's outcome: crossover, best knob, speedup with its interval."""
    from . import bench_charts, data, estimate
    from .views import common

    db = common.database()
    if db is None:
        return
    runs = data.bench_runs(db)
    row = runs[runs["id"] == run_id]
    if row.empty:
        return
    points = data.bench_points(db, [run_id])
    curve = estimate.bench_speedup(points)
    stored = row.iloc[0]["crossover"]
    cs, ss = list(curve["concurrency"]), list(curve["speedup"])
    # the sweep's own crossover when it stored one, else the Runs list's rule on its points (same as shown)
    cross = float(stored) if not pd.isna(stored) else (estimate.crossover(cs, ss) if cs else None)
    c1, c2 = st.columns(2)
    c1.metric("Crossover", common.fmt(cross, 1) if cross is not None else estimate.crossover_label(cs, ss))
    best = row.iloc[0]["best_max_bs"]
    c2.metric("Best knob", "—" if pd.isna(best) else str(int(best)))
    fig = bench_charts.bench_speedups({f"#{run_id}": curve}, {f"#{run_id}": cross})
    common.chart(fig, curve, f"sw_result_{run_id}", f"run{run_id}-speedup")
