"""`spectower sim router`: a simulated SGLang router in front of simulated replicas
(``spectower.simulator.router``; imported when the command runs, so `spectower --help` stays fast)."""

from __future__ import annotations

from urllib.parse import urlsplit

import typer

from spectower.cli_errors import fail


def router(
    worker_urls: list[str] = typer.Option(..., "--worker-url", help="a replica's URL (repeatable)"),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(30100, "--port", help="The router's port."),
    model_id: str = typer.Option("default", "--model-id", help="model_id every worker is listed with"),
) -> None:
    """Run a simulated SGLang router: its worker list (GET /workers) and least-loaded routing."""
    import uvicorn

    from .cli import listening_sockets
    from .router import build_app

    urls = [u.strip().rstrip("/") for u in worker_urls]
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            fail(f"--worker-url must be an http(s) URL, got {url!r}")
    sockets = listening_sockets(host, {"--port": port})  # handed to uvicorn: no one takes the port meanwhile
    print(f"spectower sim router: http://{host}:{port} in front of {len(urls)} worker(s)", flush=True)
    app = build_app(urls, model_id)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=sockets)
