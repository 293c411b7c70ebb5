"""`spectower console`: argument checks, and a real launch bound to loopback."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from spectower.console.commands.ui import APP_PATH, streamlit_argv

from benchmarks.simulator_process import wait_until_ok
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, free_port


def test_argv_is_headless_loopback_without_usage_stats() -> None:
    argv = streamlit_argv(APP_PATH, "127.0.0.1", 8502)
    joined = " ".join(argv)
    assert "--server.address 127.0.0.1" in joined and "--server.port 8502" in joined
    assert "--server.headless true" in joined and "--browser.gatherUsageStats false" in joined
    assert APP_PATH.is_file()


def test_bad_port_is_a_clear_error() -> None:
    out = subprocess.run([*SPECTOWER_CLI, "console", "--port", "70000"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2
    assert "--port" in out.stderr and "Traceback" not in out.stderr


def test_a_host_or_a_database_it_cannot_use_is_said_before_serving(tmp_path: Path) -> None:
    """Streamlit said a bad --host in a traceback after starting; a file that is no database was served.
    (An empty file passes: it may be a collector's database being created; the page waits for it.)"""
    notes = tmp_path / "notes.db"
    notes.write_text("not a database\n")
    cases = (
        (["--db", str(notes)], f"error: --db: {notes} is not a spectower database"),
        (["--host", "999.1.1.1", "--db", str(tmp_path / "x.db")], "error: --host/--port: cannot listen on"),
    )
    for args, said in cases:
        cmd = [*SPECTOWER_CLI, "console", *args]
        out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stderr.startswith(said), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert notes.read_text() == "not a database\n"


def test_serves_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "console", "--db", str(tmp_path / "x.db"), "--port", str(port)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/_stcore/health", 90, proc)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_help_keeps_the_secrets_section_name() -> None:
    """--help is Rich markup: a bare "[spectower]" was taken for a style tag ("or  in .streamlit/...")."""
    from spectower.console.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["console", "--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert result.exit_code == 0
    assert "or [spectower] in .streamlit/secrets.toml" in " ".join(result.output.split())
