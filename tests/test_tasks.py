"""collectors/tasks.py: stopping tasks for good, also one whose first cancellation was swallowed."""

from __future__ import annotations

import asyncio

import pytest
from spectower.collectors.tasks import cancel_all


async def _swallows_the_first_cancellation(swallowed: asyncio.Event) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        swallowed.set()  # as a library under a request did on the H200 (2026-12-06)
    await asyncio.Event().wait()  # runs on until cancelled again


def test_a_task_that_swallowed_its_cancellation_is_cancelled_again_until_done() -> None:
    async def main() -> tuple[bool, bool]:
        swallowed = asyncio.Event()
        stubborn = asyncio.create_task(_swallows_the_first_cancellation(swallowed))
        plain = asyncio.create_task(asyncio.Event().wait())
        await asyncio.sleep(0)  # both started
        # the bound only turns a hang (one cancellation, as before) into a failure
        await asyncio.wait_for(cancel_all([stubborn, plain], again_s=0.01), timeout=30)
        return swallowed.is_set(), stubborn.cancelled() and plain.cancelled()

    assert asyncio.run(main()) == (True, True)


def test_a_failed_tasks_exception_is_taken_not_raised() -> None:
    async def fails() -> None:
        raise RuntimeError("a bad row")

    async def main() -> asyncio.Task[None]:
        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        await cancel_all([task])
        return task

    task = asyncio.run(main())
    assert isinstance(task.exception(), RuntimeError)


def test_the_callers_cancellation_propagates_and_cancels_what_still_runs() -> None:
    async def main() -> bool:
        swallowed = asyncio.Event()
        stubborn = asyncio.create_task(_swallows_the_first_cancellation(swallowed))
        await asyncio.sleep(0)
        stopping = asyncio.create_task(cancel_all([stubborn], again_s=3600))
        await swallowed.wait()  # the first cancellation landed and was swallowed; the wait is on
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        await asyncio.sleep(0)
        return stubborn.cancelled()

    assert asyncio.run(main()) is True
