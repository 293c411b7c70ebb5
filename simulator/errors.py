"""Error bodies as SGLang's HTTP server writes them (its OpenAI-style ``ErrorResponse``: ``object,
message, type, param, code``; request validation errors are 400 with ``type`` "Bad Request")."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse


def error_response(message: str, status: int = 400, err_type: str = "Bad Request") -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status},
        status_code=status,
    )


def bad_request(message: str) -> JSONResponse:
    return error_response(message, 400, "Bad Request")


async def read_json(request: Request) -> Any:
    """The request body as JSON; ``ValueError`` (a route's 400) when it is not JSON."""
    try:
        return await request.json()
    except ValueError:
        raise ValueError("the request body is not valid JSON") from None
