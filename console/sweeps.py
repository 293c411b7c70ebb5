"""Start a benchmark sweep from the Benchmarks page: `spectower bench sweep` as a child process.

A subprocess (not an in-page coroutine) so a sweep survives page reloads and its output is a plain log
the page tails. Progress = elapsed / (levels x modes x duration), refined by the log's own lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st
from spectower.console import settings

DEFAULT_LEVELS = "1,2,4,8,16,32,64"
DEFAULT_DURATION_S = 20
SWEEP_KEY = "sweep_job"
LOG_TAIL_LINES = 12
_MODES = 2  # spec on and spec off at each level


@dataclass
class SweepJob:
    argv: list[str]
    log_path: str
    started: float
    expected_s: float
    pid: int
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def poll(self) -> int | None:
        return None if self._proc is None else self._proc.poll()

    def tail(self, n: int = LOG_TAIL_LINES) -> str:
        try:
            lines = Path(self.log_path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()


def sweep_argv(
    server: str, levels: str, duration_s: int, tag: str | None, db_url: str, operator: str | None = None
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "spectower.console.cli",
        "bench",
        "sweep",
        "--server",
        server,
        "--concurrency",
        levels,
        "--duration-per-level",
        str(duration_s),
        "--db",
        db_url,
        "--save",
    ]
    if tag:
        argv += ["--tag", tag]
    if operator:
        argv += ["--as", operator]
    return argv


def start_sweep(
    server: str, levels: str, duration_s: int, tag: str | None, db_url: str, operator: str | None = None
) -> SweepJob:
    n_levels = len([x for x in levels.split(",") if x.strip()])
    log = tempfile.NamedTemporaryFile(prefix="spectower-sweep-", suffix=".log", delete=False)  # noqa: SIM115
    argv = sweep_argv(server, levels, duration_s, tag, db_url, operator)
    # The admin key travels in the environment (it is already there for the console), never in argv.
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "120"},
    )
    log.close()
    return SweepJob(argv, log.name, time.time(), max(1.0, n_levels * _MODES * duration_s), proc.pid, proc)


def render_sweep_form() -> None:
    creds = settings.operator_credentials()
    job: SweepJob | None = st.session_state.get(SWEEP_KEY)
    if job is None:
        if creds.operator is None:
            st.warning(
                f"A sweep flips the knob on the server, so it needs operator credentials: {creds.why_not}."
            )
            return
        server = st.text_input("Server URL", "http://127.0.0.1:30000", key="sw_server")
        levels = st.text_input("Concurrency levels", DEFAULT_LEVELS, key="sw_levels")
        duration = st.number_input("Seconds per level and mode", 2, 3600, DEFAULT_DURATION_S, key="sw_dur")
        tag = st.text_input("Tag", key="sw_tag")
        st.caption(
            "Measures spec on and spec off at every level, restores the knob afterwards, and saves the "
            "run here. Tip: run it off-peak."
        )
        if st.button("Start sweep", type="primary", key="sw_start"):
            st.session_state[SWEEP_KEY] = start_sweep(
                server, levels, int(duration), tag or None, settings.db_url()
            )
            st.rerun()
        return
    st.fragment(run_every=1.0)(_progress)()


def _progress() -> None:
    job: SweepJob | None = st.session_state.get(SWEEP_KEY)
    if job is None:
        return
    rc = job.poll()
    elapsed = time.time() - job.started
    if rc is None:
        st.progress(
            min(0.99, elapsed / job.expected_s),
            text=f"sweep running (pid {job.pid}) · {elapsed:.0f} s of about {job.expected_s:.0f} s",
        )
        if st.button("Stop sweep", key="sw_stop"):
            job.stop()
    elif rc == 0:
        st.success(f"Sweep finished in {elapsed:.0f} s; the run is in the list (Runs tab).")
    else:
        st.error(f"Sweep exited with code {rc}.")
    st.code(job.tail() or "(no output yet)", language="text")
    if rc is not None and st.button("New sweep", key="sw_new"):
        st.session_state.pop(SWEEP_KEY, None)
        st.rerun(scope="app")
