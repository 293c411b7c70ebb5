"""`spectower console`: serve the Streamlit console (bound to 127.0.0.1, headless, no usage stats, no
external-IP look-up: it never reaches outside the machine)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from ..errors import fail
from ..settings import allowed_hosts
from .options import DB_HELP

DEFAULT_PORT = 8501
DEFAULT_HOST = "127.0.0.1"  # loopback unless the operator says otherwise (put a proxy with auth in front)
APP_PATH = Path(__file__).resolve().parents[1] / "app.py"


def streamlit_argv(app: Path, host: str, port: int) -> list[str]:
    """The `streamlit run` command line; every setting explicit so no user config turns telemetry on."""
    return [
        # Streamlit's CLI without its external-IP look-up (console/streamlit_offline.py)
        sys.executable, "-m", "spectower.console.streamlit_offline", "run", str(app),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.runOnSave", "false",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "minimal",
        "--theme.base", "dark",
        # A foreign Host header (a DNS-rebinding page) is refused: Streamlit's allow-list, checked on the
        # WebSocket every page needs (403 instead of 101); SPECTOWER_CONSOLE_ALLOWED_HOSTS adds a proxy's
        # name.
        *(arg for name in allowed_hosts(host) for arg in ("--server.allowedHosts", name)),
    ]  # fmt: skip


def console(
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Port to serve on"),
    host: str = typer.Option(DEFAULT_HOST, "--host", help="Address to bind (default loopback only)"),
) -> None:
    """Serve the Streamlit console. Operator credentials come from SPECTOWER_ADMIN_KEY_FILE (or
    SPECTOWER_ADMIN_KEY) and SPECTOWER_OPERATOR, or [spectower] in .streamlit/secrets.toml."""
    from sqlalchemy.engine import make_url

    from ...simulator.cli import cannot_bind
    from ...storage import default_db_url
    from ...storage.dialect import is_sqlite_file

    if not 1 <= port <= 65535:
        fail(f"--port must be between 1 and 65535, got {port}")
    if not host.strip():
        fail("--host must not be empty")
    try:
        url = default_db_url(db)
        path = Path(make_url(url).database or "")
        # A file there that is no SQLite database at all is a wrong --db. An empty one, or one without
        # spectower's tables yet, may be a collector's that is being created: the page waits for it.
        if path.is_file() and path.stat().st_size > 0 and not is_sqlite_file(path):
            fail(f"--db: {path} is not a spectower database")
    except ValueError as exc:
        fail(str(exc))
    problem = cannot_bind(host, port)  # Streamlit would say it in a traceback, after starting
    if problem:
        fail(f"--host/--port: cannot listen on {host}:{port} ({problem})")
    env = {
        **os.environ,
        "SPECTOWER_DB": url,
        "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    }
    typer.echo(f"spectower console on http://{host}:{port} reading {url}", err=True)
    argv = streamlit_argv(APP_PATH, host, port)
    # exec: the console process *is* streamlit, so a signal to it stops the server directly.
    os.execve(sys.executable, argv, env)
