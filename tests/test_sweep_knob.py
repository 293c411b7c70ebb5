"""A sweep borrows the knob and gives it back (control/sweep_audit.py ``SweepKnob``, the ``Knob`` protocol of
collectors/bench/knob.py on the one knob client), against the real simulator and a real SQLite audit trail.

The sweep lock is the server's: while it holds, a policy's write is refused by the server; a sweep refuses
to start while others use the server or an operator's lock holds (unless forced), gives back the value and
the owner it found (an operator's lock with the time it had left), and never overwrites an operator who
took the knob during the sweep. One audit row when it borrows (or is refused), one when it gives back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.bench.server import requests_in_flight
from spectower.control import audit
from spectower.control.credentials import Credentials
from spectower.control.knob import KnobError, PluginMissingError
from spectower.control.sweep_audit import SweepKnob, SweepKnobError, audited_sweep_knob
from spectower.storage import open_database
from spectower.storage.database import Database

ADMIN_KEY = "sweep-knob-key"
ACTOR = "operator:sweeper"
K, W, HOLD, REL = "spectower_spec_max_bs", "spectower_writer", "spectower_hold_s", "spectower_release"


def _post(sim: Any, args: dict[str, Any]) -> list[bool]:
    url = f"{sim.base_url}/set_internal_state"
    return httpx.post(url, json={"server_args": args}, headers=sim.admin_headers, timeout=10).json()


def _block(sim: Any) -> dict[str, Any]:
    return httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"][0]["spectower"]


def _run(sim: Any, db: Database, body: Callable[[SweepKnob], Awaitable[Any]], force: bool = False) -> Any:
    with audited_sweep_knob(sim.base_url, Credentials(admin_key=ADMIN_KEY), db, ACTOR, force=force) as knob:
        return asyncio.run(body(knob))


async def _running(sim: Any) -> int | None:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client:
        return await requests_in_flight(client)


@pytest.fixture(scope="module")
def sim() -> Any:
    from benchmarks.simulator_process import SimulatorProcess

    with SimulatorProcess(admin_key=ADMIN_KEY, max_running_requests=48) as process:
        yield process


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    with open_database(tmp_path / "audit.db") as database:
        yield database


@pytest.fixture(autouse=True)
def free_knob(sim: Any) -> None:
    assert _post(sim, {W: 1, K: 48, REL: 1}) == [True]


def _actions(db: Database) -> list[tuple[str, bool]]:
    return [(e.action, e.confirmed) for e in reversed(audit.list_events(db))]


def test_borrow_locks_out_the_policy_and_give_back_frees_it(sim: Any, db: Database) -> None:
    async def sweep(knob: SweepKnob) -> tuple[bool, str]:
        assert await knob.read() == [48]
        found = await knob.borrow(await _running(sim))
        assert found.owner == "policy" and found.value == 48 and found.running == 0
        assert _block(sim)["owner"] == "sweep"
        await knob.set(0, "bench sweep")
        assert _post(sim, {W: 2, K: 30}) == [False]  # the policy is refused by the server itself
        await knob.set(48, "bench sweep")
        assert [(m["value"], m["previous"]) for m in knob.moves] == [(0, 48), (48, 0)]
        return await knob.give_back()

    restored, summary = _run(sim, db, sweep)
    assert restored and "owner policy" in summary
    block = _block(sim)
    assert (block["owner"], block["spec_max_bs"], block["lock"]) == ("policy", 48, None)
    # one audit row for the borrow, one for the give-back; the moves are the run's own record
    assert _actions(db) == [("sweep-start", True), ("sweep-end", True)]
    end = audit.list_events(db, limit=1)[0]
    assert end.actor == ACTOR and end.error is None  # given back: its summary is a note, not an error
    assert "2 knob moves" in (end.note or "") and ADMIN_KEY not in (end.note or "")


def test_a_manual_lock_refuses_the_sweep_unless_forced_and_is_given_back(sim: Any, db: Database) -> None:
    assert _post(sim, {W: 1, K: 5, HOLD: 3600}) == [True]

    async def refused(knob: SweepKnob) -> None:
        with pytest.raises(SweepKnobError, match=r"manual lock with .* left.*--force"):
            await knob.borrow(0)

    _run(sim, db, refused)
    assert _block(sim)["owner"] == "manual" and _block(sim)["spec_max_bs"] == 5
    assert _actions(db) == [("sweep-start", False)]  # a refused borrow is a control attempt too

    async def forced(knob: SweepKnob) -> tuple[bool, str]:
        await knob.borrow(0)
        await knob.set(48, "bench sweep")
        return await knob.give_back()

    restored, summary = _run(sim, db, forced, force=True)
    block = _block(sim)
    assert restored and block["owner"] == "manual" and block["spec_max_bs"] == 5, summary
    left = block["lock"]["expires_at"] - block["server_time"]
    assert 3500 < left <= 3600  # the operator's lock, with the time it had left


def test_an_operator_who_takes_over_during_the_sweep_is_left_alone(sim: Any, db: Database) -> None:
    async def sweep(knob: SweepKnob) -> tuple[bool, str]:
        await knob.borrow(0)
        await knob.set(0, "bench sweep")
        assert _post(sim, {W: 1, K: 7}) == [True]  # an incident: the operator wins over the sweep
        with pytest.raises(KnobError, match="refused the sweep's move"):
            await knob.set(48, "bench sweep")
        return await knob.give_back()

    restored, summary = _run(sim, db, sweep)
    assert not restored and "held by manual" in summary
    assert (_block(sim)["owner"], _block(sim)["spec_max_bs"]) == ("manual", 7)
    assert _actions(db) == [("sweep-start", True), ("sweep-end", False)]


def test_a_busy_server_refuses_the_sweep(sim: Any, db: Database) -> None:
    async def sweep(knob: SweepKnob) -> None:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 100_000, "ignore_eos": True}}
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=120) as client:
            traffic = asyncio.create_task(client.post("/generate", json=body))
            deadline = time.monotonic() + 30
            running = 0
            while time.monotonic() < deadline:  # wait for the request to be running (polled, not slept)
                running = await requests_in_flight(client) or 0
                if running > 0:
                    break
                await asyncio.sleep(0.05)
            try:
                with pytest.raises(SweepKnobError, match=r"serving 1 other request.*--force"):
                    await knob.borrow(running)
            finally:
                traffic.cancel()
                await asyncio.gather(traffic, return_exceptions=True)

    _run(sim, db, sweep)
    assert _block(sim)["owner"] == "policy"


def test_a_server_without_the_plugin_is_refused_with_the_install_hint(
    simulator_factory: Any, db: Database
) -> None:
    plain = simulator_factory(profile="llama31-8b-1x-h100", admin_key=ADMIN_KEY, no_speculation=True)

    async def sweep(knob: SweepKnob) -> None:
        with pytest.raises(PluginMissingError, match="pip install spectower"):
            await knob.read()

    _run(plain, db, sweep)
