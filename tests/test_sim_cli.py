"""`spectower sim serve` / `python -m spectower.simulator`: start-up line, clean errors, clean shutdown."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from spectower.simulator.profile import load_profile

from tests.conftest import REPO_ROOT, cli_in_process, free_port

SPECTOWER = shutil.which("spectower")

SIM = (sys.executable, "-m", "spectower.simulator")


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def _sim(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m spectower.simulator ARGS`` by its ``main`` in this process (a refusal before serving)."""
    return cli_in_process(*args, module="spectower.simulator.__main__")


def _bad_profile(tmp_path: Path, mutate: str) -> Path:
    data = load_profile("glm5-nvfp4-8x-rtx-pro-6000").to_json()
    if mutate == "missing":
        del data["prefill_tok_s"]
    elif mutate == "unsorted":
        data["concurrency"] = [1, 2, 8, 4, 16, 32, 64]
    elif mutate == "length":
        data["accept_length"] = data["accept_length"][:3]
    path = tmp_path / f"{mutate}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "key"),
    [("missing", "prefill_tok_s"), ("unsorted", "concurrency"), ("length", "accept_length")],
)
@pytest.mark.parametrize("entry", ["spectower", "module"])
def test_malformed_profile_one_clear_error_exit_2(tmp_path: Path, mutate: str, key: str, entry: str) -> None:
    path = _bad_profile(tmp_path, mutate)
    args = ["--profile", str(path), "--port", str(free_port())]
    if entry == "spectower":
        res = cli_in_process("sim", "serve", *args)
    else:  # the entry point as a process once (test_a_parse_error_...: its error lines as a process)
        res = _run([*SIM, "serve", *args]) if mutate == "missing" else _sim("serve", *args)
    assert res.returncode == 2, res
    assert "Traceback" not in res.stderr + res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    assert key in lines[0]


def test_unknown_profile_name_and_bad_flags(tmp_path: Path) -> None:
    res = _sim("--profile", "nope", "--port", str(free_port()))
    assert res.returncode == 2 and "nope" in res.stderr and "Traceback" not in res.stderr
    res = _sim("--profile", "llama31-8b-1x-h100", "--dp-size", "0")
    assert res.returncode == 2 and "dp-size" in res.stderr and "Traceback" not in res.stderr
    # 1e5 took 12 s and 1.1 GB before it served; 1e20 grew without end
    res = _sim("--profile", "llama31-8b-1x-h100", "--dp-size", "100000")
    assert res.returncode == 2 and "dp-size must be between 1 and 256, got 100000" in res.stderr
    res = _sim("--profile", "llama31-8b-1x-h100", "--admin-api-key-file", str(tmp_path / "missing.key"))
    assert res.returncode == 2 and "admin API key file" in res.stderr and "Traceback" not in res.stderr


def test_no_key_flags_on_the_command_line() -> None:
    res = _run([*SIM, "--help"])
    assert res.returncode == 0
    assert "--admin-api-key-file" in res.stdout
    assert "--admin-api-key " not in res.stdout and "--api-key " not in res.stdout


@pytest.mark.skipif(SPECTOWER is None, reason="the spectower console script is not installed")
def test_serve_prints_urls_and_stops_on_sigterm() -> None:
    port, gpu_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            SPECTOWER or "",
            "sim",
            "serve",
            "--profile",
            "llama31-8b-1x-h100",
            "--port",
            str(port),
            "--gpu-metrics-port",
            str(gpu_port),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}" in line and f"http://127.0.0.1:{gpu_port}/metrics" in line
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - t0 < 15
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_port_in_use_is_one_clear_error() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = _run([*SIM, "--profile", "llama31-8b-1x-h100", "--port", str(port)])
    assert res.returncode == 2, res
    assert "Traceback" not in res.stderr
    assert f"--port: cannot listen on 127.0.0.1:{port}" in res.stderr


def test_a_bad_exploration_share_is_one_clear_error_naming_its_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = ["--profile", "llama31-8b-1x-h100", "--port", str(free_port())]
    res = _sim(*base, "--explore-share", "0.5")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res
    assert "--explore-share must be a number in 0..0.2, got 0.5" in res.stderr
    monkeypatch.setenv("SPECTOWER_EXPLORE_SHARE", "lots")
    res = _sim(*base)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res
    assert "SPECTOWER_EXPLORE_SHARE must be a number in 0..0.2" in res.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--bogus"], "No such option: --bogus"),
        (["serve", "--bogus"], "No such option: --bogus"),
        (["--profile", "llama31-8b-1x-h100", "--port", "abc"], "Invalid value for '--port'"),
    ],
)
def test_a_parse_error_is_one_line_as_every_spectower_command(args: list[str], named: str) -> None:
    # typer's standalone mode printed its rich usage box here; `spectower ...` says one `error:` line
    res = _run([*SIM, *args])
    assert res.returncode == 2, res
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: python -m spectower.simulator: "), res.stderr
    assert named in lines[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout and "╭" not in res.stderr + res.stdout


def test_the_listening_socket_holds_its_port_from_the_check_to_the_server() -> None:
    """The CLI binds each port itself and hands the socket to uvicorn: between its check and the server's
    bind no other process can take the port (a full suite's simulator lost that race on 2026-12-06, and
    uvicorn's bind error came out as a traceback)."""
    import errno
    import socket

    from spectower.simulator.cli import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        with socket.socket() as other:
            with pytest.raises(OSError) as err:
                other.bind(("127.0.0.1", port))
            assert err.value.errno == errno.EADDRINUSE
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it listens: a connection is queued for the server
    finally:
        sock.close()


def test_a_taken_metrics_port_is_one_error_line_and_the_api_socket_is_let_go() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        api = free_port()
        res = _sim("--profile", "llama31-8b-1x-h100", "--port", str(api), "--gpu-metrics-port", str(busy))
    assert res.returncode == 2 and "Traceback" not in res.stderr, res
    assert f"--gpu-metrics-port: cannot listen on 127.0.0.1:{busy}" in res.stderr
    with socket.socket() as again:  # the API's socket, bound first, was closed with the refusal
        again.bind(("127.0.0.1", api))
