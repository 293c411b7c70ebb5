"""The speculation knob over HTTP: /set_internal_state semantics, read-back, and a mid-run flip."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from spectower.plugin.engine_counters import rates
from spectower.simulator.profile import load_profile

from benchmarks.sim_fidelity import TokenClock, stream_worker
from benchmarks.simulator_process import SimulatorFactory, SimulatorProcess
from tests.conftest import REPO_ROOT

KNOB = "spectower_spec_max_bs"
# the tests on the module's one default simulator run on one xdist worker (--dist loadgroup): one start-up
ONE_SIMULATOR = pytest.mark.xdist_group("test_sim_knob_default_sim")


def _set(sim: SimulatorProcess, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{sim.base_url}/set_internal_state", json=body, headers=headers or {}, timeout=10)


def _state(sim: SimulatorProcess) -> dict[str, Any]:
    return httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"][0]


@pytest.fixture(scope="module")
def _one_simulator() -> Iterator[SimulatorProcess]:
    with SimulatorProcess() as sim:
        yield sim


@pytest.fixture
def default_sim(_one_simulator: SimulatorProcess) -> SimulatorProcess:
    """The module's default simulator, its knob back at the default (64) before each test: the tests
    that use it write unmarked (no spectower_writer), which takes no lock, so nothing else carries over
    (one start-up for all of them instead of one each)."""
    sim = _one_simulator
    assert _set(sim, {"server_args": {KNOB: 64}}).json() == [True]
    assert _state(sim)["spectower"]["owner"] == "policy" and _state(sim)["spectower"]["lock"] is None
    return sim


@ONE_SIMULATOR
def test_knob_set_and_read_back(default_sim: SimulatorProcess) -> None:
    sim = default_sim
    assert _state(sim)["spectower"]["spec_max_bs"] == 64
    r = _set(sim, {"server_args": {KNOB: 8}})
    assert r.status_code == 200 and r.json() == [True]
    assert _state(sim)["spectower"]["spec_max_bs"] == 8
    assert httpx.put(
        f"{sim.base_url}/set_internal_state", json={"server_args": {KNOB: 0}}, timeout=10
    ).json() == [True]
    assert _state(sim)["spectower"]["spec_max_bs"] == 0
    # a float is not a ceiling, integral or not: refused, as the SGLang plugin refuses it
    assert _set(sim, {"server_args": {KNOB: 5.0}}).json() == [False]
    assert _state(sim)["spectower"]["spec_max_bs"] == 0


def _scenario() -> Any:
    path = REPO_ROOT / "tests" / "sglang_plugin_checks" / "contract_scenario.py"
    spec = importlib.util.spec_from_file_location("contract_scenario", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ownership_contract_matches_the_plugin(simulator_factory: SimulatorFactory) -> None:
    """The scenario tests/test_sglang_plugin.py plays inside SGLang, over the simulator's HTTP surface."""
    scenario = _scenario()
    sim = simulator_factory(max_running_requests=48, dp_size=2)

    def set_state(request: dict[str, Any]) -> bool:
        answer = _set(sim, {"server_args": request}).json()
        assert len(answer) == 2 and len(set(answer)) == 1, answer  # every rank answers alike
        return bool(answer[0])

    def get_spectower() -> dict[str, Any]:
        states = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"]
        owners = {s["spectower"]["owner"] for s in states}
        assert len(owners) == 1, owners
        return dict(states[0]["spectower"])

    rows = scenario.run(set_state, get_spectower)
    assert scenario.mismatches(rows) == []


@pytest.mark.parametrize("value", [-1, 2.5, -0.5, 2**31])
@ONE_SIMULATOR
def test_negative_or_fractional_refused_and_unchanged(default_sim: SimulatorProcess, value: float) -> None:
    sim = default_sim
    _set(sim, {"server_args": {KNOB: 7}})
    r = _set(sim, {"server_args": {KNOB: value}})
    assert r.status_code == 200 and r.json() == [False]
    assert _state(sim)["spectower"]["spec_max_bs"] == 7


@ONE_SIMULATOR
def test_unknown_key_false_and_nothing_applied(default_sim: SimulatorProcess) -> None:
    sim = default_sim
    _set(sim, {"server_args": {KNOB: 7}})
    assert _set(sim, {"server_args": {"no_such_key": 3}}).json() == [False]
    # one bad key in the body: nothing of it is applied
    assert _set(sim, {"server_args": {KNOB: 9, "no_such_key": 3}}).json() == [False]
    assert _state(sim)["spectower"]["spec_max_bs"] == 7


