"""Exploration without the request-mix lean (issue #32, item 2), in the simulator with requests that accept
differently (simulator/accept_kinds.py: half accept 4 tokens per verify step, half 2, as the GPU check's
constructed pair).

A drafting stream keeps a request for length / accept steps, so its batches hold more of the requests that
accept less: its tokens per request-step are the harmonic mean of the kinds (2.67 here). A drafting batch
explored among gated ones carries the gated stream's batch, the plain mean (3.0): 1.125x. The windows'
exploring part is a drafting stream whose first half (the turnover) is not counted, so the explored drafted
rate is a drafting stream's (plugin/explore.py). Closed loop, mixed output lengths, virtual time (the step
clock's sleep patched out, no noise): the counts are exact.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from spectower.collectors.bench.lengths import OutputLengths
from spectower.plugin import explore
from spectower.simulator.accept_kinds import (
    AcceptKind,
    arithmetic_mean,
    harmonic_mean,
    kind_of,
    parse_accept_kinds,
)
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler

from tests.test_sim_explore import virtual_time  # noqa: F401 (autouse: the step clock's sleep patched out)
from tests.test_sim_warm_gated import _profile

BATCH = 16
KINDS = (AcceptKind(4.0, 0.5), AcceptKind(2.0, 0.5))
LENGTHS = OutputLengths(16, 48)  # a request lives 4-24 drafted steps: a 64-batch window turns over
CYCLE = 1600  # batches per exploration window (the plugin's default is 8192: shorter to keep the test short)
# the default share: the window's exploring part is 64 batches (twice 1600 / 50), 32 of them turnover; a
# larger share would shorten the cold part too (plugin 0.4.16)
SHARE = 0.02


def _closed_loop(engine: Engine, steps: int) -> RankScheduler:
    """``steps`` decode steps with ``BATCH`` requests running: each finished one replaced before the next
    step (its output length by its index)."""

    async def run() -> RankScheduler:
        rank = engine.ranks[0]
        deadline = 0.0
        for _ in range(steps):
            while len(rank.running) + len(rank.waiting) < BATCH:
                request = engine.new_request(8, 0, streaming=False)
                request.max_new_tokens = LENGTHS.of(request.index)
                rank.submit(request)
            if rank.waiting:
                deadline = await rank._prefill(engine.max_running_requests, deadline)
            deadline = await rank._decode(deadline)
        return rank

    return asyncio.run(run())


def _drafted_rate(rank: RankScheduler) -> float:
    counters = rank.counters
    i = counters.bin_index(BATCH)
    assert counters.steps["drafted"][i] > 0
    return counters.tokens["drafted"][i] / counters.time_s["drafted"][i]


def _steady_drafting() -> float:
    engine = Engine(SimConfig(profile=_profile(), explore_share=0.0, accept_kinds=KINDS))
    return _drafted_rate(_closed_loop(engine, 3000))


def _explored_above_the_ceiling(cycle: int) -> float:
    config = SimConfig(profile=_profile(), explore_share=SHARE, explore_cycle=cycle, accept_kinds=KINDS)
    engine = Engine(config)
    # a policy's 8: no lock, the gate explores; 16 running lie within the stream's limit (stream_limit)
    engine.set_spec_max_bs(8)
    return _drafted_rate(_closed_loop(engine, 6 * CYCLE))


def test_a_drafting_stream_serves_the_harmonic_mean_of_its_requests_accept_lengths() -> None:
    engine = Engine(SimConfig(profile=_profile(), explore_share=0.0, accept_kinds=KINDS))
    counters = _closed_loop(engine, 3000).counters
    i = counters.bin_index(BATCH)
    # per step, not per second: the counted time holds the prefills too (the overlap loop's accounting)
    tokens_per_request_step = counters.tokens["drafted"][i] / counters.steps["drafted"][i] / BATCH
    assert tokens_per_request_step == pytest.approx(harmonic_mean(KINDS), rel=0.03)
    assert harmonic_mean(KINDS) == pytest.approx(8 / 3) and arithmetic_mean(KINDS) == 3.0


def test_exploring_in_windows_measures_the_drafting_streams_rate() -> None:
    steady = _steady_drafting()
    windowed = _explored_above_the_ceiling(CYCLE)
    assert windowed / steady == pytest.approx(1.0, abs=0.03)


def test_exploring_in_runs_among_gated_batches_leans_by_the_request_mix() -> None:
    # without windows (SPECTOWER_EXPLORE_CYCLE=0) exploring runs 4 batches at a time inside the gated stream:
    # the explored batches carry its mix, and the drafted side reads high by about the plain over the
    # harmonic mean of the accept lengths (1.125; the H200 read 1.119 on 2026-12-01)
    lean = _explored_above_the_ceiling(0) / _steady_drafting()
    assert 1.04 < lean < arithmetic_mean(KINDS) / harmonic_mean(KINDS) + 0.03


def test_kinds_are_parsed_with_one_line_errors_and_chosen_by_index() -> None:
    assert parse_accept_kinds("4:0.5,2:0.5", 4.0) == KINDS
    bad_kinds = (("4:0.5", "sum to 1"), ("5:1", "within 1..4"), ("x", "ACCEPT:SHARE"), ("4:0,2:1", "(0, 1]"))
    for bad, why in bad_kinds:
        with pytest.raises(ValueError, match="--accept-kinds: .*" + re.escape(why)):
            parse_accept_kinds(bad, 4.0)
    picks = [kind_of(i, KINDS) for i in range(2000)]
    assert abs(picks.count(4.0) / len(picks) - 0.5) < 0.03 and kind_of(7, ()) is None


def test_a_part_cut_by_its_time_cap_still_measures_the_stream_while_its_turnover_outlives_most_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plugin 0.4.4 ends an exploring part at ``explore.WINDOW_EXPLORE_MAX_S`` of busy time and counts its
    second half in time. Here a part is 64 drafted batches of 43 ms (2.7 s, within the 3-s cap) and requests
    live 4-24 drafted steps. Capped at 0.5 s (12 batches, 6 of turnover) it still reads the drafting stream's
    rate within 3 %; capped at 0.2 s (2 of turnover) the batch has not turned over and the request-mix lean
    comes back. Where the cap binds on a GPU (drafted steps of 40 ms, outputs of a few hundred tokens), its
    1.5-s turnover is shorter than a request's drafted lifetime (docs/off-means-off.md: what that costs)."""
    steady = _steady_drafting()
    monkeypatch.setattr(explore, "WINDOW_EXPLORE_MAX_S", 0.5)
    assert _explored_above_the_ceiling(CYCLE) / steady == pytest.approx(1.0, abs=0.03)
    monkeypatch.setattr(explore, "WINDOW_EXPLORE_MAX_S", 0.2)
    assert _explored_above_the_ceiling(CYCLE) / steady > 1.04
