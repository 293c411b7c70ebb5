"""OpenAI-compatible ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/models``, as SGLang answers.

Streaming sends one ``data: {chunk}\\n\\n`` per decode step with the new text as a delta (OpenAI style,
not cumulative), then, when ``stream_options.include_usage`` is true, a final chunk with empty
``choices`` and the ``usage``, then ``data: [DONE]\\n\\n``. Chat prompts are "tokenized" by the estimate
of ``spectower.simulator.textgen`` over the concatenated message contents plus a small chat-template overhead.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .engine import Engine
from .errors import bad_request, error_response, read_json
from .routes_generate import SSE_HEADERS, WEIGHT_VERSION, dumps
from .sim_request import ABORTED, SimRequest
from .textgen import estimate_prompt_tokens, piece

DEFAULT_MAX_TOKENS = 128
# Tokens a chat template adds around each message (role markers, separators).
CHAT_TEMPLATE_TOKENS_PER_MESSAGE = 4
MAX_MODEL_LEN = 131072


def _max_tokens(body: dict[str, Any]) -> int:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_tokens must be a non-negative integer, got {value!r}")
    return value


def _chat_prompt_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    total = 0
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += estimate_prompt_tokens(str(content or "")) + CHAT_TEMPLATE_TOKENS_PER_MESSAGE
    return total


def _completion_prompt_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return estimate_prompt_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
        return len(prompt)
    raise ValueError("prompt must be a string or a list of token ids (batched prompts are not simulated)")


def _usage(req: SimRequest) -> dict[str, Any]:
    n = len(req.output)
    return {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + n,
        "completion_tokens": n,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }


def build_router(engine: Engine, served_model_name: str) -> APIRouter:
    router = APIRouter()
    created_at = int(engine.started_wall)

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": served_model_name,
                    "object": "model",
                    "created": created_at,
                    "owned_by": "sglang",
                    "root": served_model_name,
                    "parent": None,
                    "max_model_len": MAX_MODEL_LEN,
                }
            ],
        }

    async def answer(request: Request, chat: bool) -> Response:
        try:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            if chat:
                prompt = _chat_prompt_tokens(body.get("messages"))
            else:
                prompt = _completion_prompt_tokens(body.get("prompt"))
            max_tokens = _max_tokens(body)
        except ValueError as exc:
            return bad_request(str(exc))
        return await _serve(engine, body, prompt, max_tokens, chat=chat)

    @router.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await answer(request, chat=True)

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, chat=False)

    return router


async def _serve(engine: Engine, body: dict[str, Any], prompt: int, max_tokens: int, chat: bool) -> Response:
    model = str(body.get("model") or "default")
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
    req = engine.new_request(prompt, max_tokens, stream)
    engine.submit(req)
    rid = uuid.uuid4().hex
    created = int(time.time())
    if stream:
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":{dumps(model)},'
        return StreamingResponse(
            _stream(engine, req, head, _chat_delta if chat else _text, include_usage),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )
    try:
        await req.done.wait()
    finally:
        engine.abort(req)
    if req.aborted:
        return error_response("request aborted", 400)
    text = "".join(piece(i) for i in req.output)
    content = {"message": _assistant(text)} if chat else _text(text, True)
    return JSONResponse(
        {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": created,
            "model": model,
            "choices": [_choice(content, req.finish_reason)],
            "usage": _usage(req),
            "metadata": {"weight_version": WEIGHT_VERSION},
        }
    )


def _choice(content: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    """One entry of ``choices`` as SGLang writes it; ``content`` is its ``message``, ``delta`` or ``text``."""
    return {"index": 0, **content, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}


def _chat_delta(text: str, first: bool) -> dict[str, Any]:
    """A chat chunk's content: the first names the role, the rest carry only the new text."""
    return {"delta": _assistant(text) if first else {"content": text}}


def _text(text: str, first: bool) -> dict[str, Any]:
    return {"text": text}


async def _deltas(req: SimRequest) -> AsyncIterator[tuple[str, bool]]:
    sent = 0
    while True:
        n = await req.next_update(sent)
        if n == ABORTED:
            return
        text = "".join(piece(i) for i in req.output[sent:n])
        sent = n
        final = req.finished and n >= len(req.output)
        yield text, final
        if final:
            return


async def _stream(
    engine: Engine,
    req: SimRequest,
    head: str,
    content_of: Callable[[str, bool], dict[str, Any]],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """One chunk per decode step (``head`` opens each: id, object, created, model), then the closing ones."""
    try:
        first = True
        async for text, final in _deltas(req):
            choice = _choice(content_of(text, first), req.finish_reason if final else None)
            first = False
            yield (head + '"choices":[' + dumps(choice) + '],"usage":null}\n\n').encode()
            if final:
                for chunk in _closing_chunks(head, req, include_usage):
                    yield chunk
    finally:
        engine.abort(req)


def _closing_chunks(head: str, req: SimRequest, include_usage: bool) -> list[bytes]:
    """How SGLang ends an OpenAI stream: the usage chunk (when asked for), then [DONE]."""
    done = b"data: [DONE]\n\n"
    if not include_usage:
        return [done]
    return [(head + '"choices":[],"usage":' + dumps(_usage(req)) + "}\n\n").encode(), done]
