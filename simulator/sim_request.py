"""One generate request inside the simulator (simulator/engine.py schedules it): its output so far, its
timestamps, and the newest state its HTTP handler has not seen yet."""

from __future__ import annotations

import asyncio
import time
import uuid

from .textgen import TokenStream

# A request's published state is its cumulative output length; this value means "aborted".
ABORTED = -1


class SimRequest:
    """One generate request inside the simulator."""

    __slots__ = (
        "_waiter",
        "aborted",
        "accept",
        "created_mono",
        "created_wall",
        "done",
        "dp_rank",
        "finish_reason",
        "finished",
        "first_token_mono",
        "forward_entry_wall",
        "index",
        "last_token_mono",
        "max_new_tokens",
        "output",
        "prefill_finished_wall",
        "prompt_tokens",
        "published",
        "queue_time",
        "rid",
        "spec_num_correct_drafts",
        "spec_proposed_drafts",
        "spec_verify_ct",
        "streaming",
        "tokens",
    )

    def __init__(
        self,
        index: int,
        prompt_tokens: int,
        max_new_tokens: int,
        streaming: bool,
        seed: int,
        rid: str | None = None,
        accept: float | None = None,
    ) -> None:
        self.rid = rid or uuid.uuid4().hex
        self.accept = accept  # its kind's accept length when drafted (None: the profile's; accept_kinds.py)
        self.index = index
        self.prompt_tokens = prompt_tokens
        self.max_new_tokens = max(1, max_new_tokens)
        self.streaming = streaming
        self.tokens = TokenStream(seed, index)
        self.output: list[int] = []  # vocabulary indexes (see spectower.simulator.textgen)
        # Streaming: the newest published output length, and the handler waiting for a newer one.
        # A handler that falls behind skips to the newest state (SGLang's tokenizer manager does the
        # same with its cumulative outputs), so a starved machine sends fewer, larger chunks.
        self.published = 0
        self._waiter: asyncio.Future[None] | None = None
        self.done: asyncio.Event = asyncio.Event()
        self.created_mono = time.monotonic()
        self.created_wall = time.time()
        self.forward_entry_wall: float | None = None
        self.prefill_finished_wall: float | None = None
        self.first_token_mono: float | None = None
        self.last_token_mono: float | None = None
        self.queue_time = 0.0
        self.finished = False
        self.aborted = False
        self.finish_reason: str | None = None
        self.dp_rank = 0
        # cumulative, as SGLang's Req counts them: verify passes (a gated step's too) and the drafts they
        # accepted (the bonus token apart), which plugin/part_mix.py reads; and the drafts proposed
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.spec_proposed_drafts = 0

    def publish(self, n: int) -> None:
        self.published = n
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def next_update(self, seen: int) -> int:
        """Wait until the published state differs from ``seen``; return it (``ABORTED`` on abort)."""
        while self.published == seen:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            await waiter
        return self.published

    def _push(self, n: int) -> list[int]:
        take = min(n, self.max_new_tokens - len(self.output))
        stream = self.tokens
        new = [stream.next_index() for _ in range(take)]
        self.output.extend(new)
        return new
