"""The wire simulator publishes the plugin's ``loop`` block (plugin/loop_stalls.py, the same recorder the
plugin runs), each of a rank's batches timed from its start to its output: a modelled prefill long enough is a
stall named by its batch, as a real server's would be, and idle time is none. Its rank's sleeps advance an
injected clock (the modelled durations), so the figures are the model's."""

from __future__ import annotations

import asyncio

import pytest
from spectower.collectors.sglang.pauses import pause_rows
from spectower.collectors.sglang.stalls import loop_report
from spectower.plugin.loop_stalls import LoopStalls
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import load_profile
from spectower.simulator.server_info import ServerInfo

from tests.test_engine_counters import FakeClock as Clock
from tests.test_sim_explore import PROFILE


def test_a_long_modelled_prefill_is_a_stall_and_idle_time_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    clock.now = 0.0

    async def sleep_until(_rank: RankScheduler, deadline: float) -> float:
        clock.now = max(clock.now, deadline)
        return deadline

    monkeypatch.setattr(RankScheduler, "_sleep_until", sleep_until)
    engine = Engine(SimConfig(profile=load_profile(PROFILE)))
    rank = engine.ranks[0]
    rank.stalls = LoopStalls(clock=clock)
    prefill_s = 16_000 / engine.profile.prefill_tok_s  # one batch of 16 000 prompt tokens
    assert prefill_s >= 0.25, "the profile prefills too fast for this test"

    async def run() -> None:
        for _ in range(4):
            rank.submit(engine.new_request(8, 10**9, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, 0.0)
        for _ in range(20):
            deadline = await rank._decode(deadline)
        rank.stalls.idle()
        clock.now += 60.0  # a quiet minute
        deadline = clock.now
        for _ in range(4):
            rank.submit(engine.new_request(4_000, 10**9, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, deadline)
        for _ in range(20):
            deadline = await rank._decode(deadline)

    asyncio.run(run())
    state = ServerInfo(engine.config, engine).server_info()["internal_states"][0]
    report = loop_report(state["spectower"]["loop"])
    assert report is not None and report.stalls == 1 and report.gaps == 42
    (stall,) = report.recent
    assert stall.seconds == pytest.approx(prefill_s, abs=1e-4)  # kept to 0.1 ms
    said = f"waiting for a batch's result {prefill_s:.2f} s (EXTEND, 4 requests, 16 000 new tokens)"
    assert stall.cause() == said
    # what the collector stores of the simulator's document (collectors/sglang/pauses.py): the stall
    rows = pause_rows(ServerInfo(engine.config, engine).server_info())
    stalls = [(r.process, r.ts, r.seconds, r.detail) for r in rows if r.kind == "stall"]
    assert stalls == [("rank 0", stall.at, stall.seconds, said)]
    assert {r.process for r in rows if r.kind != "stall"} <= {"launcher", "rank 0"}  # its process's own gc
