"""gpu/check_acceptance.py's failure: a server that is not up (a launch still capturing its CUDA graphs, as on
the H200 on 2026-12-01) is one line and exit 2, not a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "gpu" / "check_acceptance.py"


def _closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: a connection is refused at once
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_not_up_is_one_line_and_exit_2() -> None:
    port = _closed_port()
    done = subprocess.run([sys.executable, str(SCRIPT), "--server", f"http://127.0.0.1:{port}", "--gated"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr  # one line
    assert done.stderr.startswith("check_acceptance: ConnectError") and "Traceback" not in done.stderr
