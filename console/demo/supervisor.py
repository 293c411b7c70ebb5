"""Child processes the demo owns: each in its own process group (so a stop reaches streamlit's and uvicorn's
own children too), output to a log file, PIDs listed in a file so a test or an operator can check them.

Stopping is SIGTERM to the group, a grace period, then SIGKILL: nothing outlives the demo.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_GRACE_S = 10.0
LOG_TAIL_LINES = 15
PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    ends: bool = False  # a one-shot job (the demo's sweep): its exit is not a death
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the demo dies, even by SIGKILL: no orphans."""
    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the child leads its own group (start_new_session)


class Supervisor:
    def __init__(self, cwd: Path, pids_path: Path) -> None:
        self.cwd = cwd
        self.pids_path = pids_path
        self.children: list[Child] = []

    def start(self, child: Child) -> Child:
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        with child.log_path.open("ab") as log:
            log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} start {child.name}\n".encode())
            log.flush()
            child.proc = subprocess.Popen(
                child.argv, cwd=self.cwd, env=child.env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        self.children.append(child)
        self.write_pids()
        return child

    def write_pids(self) -> None:
        pids = {c.name: c.pid for c in self.children if c.pid is not None}
        tmp = self.pids_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(pids, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.pids_path)

    def first_dead(self) -> Child | None:
        """The first child that should be running and is not (a one-shot job that ended is not dead)."""
        return next((c for c in self.children if not c.ends and not c.running()), None)

    def stop(self, names: Sequence[str] | None = None, grace_s: float = DEFAULT_GRACE_S) -> None:
        """SIGTERM the chosen children (default: all) together, wait up to ``grace_s``, SIGKILL the rest."""
        chosen = [c for c in self.children if names is None or c.name in names]
        for child in chosen:
            if child.proc is not None and child.running():
                _signal_group(child.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in chosen:
            if child.proc is None:
                continue
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(child.proc, signal.SIGKILL)
                child.proc.wait(timeout=10)
            # What the leader started in its group (streamlit's workers, ...) goes too.
            _signal_group(child.proc, signal.SIGKILL)

    def retire(self, names: Sequence[str], grace_s: float = DEFAULT_GRACE_S) -> None:
        """Stop the chosen children for good: their work is done (the sweep's server once the sweep ends),
        so ``first_dead`` no longer counts them, where it took the stopped server for a death and ended the
        demo."""
        for child in self.children:
            if child.name in names:
                child.ends = True
        self.stop(names, grace_s)

    def stop_all(self, order: Sequence[Sequence[str]], grace_s: float = DEFAULT_GRACE_S) -> None:
        """Stop in waves (e.g. the load and the policy before the simulator); then anything left."""
        for wave in order:
            self.stop(wave, grace_s)
        self.stop(None, grace_s)
