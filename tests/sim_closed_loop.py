"""A closed loop through the wire simulator's own scheduler loop on a virtual clock, for the tests that read
what its counters measure (tests/test_sim_prefill_lean.py, tests/test_sim_part_mix.py).

The loop is ``RankScheduler.run`` itself with its clients as coroutines. A rank's sleep gives the event loop
one turn (the clients its last step finished resubmit, as HTTP clients do while the next step runs) and
returns its deadline at once (``virtual_sleep``, patched in by the caller): thousands of steps take a second,
and no test waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.textgen import TokenStream


class Blank(TokenStream):
    """Output tokens without drawing text: the text is no part of the counters, and drawing it would be most
    of the model's time."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def next_index(self) -> int:
        return 0


async def virtual_sleep(self: RankScheduler, deadline: float) -> float:
    """A rank's sleep on a virtual clock: one turn of the event loop, then the deadline at once."""
    await asyncio.sleep(0)
    return deadline


async def run_closed_loop(
    engine: Engine,
    clients: int,
    prompt_tokens: int,
    output_tokens: tuple[int, int],
    lengths: random.Random,
    after_step: Callable[[RankScheduler, float], bool],
) -> None:
    """Drive ``engine`` with ``clients`` closed-loop clients (each resubmits when its request finishes;
    output lengths uniform in ``output_tokens`` from ``lengths``) until ``after_step(rank 0, the step's
    virtual deadline)``, called after each of rank 0's decode steps, answers True; then stop the engine
    and the clients. ``RankScheduler._sleep_until`` must be ``virtual_sleep`` for the run to take no wall
    time."""
    rank = engine.ranks[0]
    enough = asyncio.Event()
    decode = rank._decode

    async def counted(deadline: float) -> float:
        deadline = await decode(deadline)
        if after_step(rank, deadline):
            enough.set()
        return deadline

    async def client() -> None:
        while True:
            req = engine.new_request(prompt_tokens, lengths.randint(*output_tokens), streaming=False)
            req.tokens = Blank()
            engine.submit(req)
            await req.done.wait()

    rank._decode = counted  # type: ignore[method-assign]
    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await engine.start()
    try:
        await enough.wait()
    finally:
        await engine.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
