"""Run the SGLang simulator as a real subprocess on free loopback ports, for tests and benchmarks.

Usage (stable API; other engineers' tests depend on it)::

    from benchmarks.simulator_process import SimulatorProcess

    with SimulatorProcess(profile="glm5-nvfp4-8x-rtx-pro-6000", admin_key="s3cret") as sim:
        httpx.get(f"{sim.base_url}/server_info")          # SGLang API
        httpx.get(sim.gpu_metrics_url)                      # dcgm-exporter style /metrics
        sim.stop()      # SIGTERM, then SIGKILL after a grace period
        sim.restart()   # same ports, same keys, same flags
        sim.kill()      # SIGKILL (a crash)

or the pytest fixture ``simulator_factory`` (``tests/conftest.py``)::

    def test_x(simulator_factory):
        sim = simulator_factory(profile="llama31-8b-1x-h100", admin_key="k", decode_log_interval=10)

``SimulatorProcess(profile=..., admin_key=None, api_key=None, **flags)``: ``flags`` are the other
``spectower sim serve`` options by their Python names (``seed``, ``decode_log_interval``, ``dp_size``,
``max_running_requests``, ``port``, ``gpu_metrics_port``); ``True`` makes a bare flag. Keys go to the child
through its environment (``SPECTOWER_SIM_ADMIN_API_KEY`` / ``SPECTOWER_SIM_API_KEY``), never argv.
Attributes: ``base_url`` (``http://127.0.0.1:PORT``), ``port``, ``gpu_metrics_port``, ``gpu_metrics_url``
(``.../metrics``), ``admin_key``, ``api_key``, ``admin_headers`` (``{"Authorization": "Bearer ..."}`` or
``{}``), ``pid``, ``output()`` (the child's stdout+stderr so far). The constructor starts the process and
returns once ``/health`` answers 200 (or raises ``RuntimeError`` with the child's output).

``curve_profile(name, concurrency, output_tok_s, max_running_requests=...)``: a test profile's JSON with
exact curves (no noise); ``write_profile(profile, folder)`` writes it for ``profile=``; ``scaled_profile``
scales a shipped one. ``wait_until_ok(url, timeout_s, proc)``: return once a child's health page answers 200.

``steady_load(base_url, clients)``: ``spectower bench load --pattern hover:N`` as a child process (about N
closed-loop clients on /generate until stopped), a context manager; for tests that need a busy server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]
# The installed CLI, run as a module so neither tests nor benchmarks need `spectower` on PATH.
SPECTOWER_CLI = (sys.executable, "-m", "spectower.console.cli")


PORT_ATTEMPTS = 3  # a simulator's first start, on fresh ports each time its port was taken meanwhile


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(output: str) -> bool:
    """Whether a child's output says its port was taken: the CLI's line ("Address already in use", the
    system's words) or uvicorn's own ("address already in use"), which a full suite met on 2026-12-06."""
    return "address already in use" in output.lower()


def wait_until_ok(
    url: str,
    timeout_s: float,
    proc: subprocess.Popen[Any] | None = None,
    output: Callable[[], str] = lambda: "",
) -> None:
    """Return once ``url`` answers 200 (a child's health or readiness page); RuntimeError, with ``output()``
    (the child's log), when ``proc`` exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}:\n{output()}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer 200 within {timeout_s:g} s:\n{output()}")


DEFAULT_PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_STOP_GRACE_S = 10.0


# The GPUs a test profile names (simulator/profile.py's "gpus"): one, as the shipped profiles give it
H200 = {"count": 1, "name": "NVIDIA H200", "memory_mib": 143771, "power_limit_w": 700}
H100 = {"count": 1, "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "power_limit_w": 700}


def curve_profile(
    name: str,
    concurrency: Sequence[float],
    output_tok_s: Mapping[str, Sequence[float]],
    *,
    max_running_requests: int,
    accept_length: float | Sequence[float] = 2.0,
    gpus: Mapping[str, Any] = H200,
    **more: Any,
) -> dict[str, Any]:
    """A profile's JSON (simulator/profile.py) whose curves are exactly ``output_tok_s`` at ``concurrency``:
    EAGLE3 at 3 steps, no per-step noise, prefill at 40k tok/s, served as ``name``. ``accept_length``: one
    value at every level, or one per level; ``more`` sets any other key (description, served_model_name). The
    curves' lists are shared with the caller, not copied."""
    levels = list(concurrency)
    accept = [float(accept_length)] * len(levels) if isinstance(accept_length, int | float) else accept_length
    return {
        "name": name, "served_model_name": name, "gpus": dict(gpus),
        "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        "max_running_requests": max_running_requests, "concurrency": levels,
        "output_tok_s": dict(output_tok_s),  # as given: a test of a bad curve passes one
        "accept_length": list(accept), "prefill_tok_s": 40000.0, "noise_cv": 0.0, **more,
    }  # fmt: skip


def write_profile(profile: Mapping[str, Any], folder: Path) -> str:
    """``profile`` written into ``folder`` as ``<name>.json``; its path, for ``--profile`` and
    ``simulator_factory(profile=...)``."""
    path = folder / f"{profile['name']}.json"
    path.write_text(json.dumps(profile))
    return str(path)


def scaled_profile(name: str, factor: float, folder: Path, **changes: Any) -> str:
    """A shipped profile with every throughput curve times ``factor`` (and ``changes`` on top), written into
    ``folder``; its path, for ``simulator_factory(profile=...)``."""
    profile = json.loads((REPO_ROOT / "simulator" / "profiles" / f"{name}.json").read_text())
    curves = profile["output_tok_s"]
    profile.update(name=f"{name}-x{factor:g}", output_tok_s={mode: [v * factor for v in rates]
                                                             for mode, rates in curves.items()})  # fmt: skip
    profile.update(changes)
    return write_profile(profile, folder)


class SimulatorProcess:
    def __init__(
        self,
        profile: str = DEFAULT_PROFILE,
        admin_key: str | None = None,
        api_key: str | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        **flags: Any,
    ) -> None:
        self.profile = profile
        self.admin_key = admin_key
        self.api_key = api_key
        given_port, given_gpu_port = flags.pop("port", None), flags.pop("gpu_metrics_port", None)
        self.flags = flags
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="spectower-sim-", suffix=".log", delete=False)  # noqa: SIM115
        # A port free_port() found free can be taken before the child binds it (another test's outgoing
        # connection draws from the same ephemeral range; a full suite lost a fleet fixture to that once):
        # ports picked here are picked again when the child says so; ports the caller gave are not.
        for attempt in range(PORT_ATTEMPTS):
            self._use_ports(int(given_port or free_port()), int(given_gpu_port or free_port()))
            try:
                self.start()
                return
            except RuntimeError as exc:
                taken = port_taken(str(exc))
                if not taken or (given_port and given_gpu_port) or attempt == PORT_ATTEMPTS - 1:
                    raise

    def _use_ports(self, port: int, gpu_metrics_port: int) -> None:
        self.port, self.gpu_metrics_port = port, gpu_metrics_port
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.gpu_metrics_url = f"http://127.0.0.1:{self.gpu_metrics_port}/metrics"

    # ---- lifecycle --------------------------------------------------------------------------------
    def _argv(self) -> list[str]:
        argv = [
            sys.executable,
            "-m",
            "spectower.simulator",
            "serve",
            "--profile",
            self.profile,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--gpu-metrics-port",
            str(self.gpu_metrics_port),
        ]
        for name, value in self.flags.items():
            if value is None or value is False:
                continue
            opt = "--" + name.replace("_", "-")
            argv.extend([opt] if value is True else [opt, str(value)])
        return argv

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SPECTOWER_SIM_ADMIN_API_KEY", None)
        env.pop("SPECTOWER_SIM_API_KEY", None)
        if self.admin_key:
            env["SPECTOWER_SIM_ADMIN_API_KEY"] = self.admin_key
        if self.api_key:
            env["SPECTOWER_SIM_API_KEY"] = self.api_key
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self) -> None:
        if self.running:
            return
        self._proc = subprocess.Popen(
            self._argv(),
            cwd=REPO_ROOT,
            env=self._env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_until_ok(f"{self.base_url}/health", self.start_timeout_s, self._proc, self.output)
            self._wait_listening(time.monotonic() + self.start_timeout_s)
        except RuntimeError:
            self.kill()
            raise

    def _wait_listening(self, deadline: float) -> None:
        """Return once the child says it listens on its own port (simulator/server.py prints one line then).
        A /health that answers is not enough: another server may hold the port, e.g. a simulator started at
        the same moment whose GPU-metrics port free_port() handed out here too (its /health answered, and a
        fleet fixture got a dcgm-exporter for an SGLang server); the child then exits on the taken port, and
        the RuntimeError carries "Address already in use" for __init__ to pick fresh ports."""
        ready = f"SGLang API {self.base_url} "
        while ready not in self.output():
            proc = self._proc
            if proc is not None and proc.poll() is not None:
                why = f"the process exited with {proc.returncode}"
            elif time.monotonic() >= deadline:
                why = "it answered /health but never said it listens"
            else:
                time.sleep(0.05)
                continue
            raise RuntimeError(f"{self.base_url}: {why}:\n{self.output()}")

    def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``grace_s``."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL: the process dies as in a crash."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.kill()
        proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop (if running) and start again on the same ports with the same keys and flags."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)

    # ---- info -------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    @property
    def admin_headers(self) -> dict[str, str]:
        key = self.admin_key or self.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def output(self) -> str:
        try:
            return Path(self._log.name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> SimulatorProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SimulatorProcess(profile={self.profile!r}, base_url={self.base_url!r}, pid={self.pid})"


# The ``simulator_factory`` fixture's type: ``(profile=..., admin_key=None, api_key=None, **flags)``.
SimulatorFactory = Callable[..., SimulatorProcess]


@contextlib.contextmanager
def steady_load(base_url: str, clients: int, output_len: int = 128) -> Iterator[subprocess.Popen[bytes]]:
    """About ``clients`` closed-loop streaming clients on ``base_url``'s /generate (the product's own
    `spectower bench load --pattern hover:N`, N-2..N+2 clients) until the block ends."""
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "bench", "load", "--server", base_url, "--pattern", f"hover:{clients}",
         "--api", "generate", "--output-len", str(output_len), "--status-every", "1h"],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)  # the load's Ctrl-C: it stops its clients and exits
        try:
            proc.wait(timeout=DEFAULT_STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
