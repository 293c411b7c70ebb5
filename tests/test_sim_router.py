"""simulator/router.py: the simulated router's health checker flips a worker as sgl-router's does, after
three failed probes in a row (down) or two good ones (up): one slow answer on a busy machine marks nothing
down (a demo test once found a replica unhealthy under CI's load after a single 1-s timeout)."""

from __future__ import annotations

import asyncio

import httpx
from spectower.simulator.router import HEALTH_FAILURE_THRESHOLD, HEALTH_SUCCESS_THRESHOLD, Registry

URL = "http://127.0.0.1:30000"


def _probe(registry: Registry, answers: list[int | None]) -> list[bool]:
    """Probe ``len(answers)`` times; each answer a status code or None (the probe timed out)."""

    def handler(request: httpx.Request) -> httpx.Response:
        status = answers.pop(0)
        if status is None:
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(status)

    seen: list[bool] = []

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            while answers:
                await registry.probe(client)
                seen.append(registry.healthy[URL])

    asyncio.run(run())
    return seen


def test_one_slow_probe_marks_nothing_down() -> None:
    registry = Registry([URL], "m")
    assert _probe(registry, [200, None, 200, None, None, 200]) == [True] * 6


def test_three_failed_probes_in_a_row_mark_a_worker_down_and_two_good_ones_bring_it_back() -> None:
    assert (HEALTH_FAILURE_THRESHOLD, HEALTH_SUCCESS_THRESHOLD) == (3, 2)  # sgl-router's defaults
    registry = Registry([URL], "m")
    seen = _probe(registry, [None, 503, None, 200, 503, 200, 200])
    assert seen == [True, True, False, False, False, False, True]
    assert registry.listing()["workers"][0]["is_healthy"] is True  # type: ignore[index]


def test_a_refused_connection_marks_a_worker_down_at_once() -> None:
    registry = Registry([URL], "m")
    registry.mark_down(URL)
    assert registry.pick(set()) is None
    assert _probe(registry, [200, 200]) == [False, True]
