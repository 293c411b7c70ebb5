"""Error bodies as SGLang's HTTP server writes them (OpenAI-style ``ErrorResponse``)."""

from __future__ import annotations

from fastapi.responses import JSONResponse


def error_response(message: str, status: int = 400, err_type: str = "BadRequestError") -> JSONResponse:
    return JSONResponse(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status},
        status_code=status,
    )


def bad_request(message: str) -> JSONResponse:
    return error_response(message, 400, "BadRequestError")
