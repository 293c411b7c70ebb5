"""Who clicked (console/settings.py: shared operator, Streamlit OIDC, a trusted proxy's header) and which Host
the console accepts (Streamlit's server.allowedHosts, set by `spectower console`): a DNS-rebinding Host is
refused on the WebSocket every page needs (403, not 101)."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from spectower.console import settings
from spectower.console.commands.ui import APP_PATH, streamlit_argv

from benchmarks.simulator_process import wait_until_ok
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, free_port

KEY = {"SPECTOWER_ADMIN_KEY": "k"}


def test_shared_operator_is_the_local_default() -> None:
    status = settings.operator_credentials({**KEY, "SPECTOWER_OPERATOR": "ops"}, {})
    assert status.operator is not None and status.operator.actor == "operator:ops"
    assert status.identity == "shared"


def test_oidc_identity_comes_from_st_user() -> None:
    env = {**KEY, "SPECTOWER_CONSOLE_IDENTITY": "oidc", "SPECTOWER_OPERATOR": "shared-name"}
    nobody = settings.operator_credentials(env, {}, user={"is_logged_in": False})
    assert nobody.operator is None and nobody.login_needed and "sign in" in nobody.why_not
    alice = settings.operator_credentials(
        env, {}, user={"is_logged_in": True, "email": "alice@example.com", "name": "Alice A."}
    )
    assert alice.operator is not None and alice.operator.actor == "operator:alice@example.com"
    odd = settings.operator_credentials(env, {}, user={"is_logged_in": True, "sub": "a b/c"})
    assert odd.operator is not None and odd.operator.name == "a_b_c"  # an audit-safe actor name


def test_trusted_proxy_header_identity() -> None:
    env = {**KEY, "SPECTOWER_CONSOLE_IDENTITY": "header", "SPECTOWER_IDENTITY_HEADER": "X-Auth-Request-User"}
    bob = settings.operator_credentials(env, {}, headers={"x-auth-request-user": "bob"})
    assert bob.operator is not None and bob.operator.actor == "operator:bob" and bob.identity == "header"
    missing = settings.operator_credentials(env, {}, headers={"x-forwarded-user": "eve"})
    assert missing.operator is None and "X-Auth-Request-User" in missing.why_not
    bad = settings.operator_credentials({**KEY, "SPECTOWER_CONSOLE_IDENTITY": "ldap"}, {})
    assert bad.operator is None and "SPECTOWER_CONSOLE_IDENTITY must be one of" in bad.why_not


def test_allowed_hosts_are_loopback_the_bind_address_and_the_proxy_names() -> None:
    assert settings.allowed_hosts("127.0.0.1", {}) == ["localhost", "127.0.0.1", "::1"]
    hosts = settings.allowed_hosts("0.0.0.0", {"SPECTOWER_CONSOLE_ALLOWED_HOSTS": "spectower.corp, x.y"})
    assert hosts == ["localhost", "127.0.0.1", "::1", "spectower.corp", "x.y"]
    argv = " ".join(streamlit_argv(APP_PATH, "10.0.0.5", 8501))
    assert "--server.allowedHosts localhost" in argv and "--server.allowedHosts 10.0.0.5" in argv


def _upgrade_status(port: int, host: str, origin: str | None = None) -> int:
    """The HTTP status of a WebSocket upgrade to the console's stream with this Host (and Origin) header."""
    key = base64.b64encode(os.urandom(16)).decode()
    origin_line = f"Origin: {origin}\r\n" if origin else ""
    request = (
        f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}\r\n{origin_line}Upgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode())
        sock.settimeout(10)
        status_line = sock.recv(4096).split(b"\r\n", 1)[0].decode()
    return int(status_line.split()[1])


def _wait_healthy(port: int) -> None:
    wait_until_ok(f"http://127.0.0.1:{port}/_stcore/health", 120)  # Streamlit's first start is slow


@pytest.mark.integration
def test_a_foreign_host_header_is_refused(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SPECTOWER_CONSOLE_ALLOWED_HOSTS"}
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "console", "--db", str(tmp_path / "x.db"), "--port", str(port)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_healthy(port)
        assert _upgrade_status(port, f"127.0.0.1:{port}") == 101
        assert _upgrade_status(port, f"localhost:{port}") == 101
        assert _upgrade_status(port, f"rebind.attacker.example:{port}") == 403
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


# Loaded by every Python the console starts (PYTHONPATH): records each attempt to resolve a name or open a
# TCP connection that leaves the machine, so the test sees a look-up even where the network is cut.
_OUTBOUND_PROBE = """
import os, socket, sys
_LOG = os.environ["SPECTOWER_TEST_OUTBOUND_LOG"]
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0")
def _note(what):
    with open(_LOG, "a") as f:
        f.write(what + "\\n")
def _hook(event, args):
    if event == "socket.getaddrinfo" and not str(args[0]).startswith(_LOCAL):
        _note(f"getaddrinfo {args[0]}")
    elif event == "socket.connect" and args[0].family in (socket.AF_INET, socket.AF_INET6):
        host = str(args[1][0])
        if args[0].type == socket.SOCK_STREAM and not host.startswith(_LOCAL):
            _note(f"connect {args[1]}")
sys.addaudithook(_hook)
"""


@pytest.mark.integration
def test_the_console_never_looks_up_its_external_address(tmp_path: Path) -> None:
    """Streamlit asked checkip.amazonaws.com for its public IP on a WebSocket from another origin (the
    console's log: "Did not auto detect external IP"). Every Python the console starts carries an audit
    hook noting each name resolved and each TCP connection opened that is not loopback: after a page's
    WebSocket, a foreign-origin WebSocket and a refused Host there are none, and the log has no such line."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "sitecustomize.py").write_text(_OUTBOUND_PROBE)
    outbound = tmp_path / "outbound.log"
    outbound.touch()
    log = tmp_path / "console.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SPECTOWER_CONSOLE_ALLOWED_HOSTS"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path / "probe"), env.get("PYTHONPATH")])),
               SPECTOWER_TEST_OUTBOUND_LOG=str(outbound))  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*SPECTOWER_CLI, "console", "--db", str(tmp_path / "x.db"), "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(port)
        assert _upgrade_status(port, f"127.0.0.1:{port}", origin=f"http://127.0.0.1:{port}") == 101
        assert _upgrade_status(port, f"127.0.0.1:{port}", origin="http://other.example") == 403
        assert _upgrade_status(port, f"rebind.attacker.example:{port}") == 403
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    assert outbound.read_text() == ""
    assert "Did not auto detect external IP" not in log.read_text()
