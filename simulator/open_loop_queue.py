"""The open loop's requests and the server's queue of them (simulator/open_loop.py runs it): waiting,
prefilling in batches of what has been admitted, decoding; each request's first token at its prefill batch's
end and its last when the decode progress passes its length."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..storage.request_traces import Arrival, RequestOutcome
from .profile import Profile

# One prefill batch takes at most this many prompt tokens: SGLang's chunked prefill budget (its
# --chunked-prefill-size, 8192 on the H200 replay's server, server_info in its policy.db).
PREFILL_BATCH_TOKENS = 8192

@dataclass
class Request:
    arrival: Arrival
    prefill_left: float  # prompt tokens still to prefill
    prompt: int = 0  # its prompt, cut to the server's context (the KV it holds once prefilled)
    first_token_t: float | None = None
    done_t: float | None = None
    ctx_offset: float = 0.0  # prompt less the queue's progress when it began decoding (_Queue.context)
    # it decoded in a batch whose draft extend was skipped, or its prefill skipped the draft's pass
    # (plugin/gated_decode.py)
    holed: bool = False
    ready_t: float = 0.0  # when the scheduler has it: its arrival and the profile's first_token_latency_s

    def outcome(self) -> RequestOutcome:
        a = self.arrival
        if self.done_t is None or self.first_token_t is None:
            return RequestOutcome(ok=False)
        return RequestOutcome(
            ok=True,
            output_tokens=a.output_tokens,
            ttft_s=self.first_token_t - a.t_s,
            e2e_s=self.done_t - a.t_s,
        )


class Queue:
    """The server's requests: waiting, prefilling (admitted, prompt not done), decoding.

    Every decoding request gets the same tokens per tick, so one running total (``progress``: tokens per
    request decoded since the start) tells each when it is done: the heap holds the total at which each
    finishes."""

    def __init__(self, max_running: int, profile: Profile) -> None:
        self.max_running = max_running
        self.profile = profile
        self.waiting: deque[Request] = deque()
        self.prefilling: deque[Request] = deque()
        self.decoding: list[tuple[float, int, Request]] = []
        self.progress = 0.0
        self.tokens = 0.0  # output tokens made so far
        self._seq = 0
        self._ctx_offsets = 0.0  # the decoding requests' ctx_offset, summed
        self.holed = 0  # decoding requests with holes in their draft KV
        # the prefill batch running: how many of the first requests prefilling, and its tokens left; its
        # rate, and whether it skips the draft's pass (its requests then decode holed)
        self._batch, self._batch_left = 0, 0.0
        self._batch_rate, self._batch_holed = profile.prefill_tok_s, False
        self.prefill_batches = 0
        self.prefills_skipped = 0  # of them, the ones that skipped the draft's pass

    def mark_holed(self) -> None:
        """Every decoding request ran a batch whose draft extend was skipped: its draft KV has holes."""
        for _, _, req in self.decoding:
            if not req.holed:
                req.holed = True
                self.holed += 1

    def forget_holes(self) -> None:
        """The drain ran out: the holed requests draft again (they recover cold)."""
        for _, _, req in self.decoding:
            req.holed = False
        self.holed = 0

    @property
    def context(self) -> float:
        """Tokens of context the decoding requests hold: each its prompt and what it has decoded so far."""
        return self._ctx_offsets + len(self.decoding) * self.progress

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def admit(self) -> None:
        while self.waiting and self.running < self.max_running:
            self.prefilling.append(self.waiting.popleft())

    def prefill(self, now: float, budget: float, wait_s: float = 0.0,
                skip_draft: Callable[[int, float], bool] | None = None) -> float:  # fmt: skip
        """Prefill for at most ``budget`` seconds; the seconds left for decoding. Requests prefill in arrival
        order, in batches of what has been admitted when a batch begins, up to PREFILL_BATCH_TOKENS prompt
        tokens (SGLang's chunked prefill budget per batch): each gets its first token at its batch's end.
        ``wait_s``: what each first token made here waits beyond its prefill (the decode step in flight,
        which a real scheduler finishes first; the fluid model runs the prefill at once and the step's work
        after it). ``skip_draft(requests, t)``: whether a batch of that many requests beginning at ``t``
        skips the draft's pass (the plugin's rule, judged by the caller): it runs at the profile's faster
        rate, and its requests decode holed."""
        while budget > 0:
            if not self._batch:
                self._form_batch(now, skip_draft)
                if not self._batch:
                    break
            need = self._batch_left / self._batch_rate
            if need > budget:
                self._batch_left -= budget * self._batch_rate
                return 0.0
            budget -= need
            now += need
            for _ in range(self._batch):
                self._first_token(self.prefilling.popleft(), now + wait_s, self._batch_holed)
            self._batch, self._batch_left = 0, 0.0
        return budget

    def _form_batch(self, now: float, skip_draft: Callable[[int, float], bool] | None) -> None:
        tokens, n = 0.0, 0
        for req in self.prefilling:
            if n and tokens + req.prefill_left > PREFILL_BATCH_TOKENS:
                break
            tokens += req.prefill_left
            n += 1
        self._batch, self._batch_left = n, tokens
        modelled = n > 0 and self.profile.draft_prefill_share > 0
        skipped = modelled and skip_draft is not None and skip_draft(n, now)
        self._batch_rate, self._batch_holed = self.profile.prefill_rate(skipped), skipped
        self.prefill_batches += n > 0
        self.prefills_skipped += skipped

    def _first_token(self, req: Request, t: float, holed: bool = False) -> None:
        """``req``'s prefill ended: its first token at ``t``; it decodes the rest (``holed``: its prompt
        never went through the draft, so its draft KV has holes, as a skipped decode extend leaves)."""
        req.prefill_left = 0.0
        req.first_token_t = t
        self.tokens += 1  # prefill makes the first token
        rest = req.arrival.output_tokens - 1
        if rest <= 0:
            req.done_t = req.first_token_t
        else:
            self._seq += 1
            req.ctx_offset = req.prompt + 1 - self.progress
            self._ctx_offsets += req.ctx_offset
            if holed:
                req.holed = True
                self.holed += 1
            heapq.heappush(self.decoding, (self.progress + rest, self._seq, req))

    def decode(self, now: float, seconds: float, rate: float) -> None:
        """``seconds`` of decoding at ``rate`` aggregate tok/s, shared by the batch; finished ones leave."""
        batch = len(self.decoding)
        if batch == 0 or seconds <= 0 or rate <= 0:
            return
        per_request = rate / batch
        before = self.progress
        self.progress += per_request * seconds
        self.tokens += rate * seconds
        while self.decoding and self.decoding[0][0] <= self.progress + 1e-9:
            target, _, req = heapq.heappop(self.decoding)
            req.done_t = now + (target - before) / per_request
            self._ctx_offsets -= req.ctx_offset
            self.holed -= req.holed
            self.tokens -= self.progress - target  # the tokens past its end were never made
        if not self.decoding:
            self._ctx_offsets = 0.0  # no rounding carried from one busy period to the next

    @property
    def empty(self) -> bool:
        return not (self.waiting or self.prefilling or self.decoding)
