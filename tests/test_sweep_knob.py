"""A sweep borrows the knob and gives it back (collectors/bench/knob.py), against the real simulator.

The sweep lock is the server's: while it holds, a policy's write is refused by the server; a sweep refuses
to start while others use the server or an operator's lock holds (unless forced), gives back the value and
the owner it found (an operator's lock with the time it had left), and never overwrites an operator who
took the knob during the sweep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from spectower.collectors.bench.errors import KnobError
from spectower.collectors.bench.knob import HttpKnob

ADMIN_KEY = "sweep-knob-key"
K, W, HOLD, REL = "spectower_spec_max_bs", "spectower_writer", "spectower_hold_s", "spectower_release"


def _post(sim: Any, args: dict[str, Any]) -> list[bool]:
    url = f"{sim.base_url}/set_internal_state"
    return httpx.post(url, json={"server_args": args}, headers=sim.admin_headers, timeout=10).json()


def _block(sim: Any) -> dict[str, Any]:
    return httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"][0]["spectower"]


def _run(sim: Any, body: Callable[[HttpKnob], Awaitable[Any]], **kw: Any) -> Any:
    async def main() -> Any:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client:
            return await body(HttpKnob(client, ADMIN_KEY, **kw))

    return asyncio.run(main())


@pytest.fixture(scope="module")
def sim() -> Any:
    from tests.simulator_process import SimulatorProcess

    with SimulatorProcess(admin_key=ADMIN_KEY, max_running_requests=48) as process:
        yield process


@pytest.fixture(autouse=True)
def free_knob(sim: Any) -> None:
    assert _post(sim, {W: 1, K: 48, REL: 1}) == [True]


def test_borrow_locks_out_the_policy_and_give_back_frees_it(sim: Any) -> None:
    events: list[dict[str, Any]] = []

    async def sweep(knob: HttpKnob) -> tuple[bool, str]:
        found = await knob.borrow()
        assert found.owner == "policy" and found.value == 48 and found.running == 0
        assert _block(sim)["owner"] == "sweep"
        await knob.set(0, "bench sweep")
        assert _post(sim, {W: 2, K: 30}) == [False]  # the policy is refused by the server itself
        await knob.set(48, "bench sweep")
        return await knob.give_back()

    restored, summary = _run(sim, sweep, on_borrow=events.append, on_give_back=events.append)
    assert restored and "owner policy" in summary
    block = _block(sim)
    assert (block["owner"], block["spec_max_bs"], block["lock"]) == ("policy", 48, None)
    assert [e.get("restored") for e in events] == [None, True]  # one borrow event, one give-back event


def test_a_manual_lock_refuses_the_sweep_unless_forced_and_is_given_back(sim: Any) -> None:
    assert _post(sim, {W: 1, K: 5, HOLD: 3600}) == [True]

    async def refused(knob: HttpKnob) -> None:
        with pytest.raises(KnobError, match=r"manual lock with .* left.*--force"):
            await knob.borrow()

    _run(sim, refused)
    assert _block(sim)["owner"] == "manual" and _block(sim)["spec_max_bs"] == 5

    async def forced(knob: HttpKnob) -> tuple[bool, str]:
        await knob.borrow()
        await knob.set(48, "bench sweep")
        return await knob.give_back()

    restored, summary = _run(sim, forced, force=True)
    block = _block(sim)
    assert restored and block["owner"] == "manual" and block["spec_max_bs"] == 5, summary
    left = block["lock"]["expires_at"] - block["server_time"]
    assert 3500 < left <= 3600  # the operator's lock, with the time it had left


def test_an_operator_who_takes_over_during_the_sweep_is_left_alone(sim: Any) -> None:
    async def sweep(knob: HttpKnob) -> tuple[bool, str]:
        await knob.borrow()
        await knob.set(0, "bench sweep")
        assert _post(sim, {W: 1, K: 7}) == [True]  # an incident: the operator wins over the sweep
        with pytest.raises(KnobError, match="refused the sweep's move"):
            await knob.set(48, "bench sweep")
        return await knob.give_back()

    restored, summary = _run(sim, sweep)
    assert not restored and "held by manual" in summary
    assert (_block(sim)["owner"], _block(sim)["spec_max_bs"]) == ("manual", 7)


def test_a_busy_server_refuses_the_sweep(sim: Any) -> None:
    async def sweep(knob: HttpKnob) -> None:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100_000, "ignore_eos": True}}
        traffic = asyncio.create_task(knob.client.post("/generate", json=body, timeout=120))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for the request to be running (polled, not slept)
            loads = (await knob.client.get("/v1/loads")).json()["loads"]
            if sum(load["num_running_reqs"] + load["num_waiting_reqs"] for load in loads) > 0:
                break
            await asyncio.sleep(0.05)
        try:
            with pytest.raises(KnobError, match=r"serving 1 other request.*--force"):
                await knob.borrow()
        finally:
            traffic.cancel()
            await asyncio.gather(traffic, return_exceptions=True)

    _run(sim, sweep)
    assert _block(sim)["owner"] == "policy"
