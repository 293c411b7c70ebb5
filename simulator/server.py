"""Run the simulator: the SGLang API server and (optionally) the dcgm-exporter port, in one process and
one asyncio loop, until SIGTERM / SIGINT.

When both are listening it prints one line::

    spectower sim: SGLang API http://127.0.0.1:30000 (profile glm5-...), GPU metrics http://127.0.0.1:9400/metrics
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator

import uvicorn

from .app import build_app
from .config import SimConfig
from .dcgm import build_app as build_dcgm_app
from .engine import Engine
from .gpus import SAMPLE_INTERVAL_S, VirtualGpus
from .server_info import ServerInfo

# On SIGTERM, open streams get this long to finish before their connections are closed.
GRACEFUL_SHUTDOWN_S = 2


class _Server(uvicorn.Server):
    """uvicorn server that leaves signal handling to us (two servers share one loop)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bound_port(server: uvicorn.Server, fallback: int) -> int:
    for srv in getattr(server, "servers", []) or []:
        for sock in srv.sockets:
            return int(sock.getsockname()[1])
    return fallback


async def serve(config: SimConfig, sockets: list[socket.socket] | None = None) -> None:
    """``sockets``: one listening socket per server, the API's and then the GPU metrics' when served, bound by
    the caller (the CLI binds before it imports the web stack, so a port taken meanwhile is its one error
    line); None: uvicorn binds."""
    engine = Engine(config)
    info = ServerInfo(config, engine)
    app, _ = build_app(config, engine, info)
    servers: list[_Server] = [
        _Server(
            uvicorn.Config(
                app,
                host=config.host,
                port=config.port,
                log_level="warning",
                access_log=False,
                lifespan="off",
                timeout_keep_alive=30,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            )
        )
    ]
    gpus = VirtualGpus(engine, config.seed)
    if config.gpu_metrics_port is not None:
        servers.append(
            _Server(
                uvicorn.Config(
                    build_dcgm_app(gpus),
                    host=config.host,
                    port=config.gpu_metrics_port,
                    log_level="warning",
                    access_log=False,
                    lifespan="off",
                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                )
            )
        )
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for s in servers:
            s.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)

    async def sample_gpus() -> None:
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            gpus.sample()

    async def announce() -> None:
        while not all(s.started for s in servers):
            if any(s.should_exit for s in servers):
                return
            await asyncio.sleep(0.02)
        api = f"http://{config.host}:{_bound_port(servers[0], config.port)}"
        line = f"spectower sim: SGLang API {api} (profile {config.profile.name})"
        if len(servers) > 1:
            line += f", GPU metrics http://{config.host}:{_bound_port(servers[1], 0)}/metrics"
        print(line, flush=True)

    await engine.start()
    sampler = asyncio.create_task(sample_gpus())
    announcer = asyncio.create_task(announce())
    try:
        given: list[socket.socket | None] = list(sockets) if sockets is not None else [None] * len(servers)
        pairs = zip(servers, given, strict=True)
        await asyncio.gather(*(s.serve(sockets=None if sock is None else [sock]) for s, sock in pairs))
    finally:
        sampler.cancel()
        announcer.cancel()
        await engine.stop()
        info.close()
    if not all(s.started for s in servers):
        # uvicorn could not bind (port taken): it logged why; leave non-zero.
        sys.exit(1)


def run(config: SimConfig, sockets: list[socket.socket] | None = None) -> None:
    asyncio.run(serve(config, sockets))
