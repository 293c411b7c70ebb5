"""Stopping asyncio tasks for good: cancel, wait, and cancel again whatever still runs.

A task cancelled once can go on running: a library under it may swallow the cancellation (2026-12-06 on
the H200, a worker of ``bench load`` went on sending a request at a time for five minutes after the stop,
its process never ending). Every place that stops its own tasks does it through ``cancel_all``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

# a task still running this long after its last cancellation is cancelled again
CANCEL_AGAIN_S = 1.0


async def cancel_all(tasks: Iterable[asyncio.Task[Any]], again_s: float = CANCEL_AGAIN_S) -> None:
    """Cancel ``tasks`` and wait until every one is done, cancelling again each ``again_s`` any that still
    runs; each task's outcome is taken (no "exception was never retrieved"). A cancellation of the caller
    while it waits cancels what still runs once more and propagates."""
    every = set(tasks)
    pending = set(every)
    try:
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=again_s)
    except asyncio.CancelledError:
        for task in pending:
            task.cancel()
        raise
    await asyncio.gather(*every, return_exceptions=True)
