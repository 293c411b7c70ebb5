"""How fast the server prefills a prompt: the time to first token of lone requests at two prompt lengths.

Why: a sweep's prompts are short (64 tokens on the GPU runs), so their time to first token is nearly all fixed
cost (scheduling, one forward, the network), and prompt tokens over that time read 2 000-3 400 tok/s for an
8B model on an H200 that prefills tens of thousands. A profile carrying that figure makes the simulator's
open loop (``sim evaluate --trace``: Azure's prompts average 1 243 tokens) prefill-bound where the real
server is not. The difference between a short and a long prompt's time to first token cancels the fixed
cost: its slope is the prefill rate. Requests go one at a time, short and long alternating (a drift hits
both alike), every prompt new (the server's prefix cache would otherwise skip the work).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import httpx

from .prompts import PromptFactory
from .replay import prompt_limit
from .stream import RequestShape, stream_request

PROBE_LONG_LEN = 2048  # long enough that its prefill dwarfs the fixed cost, short enough for any context
PROBE_PAIRS = 3  # short + long requests each; the median of each length is kept
PROBE_OUTPUT_LEN = 2  # a first token is all the probe needs; two so the stream ends as any other


@dataclass(frozen=True)
class PrefillProbe:
    """Median time to first token at a short and a long prompt length."""

    short_len: int
    long_len: int
    short_ttft_s: float
    long_ttft_s: float

    @property
    def tok_s(self) -> float | None:
        """Prompt tokens per second of prefill (None: the long prompt was not slower, nothing to read)."""
        extra_s = self.long_ttft_s - self.short_ttft_s
        return (self.long_len - self.short_len) / extra_s if extra_s > 0 else None

    def to_json(self) -> dict[str, float | int | None]:
        return {"short_len": self.short_len, "long_len": self.long_len, "short_ttft_s": self.short_ttft_s,
                "long_ttft_s": self.long_ttft_s, "tok_s": self.tok_s}  # fmt: skip


def long_length(short_len: int, server_max_input: int | None, reserved_tokens: int = 0) -> int | None:
    """The probe's long prompt: PROBE_LONG_LEN, within what the server takes (its ``max_req_input_len``,
    less the draft slots an EAGLE server counts on top: ``ServerInfo.reserved_output_tokens``); None when
    that leaves no length clearly longer than the short prompt (4x)."""
    limit = prompt_limit(server_max_input, None, PROBE_OUTPUT_LEN, reserved_tokens)
    long_len = min(PROBE_LONG_LEN, limit) if limit is not None else PROBE_LONG_LEN
    return long_len if long_len >= 4 * short_len else None


async def probe_prefill(
    client: httpx.AsyncClient, prompts: PromptFactory, shape: RequestShape, short_len: int, long_len: int,
    first_index: int,
) -> tuple[PrefillProbe | None, int]:  # fmt: skip
    """(the probe, or None when a request failed; prompt indices used)."""
    ttfts: dict[int, list[float]] = {short_len: [], long_len: []}
    index = first_index
    for _ in range(PROBE_PAIRS):
        for length in (short_len, long_len):
            rec = await stream_request(client, prompts(index, length), shape, warmup=True,
                                       output_len=PROBE_OUTPUT_LEN)  # fmt: skip
            index += 1
            if not rec.success or rec.ttft_s is None:
                return None, index - first_index
            ttfts[length].append(rec.ttft_s)
    probe = PrefillProbe(short_len, long_len, statistics.median(ttfts[short_len]),
                         statistics.median(ttfts[long_len]))  # fmt: skip
    return probe, index - first_index
