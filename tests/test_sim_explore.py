"""The simulator's exploration, as the SGLang plugin's gate does it (``plugin.explore``): runs of 4 decode
batches, one in ``round(1 / share)`` of a batch-size bin's, run the other mode, counted in the engine
counters (a run's first batch and the first after it as settling); none while a lock holds the
knob; the share set at launch or through ``spectower_explore_share``. The decode loop runs in virtual time
(the step clock's sleep is patched out), so the counts are exact."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from spectower.plugin import knob_contract
from spectower.simulator import knob_state
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import load_profile
from spectower.simulator.server_info import ServerInfo

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"


async def _no_sleep(self: RankScheduler, deadline: float) -> float:
    return deadline


@pytest.fixture(autouse=True)
def virtual_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Virtual time: a rank's sleep returns at once, so a step lasts what the scheduler computed (the tests
    that import this fixture get it too)."""
    monkeypatch.setattr(RankScheduler, "_sleep_until", _no_sleep)


def _decode(engine: Engine, batch: int, steps: int) -> RankScheduler:
    """``steps`` decode steps over ``batch`` running requests on rank 0 (requests that never finish)."""

    async def run() -> RankScheduler:
        rank = engine.ranks[0]
        rank.running.clear()
        for _ in range(batch):
            rank.submit(engine.new_request(8, 10**9, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, 0.0)
        # the steady steps alone: the setup's prefill would land in the first step's counted time (the
        # overlap loop's accounting, tests/test_sim_engine.py), which these tests do not measure
        rank.prefill_s_unspanned = 0.0
        for _ in range(steps):
            deadline = await rank._decode(deadline)
        return rank

    return asyncio.run(run())


def _steps(engine: Engine, mode: str, batch: int) -> int:
    counters = engine.ranks[0].counters
    return int(counters.steps[mode][counters.bin_index(batch)])


# (a bin the knob gates explores in windows: tests/test_sim_warm_gated.py)
@pytest.mark.parametrize("knob, majority, minority", [(64, "drafted", "gated")])
def test_runs_of_four_explore_one_in_fifty_batches_of_a_bin(knob: int, majority: str, minority: str) -> None:
    engine = Engine(SimConfig(profile=load_profile(PROFILE)))  # the default share, 2 %
    assert engine.explore_share == knob_contract.DEFAULT_EXPLORE_SHARE and engine.explore_period == 50
    engine.set_spec_max_bs(knob)
    _decode(engine, 12, 1000)  # bin 12: runs at batches 50, 250, 450, 650 and 850
    # counted: the runs less their first batches; the rest less the first batch after each run
    assert (_steps(engine, minority, 12), _steps(engine, majority, 12)) == (20 - 5, 1000 - 20 - 5)
    _decode(engine, 3, 449)  # bin 3 counts on its own: runs at 50 and 250
    assert (_steps(engine, minority, 3), _steps(engine, majority, 3)) == (8 - 2, 449 - 8 - 2)
    assert engine.ranks[0].batches_explored == 28
    settling = engine.ranks[0].counters.snapshot()["settling"]
    assert settling["steps"] == 14 and settling["tokens"] > 0 and settling["time_s"] > 0


def test_share_zero_explores_nothing_and_a_lock_pauses_exploring() -> None:
    engine = Engine(SimConfig(profile=load_profile(PROFILE), explore_share=0.0))
    _decode(engine, 12, 500)
    assert _steps(engine, "gated", 12) == 0 and engine.ranks[0].batches_explored == 0
    # an operator's off, held: off means off
    engine = Engine(SimConfig(profile=load_profile(PROFILE)))
    request = knob_contract.parse_request({"spectower_writer": 1, "spectower_spec_max_bs": 0})
    assert request is not None
    knob_state.apply(engine, request)
    engine.owner.commit(request, previous=64)
    assert not engine.explore_allowed()
    _decode(engine, 12, 500)
    assert _steps(engine, "drafted", 12) == 0 and _steps(engine, "gated", 12) == 500
    release = knob_contract.parse_request({"spectower_writer": 1, "spectower_release": 1})
    assert release is not None
    engine.owner.commit(release, previous=0)
    _decode(engine, 12, 500)
    # released at 0: a policy's 0, exploring again but in windows, the first one after the cold part
    assert _steps(engine, "drafted", 12) == 0 and engine.ranks[0].explorer.phase_now == "cold"
    engine.set_spec_max_bs(12)
    before = _steps(engine, "gated", 12)
    _decode(engine, 12, 500)
    # a drafting bin explores in runs throughout, counted from here on: at 50, 250, 450, their first batches
    # settling
    assert _steps(engine, "gated", 12) - before == 12 - 3


def test_the_share_is_set_at_runtime_and_read_back_per_rank() -> None:
    config = SimConfig(profile=load_profile(PROFILE), dp_size=2)
    engine = Engine(config)
    info = ServerInfo(config, engine)
    try:
        request = knob_contract.parse_request({"spectower_explore_share": 0.1})  # unmarked: no lock taken
        assert request is not None and request.settings_only
        knob_state.apply(engine, request)
        engine.owner.commit(request, previous=64)
        _decode(engine, 12, 100)  # period 10: runs of 4 at the 10th, 50th and 90th batch
        states = info.server_info()["internal_states"]
        explore: list[dict[str, Any]] = [s["spectower"]["explore"] for s in states]
        window = explore[0].pop("window")
        assert explore[0] == {"share": 0.1, "period": 10, "run": 4, "batches": 12, "active": True}
        assert window["active"] is False and window["phase"] is None  # drafting: no window (a policy's 0)
        assert explore[1]["batches"] == 0 and explore[1]["share"] == 0.1
        assert states[0]["spectower"]["owner"] == "policy"  # a settings-only write takes no lock
        counters = states[0]["spectower"]["counters"]
        assert counters["gated"]["steps"][counters["bins"].index(12)] == 12 - 3
    finally:
        info.close()


@pytest.mark.parametrize("share", [-0.1, 0.25, float("nan")])
def test_a_bad_share_is_refused_naming_it(share: float) -> None:
    with pytest.raises(ValueError, match="explore-share"):
        SimConfig(profile=load_profile(PROFILE), explore_share=share)
    with pytest.raises(knob_contract.ContractError, match="spectower_explore_share"):
        knob_contract.parse_request({"spectower_explore_share": share})
