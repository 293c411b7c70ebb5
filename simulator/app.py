"""The simulator's FastAPI application: every route of the SGLang surface behind the auth/HTTP-counter
middleware."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.requests import Request
from fastapi.responses import JSONResponse

from . import routes_admin, routes_generate, routes_openai
from .config import SimConfig
from .engine import Engine
from .errors import bad_request
from .http_metrics import GuardMiddleware, HttpCounters
from .server_info import ServerInfo


def build_app(config: SimConfig, engine: Engine, info: ServerInfo) -> tuple[FastAPI, HttpCounters]:
    app = FastAPI(title="SGLang (spectower simulator)", docs_url=None, redoc_url=None, openapi_url=None)
    counters = HttpCounters()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        # SGLang answers request validation errors with 400 (OpenAI-style body), not FastAPI's 422.
        return bad_request(str(exc.errors()))

    app.include_router(routes_admin.build_router(engine, info, counters))
    app.include_router(routes_generate.build_router(engine))
    app.include_router(routes_openai.build_router(engine, config.profile.served_model_name))
    app.add_middleware(
        GuardMiddleware, counters=counters, api_key=config.api_key, admin_api_key=config.admin_api_key
    )
    return app, counters
