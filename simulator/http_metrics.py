"""The ASGI middleware in front of every route: auth (``simulator.auth``) and SGLang's HTTP counters.

It counts ``sglang:http_requests_total{endpoint,method}``, ``sglang:http_responses_total{endpoint,
status_code,method}`` and ``sglang:http_requests_active{endpoint,method}`` like SGLang's
``_HttpRequestMetrics``. Written as plain ASGI (not Starlette's BaseHTTPMiddleware) so streamed responses
are not buffered or slowed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .auth import UNAUTHORIZED_BODY, is_allowed

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class HttpCounters:
    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], int] = defaultdict(int)
        self.responses: dict[tuple[str, str, str], int] = defaultdict(int)
        self.active: dict[tuple[str, str], int] = defaultdict(int)


class GuardMiddleware:
    def __init__(
        self, app: ASGIApp, counters: HttpCounters, api_key: str | None, admin_api_key: str | None
    ) -> None:
        self.app = app
        self.counters = counters
        self.api_key = api_key
        self.admin_api_key = admin_api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        method: str = scope["method"]
        key = (path, method)
        c = self.counters
        c.requests[key] += 1
        c.active[key] += 1
        try:
            authorization = None
            for name, value in scope.get("headers", ()):
                if name == b"authorization":
                    authorization = value.decode("latin-1")
                    break
            if not is_allowed(path, authorization, self.api_key, self.admin_api_key):
                c.responses[(path, "401", method)] += 1
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(UNAUTHORIZED_BODY)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return

            async def counting_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    c.responses[(path, str(message["status"]), method)] += 1
                await send(message)

            await self.app(scope, receive, counting_send)
        finally:
            c.active[key] -= 1
