"""A simulated SGLang router (the SGLang Model Gateway, ``sgl-router``) in front of simulated replicas.

It speaks the router's worker registry as SGLang documents it (docs/advanced_features/sgl_model_gateway.md,
"Worker Management APIs"): ``GET /workers`` answers ``{"workers": [{"id", "url", "model_id", "priority",
"cost", "worker_type", "is_healthy", "load", "connection_mode"}], "total", "stats": {"prefill_count",
"decode_count", "regular_count"}}``; ``/health``, ``/liveness`` and ``/readiness`` as the router's. Requests
to ``/generate`` and ``/v1/*completions`` go to the healthy worker with the fewest requests in flight,
streamed through unchanged, so a load generator pointed at the router loads every replica; ``/server_info``,
``/model_info`` and ``/v1/models`` are answered by one of them. Each worker's
``/health`` is probed every ``HEALTH_INTERVAL_S``; as with the real router's health checker
(``--health-failure-threshold 3``, ``--health-success-threshold 2``, ``--health-check-timeout-secs 5``), a
worker turns unhealthy after three failed probes in a row and healthy again after two good ones, so one
slow answer on a busy machine marks nothing down, while a stopped replica shows ``is_healthy: false`` within
three probes and gets no traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

HEALTH_INTERVAL_S = 2.0  # the real router's default is 60 s: a demo should show a stopped replica sooner
HEALTH_TIMEOUT_S = 5.0
HEALTH_FAILURE_THRESHOLD = 3
HEALTH_SUCCESS_THRESHOLD = 2
PROXY_CONNECT_TIMEOUT_S = 5.0
PROXY_READ_TIMEOUT_S = 600.0  # a long generation streams for minutes
PROXIED_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")
# The router answers these from one of its workers (as sgl-router does: "Admin and Health Endpoints").
PROXIED_READS = ("/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/models")
PASSED_HEADERS = ("content-type", "authorization", "accept")


class Registry:
    """The router's workers: id, URL, health and requests in flight."""

    def __init__(self, urls: Sequence[str], model_id: str) -> None:
        self.model_id = model_id
        self.urls = list(urls)
        self.ids = {url: str(uuid.uuid5(uuid.NAMESPACE_URL, url)) for url in self.urls}
        self.healthy = dict.fromkeys(self.urls, True)
        self.load = dict.fromkeys(self.urls, 0)
        self.streak = dict.fromkeys(self.urls, 0)  # probes in a row that disagree with ``healthy``

    def listing(self) -> dict[str, object]:
        workers = [
            {"id": self.ids[url], "url": url, "model_id": self.model_id, "priority": 50, "cost": 1.0,
             "worker_type": "regular", "is_healthy": self.healthy[url], "load": self.load[url],
             "connection_mode": "Http"}
            for url in self.urls
        ]  # fmt: skip
        stats = {"prefill_count": 0, "decode_count": 0, "regular_count": len(workers)}
        return {"workers": workers, "total": len(workers), "stats": stats}

    def pick(self, tried: set[str]) -> str | None:
        """The healthy worker with the fewest requests in flight, not yet tried for this request."""
        free = [url for url in self.urls if self.healthy[url] and url not in tried]
        return min(free, key=lambda url: self.load[url]) if free else None

    def record(self, url: str, ok: bool) -> None:
        """One probe's answer: the worker's health flips only after enough probes in a row disagree."""
        if ok == self.healthy[url]:
            self.streak[url] = 0
            return
        self.streak[url] += 1
        if self.streak[url] >= (HEALTH_SUCCESS_THRESHOLD if ok else HEALTH_FAILURE_THRESHOLD):
            self.healthy[url] = ok
            self.streak[url] = 0

    def mark_down(self, url: str) -> None:
        """A refused connection: nothing listens there, no need to wait for the probes."""
        self.healthy[url] = False
        self.streak[url] = 0

    async def probe(self, client: httpx.AsyncClient) -> None:
        async def one(url: str) -> None:
            try:
                answer = await client.get(f"{url}/health", timeout=HEALTH_TIMEOUT_S)
                self.record(url, answer.status_code == 200)
            except httpx.HTTPError:
                self.record(url, False)

        await asyncio.gather(*(one(url) for url in self.urls))


def build_app(urls: Sequence[str], model_id: str = "default") -> FastAPI:
    registry = Registry(urls, model_id)
    timeout = httpx.Timeout(PROXY_READ_TIMEOUT_S, connect=PROXY_CONNECT_TIMEOUT_S)
    client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=None))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async def health_loop() -> None:
            while True:
                await registry.probe(client)
                await asyncio.sleep(HEALTH_INTERVAL_S)

        task = asyncio.create_task(health_loop())
        try:
            yield
        finally:
            task.cancel()
            await client.aclose()

    app = FastAPI(title="SGLang router (spectower simulator)", docs_url=None, redoc_url=None,
                  openapi_url=None, lifespan=lifespan)  # fmt: skip

    @app.get("/workers")
    async def workers() -> JSONResponse:
        return JSONResponse(registry.listing())

    @app.get("/health")
    @app.get("/liveness")
    async def liveness() -> Response:
        return Response("OK")

    @app.get("/readiness")
    async def readiness() -> Response:
        ready = any(registry.healthy.values())
        return Response("OK" if ready else "no healthy worker", status_code=200 if ready else 503)

    async def proxy(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in PASSED_HEADERS}
        tried: set[str] = set()
        while (url := registry.pick(tried)) is not None:
            tried.add(url)
            outgoing = client.build_request(request.method, f"{url}{request.url.path}", content=body,
                                            headers=headers)  # fmt: skip
            try:
                answer = await client.send(outgoing, stream=True)
            except httpx.ConnectError:  # nothing was sent: the next worker may take it
                registry.mark_down(url)
                continue
            return _stream(registry, url, answer)
        return JSONResponse({"error": "no healthy worker"}, status_code=503)

    for path in PROXIED_PATHS:
        app.add_api_route(path, proxy, methods=["POST"])
    for path in PROXIED_READS:
        app.add_api_route(path, proxy, methods=["GET"])
    return app


def _stream(registry: Registry, url: str, answer: httpx.Response) -> StreamingResponse:
    registry.load[url] += 1

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            return  # the worker went away mid-answer: the client sees the stream end
        finally:
            registry.load[url] -= 1
            await answer.aclose()

    kind = answer.headers.get("content-type", "application/json")
    return StreamingResponse(body(), status_code=answer.status_code, media_type=kind)