@pytest.mark.parametrize(
    "body",
    [
        {"server_args": {KNOB: "abc"}},
        {"server_args": {KNOB: None}},
        {"server_args": {KNOB: [1]}},
        {"server_args": "x"},
        {"nothing": 1},
        [1, 2],
    ],
)
@ONE_SIMULATOR
def test_non_numbers_get_sglangs_400(default_sim: SimulatorProcess, body: Any) -> None:
    sim = default_sim
    r = _set(sim, body)
    assert r.status_code == 400
    assert r.json()["object"] == "error"
    assert _state(sim)["spectower"]["spec_max_bs"] == 64


def test_one_boolean_per_dp_rank(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(dp_size=3)
    assert _set(sim, {"server_args": {KNOB: 4}}).json() == [True, True, True]
    assert _set(sim, {"server_args": {"bogus": 4}}).json() == [False, False, False]
    states = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"]
    assert [s["spectower"]["spec_max_bs"] for s in states] == [4, 4, 4]


def test_gate_applies_by_batch_size(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(decode_log_interval=5)
    _set(sim, {"server_args": {KNOB: 2}})

    async def load(c: int, seconds: float) -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            clock = TokenClock()
            stop = time.monotonic() + seconds
            await asyncio.gather(
                *(stream_worker(client, sim.base_url, 2000, clock, stop, {}) for _ in range(c))
            )

    before = _state(sim)["spectower"]
    asyncio.run(load(4, 2.0))  # batch 4 > 2: gated
    mid = _state(sim)["spectower"]
    assert mid["batches_gated"] > before["batches_gated"]
    asyncio.run(load(2, 2.0))  # batch 2 <= 2: drafted
    after = _state(sim)["spectower"]
    assert after["batches_drafted"] - mid["batches_drafted"] > 10


@pytest.mark.slow
def test_knob_flip_mid_run_moves_throughput_within_a_second(simulator_factory: SimulatorFactory) -> None:
    """C=32 on glm5: spec on 1290 tok/s, off 1420 tok/s. Flip mid-run: the steps after it are gated at once,
    and each side runs on its curve, as the engine's own counters (clock "model") count it. The served rate
    against the wall clock is benchmarks/sim_fidelity.py's: on a loaded box the simulator falls behind."""
    profile = load_profile("glm5-nvfp4-8x-rtx-pro-6000")
    c = 32
    on, off = profile.output_tok_s(c, True), profile.output_tok_s(c, False)
    sim = simulator_factory(decode_log_interval=10, explore_share=0)
    headers: dict[str, str] = {}
    results: dict[str, Any] = {}

    async def counters(client: httpx.AsyncClient) -> dict[str, Any]:
        info = (await client.get(f"{sim.base_url}/server_info")).json()["internal_states"][0]
        return dict(info["spectower"]["counters"])

    async def run() -> None:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=c + 4)) as client:
            clock = TokenClock()
            stop = time.monotonic() + 9.0
            workers = [
                asyncio.create_task(stream_worker(client, sim.base_url, 4000, clock, stop, headers))
                for _ in range(c)
            ]
            await asyncio.sleep(2.0)  # the batch fills
            first = await counters(client)
            await asyncio.sleep(2.0)
            at_flip = await counters(client)
            r = await client.post(f"{sim.base_url}/set_internal_state", json={"server_args": {KNOB: 0}})
            info = (await client.get(f"{sim.base_url}/server_info")).json()["internal_states"][0]
            results["ack"] = r.json()
            results["read_back"] = info["spectower"]["spec_max_bs"]
            applied = dict(info["spectower"]["counters"])  # the same read as the read-back
            await asyncio.sleep(1.0)
            info2 = (await client.get(f"{sim.base_url}/server_info")).json()["internal_states"][0]
            results["active_steps_after"] = info2["speculative_num_steps"]
            after = dict(info2["spectower"]["counters"])
            for worker in workers:  # measured: the load is not needed until its own deadline
                worker.cancel()
            outcomes = await asyncio.gather(*workers, return_exceptions=True)
            results["load_errors"] = [o for o in outcomes if isinstance(o, Exception)]
            results["before"] = rates(first, at_flip)
            results["after"] = rates(applied, after)

    asyncio.run(run())
    assert results["load_errors"] == []
    assert results["ack"] == [True] and results["read_back"] == 0
    assert results["active_steps_after"] == 0
    before, after = results["before"], results["after"]
    b = before["bins"].index(32)
    assert sum(before["gated"]["steps"]) == 0 and before["drafted"]["steps"][b] > 0
    assert before["drafted"]["tok_s"][b] == pytest.approx(on, rel=0.03), before
    # the second after the read-back: every step but the one in flight at the flip is gated
    assert sum(after["drafted"]["steps"]) <= 1 and after["gated"]["steps"][b] > 0, after
    assert after["gated"]["tok_s"][b] == pytest.approx(off, rel=0.03), after
