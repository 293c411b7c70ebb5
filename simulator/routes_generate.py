"""SGLang's native ``POST /generate``, streamed (``data: {...}\\n\\n`` ... ``data: [DONE]\\n\\n``) or not.

Like SGLang 0.5.x without ``--incremental-streaming-output``, every streamed chunk carries the cumulative
``text`` and ``output_ids`` so far; the last chunk's ``meta_info`` adds the finish reason, latency and the
speculative-decoding statistics. Shapes follow ``tests/fixtures/real/sglang-0.5.17-h200/generate_stream.txt``.
The simulated model always generates ``max_new_tokens`` (SGLang's default 128) tokens: there is no EOS,
so ``ignore_eos`` is accepted and changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .engine import Engine
from .errors import bad_request, read_json
from .sim_request import ABORTED, SimRequest
from .textgen import escaped_piece_bytes, piece, prompt_tokens_of, token_id

DEFAULT_MAX_NEW_TOKENS = 128
WEIGHT_VERSION = "default"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def dumps(obj: Any) -> str:
    # ensure_ascii=False: U+2028 / U+0085 go out raw, as orjson (SGLang's encoder) writes them.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def parse_sampling(body: dict[str, Any]) -> int:
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise ValueError("sampling_params must be an object")
    value = params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if value is None:
        value = DEFAULT_MAX_NEW_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {value!r}")
    return value


def meta_info(req: SimRequest, final: bool, first: bool = False, n: int | None = None) -> dict[str, Any]:
    n = len(req.output) if n is None else n
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": (
            {"type": "length", "length": n}
            if req.finish_reason == "length"
            else {"type": "abort", "message": "aborted"}
            if req.aborted
            else None
        )
        if final
        else None,
        "prompt_tokens": req.prompt_tokens,
        "weight_version": WEIGHT_VERSION,
        "num_retractions": 0,
        "forward_entry_time": req.forward_entry_wall,
        "prefill_finished_time": req.prefill_finished_wall,
        "queue_time": req.queue_time,
        "reasoning_tokens": 0,
        "completion_tokens": n,
        "cached_tokens": 0,
        "cached_tokens_details": None,
        "dp_rank": None,
    }
    now = time.time()
    if first:
        meta["response_sent_to_client_ts"] = now
    if final:
        e2e = max(0.0, now - req.created_wall)
        verify = req.spec_verify_ct
        proposed = req.spec_proposed_drafts
        accepted = req.spec_num_correct_drafts
        decode_s = now - (req.prefill_finished_wall or now)
        meta.update(
            {
                "e2e_latency": e2e,
                "spec_accept_rate": accepted / proposed if proposed else 0.0,
                "spec_accept_length": (n - 1) / verify if verify else 1.0,
                "spec_num_correct_drafts": accepted,
                "spec_num_proposed_drafts": proposed,
                "spec_verify_ct": verify,
                "spec_accepted_drafts": accepted,
                "spec_proposed_drafts": proposed,
                "spec_correct_drafts_histogram": [verify],
                "spec_accept_histogram": [verify],
                "request_received_ts": req.created_wall,
                "api_server_dispatch_finish_ts": req.created_wall,
                "response_sent_to_client_ts": now,
                "request_finished_ts": now,
                "decode_throughput": (n - 1) / decode_s if decode_s > 0 and n > 1 else 0.0,
            }
        )
    return meta


class _Cumulative:
    """Cumulative JSON pieces of one request, extended per step.

    Each chunk repeats the whole output so far (SGLang's format), so the escaped text and the id list
    are kept as growing byte buffers: a chunk costs one copy of them, not a re-encoding of every token.
    """

    __slots__ = ("ids", "sent", "text")

    def __init__(self) -> None:
        self.text = bytearray()
        self.ids = bytearray()
        self.sent = 0

    def advance(self, req: SimRequest, upto: int) -> None:
        for i in req.output[self.sent : upto]:
            self.text += escaped_piece_bytes(i)
            if self.ids:
                self.ids += b","
            self.ids += b"%d" % token_id(i)
        self.sent = upto

    def chunk(self, meta_json: str) -> bytes:
        return b"".join(
            (
                b'data: {"text":"',
                self.text,
                b'","output_ids":[',
                self.ids,
                b'],"meta_info":',
                meta_json.encode(),
                b"}\n\n",
            )
        )


def parse_generate_body(body: Any) -> tuple[int, int, bool, str | None]:
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        raise ValueError("Either text or input_ids should be provided.")
    if text is not None and not isinstance(text, str):
        raise ValueError("text must be a string (batched requests are not simulated)")
    if input_ids is not None and (
        not isinstance(input_ids, list) or not all(isinstance(i, int) for i in input_ids)
    ):
        raise ValueError("input_ids must be a list of integers (batched requests are not simulated)")
    rid = body.get("rid")
    return (
        prompt_tokens_of(text, input_ids),
        parse_sampling(body),
        bool(body.get("stream", False)),
        rid if isinstance(rid, str) else None,
    )


def build_router(engine: Engine) -> APIRouter:
    router = APIRouter()

    @router.api_route("/generate", methods=["POST", "PUT"])
    async def generate(request: Request) -> Response:
        try:
            prompt, max_new, stream, rid = parse_generate_body(await read_json(request))
        except ValueError as exc:
            return bad_request(str(exc))
        req = engine.new_request(prompt, max_new, stream, rid)
        engine.submit(req)
        if stream:
            return StreamingResponse(
                _stream(engine, req), media_type="text/event-stream", headers=SSE_HEADERS
            )
        try:
            await req.done.wait()
        finally:
            engine.abort(req)
        if req.aborted:
            return bad_request("request aborted")
        return JSONResponse(generate_result(req))

    return router


def generate_result(req: SimRequest) -> dict[str, Any]:
    return {
        "text": "".join(piece(i) for i in req.output),
        "output_ids": [token_id(i) for i in req.output],
        "meta_info": meta_info(req, final=True),
    }


class _MetaCache:
    """The JSON of an intermediate chunk's meta_info, built once: only completion_tokens changes."""

    __slots__ = ("head", "tail")

    def __init__(self, req: SimRequest) -> None:
        meta = meta_info(req, final=False, n=0)
        text = dumps(meta)
        marker = '"completion_tokens":0,'
        at = text.index(marker)
        self.head = text[: at + len(marker) - 2]
        self.tail = text[at + len(marker) - 1 :]

    def render(self, n: int) -> str:
        return f"{self.head}{n}{self.tail}"


async def _stream(engine: Engine, req: SimRequest) -> AsyncIterator[bytes]:
    acc = _Cumulative()
    first = True
    cache: _MetaCache | None = None
    try:
        while True:
            n = await req.next_update(acc.sent)
            if n == ABORTED:
                return
            acc.advance(req, n)
            final = req.finished and n >= len(req.output)
            if first or final:
                meta = dumps(meta_info(req, final=final, first=first, n=n))
            else:
                cache = cache or _MetaCache(req)
                meta = cache.render(n)
            yield acc.chunk(meta)
            first = False
            if final:
                yield b"data: [DONE]\n\n"
                return
    finally:
        engine.abort(req)  # no-op when finished; frees the slot when the client went away
