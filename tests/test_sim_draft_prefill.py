"""The wire simulator's prefill and the draft's pass (simulator/engine.py, plugin 0.4.10's rule
``knob_contract.prefill_skippable``): a prefill whose requests join a gated decode batch with nothing needing
the draft warm runs at ``prefill_tok_s / (1 - draft_prefill_share)`` and holes its requests, as the SGLang
plugin skips the draft model's pass over the prompts.

Virtual time: the rank's sleep returns at once, so a prefill lasts what the scheduler computed.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from spectower.plugin import knob_contract
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import Profile

from tests.test_sim_explore import virtual_time  # noqa: F401 (autouse: the step clock's sleep patched out)
from tests.test_sim_warm_gated import _lock, _profile

SHARE = 0.04
PROMPT = 4000  # tokens: a prefill well above the minimum prefill time


def _with_share(share: float = SHARE) -> Profile:
    return dataclasses.replace(_profile(), draft_prefill_share=share)


def _prefill_s(engine: Engine, running: int) -> tuple[float, RankScheduler]:
    """The seconds one prompt's prefill takes on rank 0 with ``running`` requests decoding beside it."""

    async def run() -> tuple[float, RankScheduler]:
        rank = engine.ranks[0]
        rank.running.clear()
        for _ in range(running):
            rank.submit(engine.new_request(8, 10**9, streaming=False))
        await rank._prefill(engine.max_running_requests, 0.0)
        rank.submit(engine.new_request(PROMPT, 10, streaming=False))
        return await rank._prefill(engine.max_running_requests, 0.0), rank

    return asyncio.run(run())


def test_a_lock_at_zero_prefills_without_the_drafts_pass_and_holes_the_prompt() -> None:
    engine = Engine(SimConfig(profile=_with_share(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    _lock(engine, 0)
    seconds, rank = _prefill_s(engine, running=0)
    assert seconds == pytest.approx(PROMPT / engine.profile.prefill_tok_s * (1 - SHARE))
    assert len(rank.holes.holed) == 1


@pytest.mark.parametrize("ceiling, running, skipped", [(16, 16, True), (16, 15, False), (64, 16, False)])
def test_a_policys_prompt_skips_only_where_its_next_batch_is_gated(ceiling: int, running: int,
                                                                   skipped: bool) -> None:  # fmt: skip
    """Nothing exploring: the prompt with the requests decoding beside it makes the next batch; above the
    ceiling it is gated and the prompt skips the draft's pass, at or under it the batch drafts."""
    engine = Engine(SimConfig(profile=_with_share(), explore_share=0.0))
    engine.set_spec_max_bs(ceiling)
    seconds, rank = _prefill_s(engine, running)
    full = PROMPT / engine.profile.prefill_tok_s
    assert seconds == pytest.approx(full * (1 - SHARE) if skipped else full)
    assert rank.draft_prefill_skipped(running + 1) is skipped


def test_without_a_share_or_while_exploring_outside_a_cold_part_the_drafts_pass_runs() -> None:
    unmodelled = Engine(SimConfig(profile=_with_share(0.0), explore_share=0.0))
    unmodelled.set_spec_max_bs(0)
    assert _prefill_s(unmodelled, 0)[0] == pytest.approx(PROMPT / unmodelled.profile.prefill_tok_s)
    exploring = Engine(SimConfig(profile=_with_share(), explore_share=knob_contract.DEFAULT_EXPLORE_SHARE))
    exploring.set_spec_max_bs(0)  # a policy's 0: its windows have no part yet (no gated batch decoded)
    assert _prefill_s(exploring, 0)[0] == pytest.approx(PROMPT / exploring.profile.prefill_tok_s)


def test_a_raised_knob_drains_the_holed_requests_before_drafting_and_says_so() -> None:
    """The gated-decode plugin's drain on the wire: requests a skipped extend holed run gated, with the
    extend, once the knob lets their batch draft, until they finish; a fresh request then drafts. The
    ``gated_decode`` block counts it as the plugin's does."""
    engine = Engine(SimConfig(profile=_with_share(), explore_share=0.0))
    engine.set_spec_max_bs(0)

    async def run() -> tuple[RankScheduler, list[int]]:
        rank = engine.ranks[0]
        for _ in range(4):
            rank.submit(engine.new_request(8, 6, streaming=False))  # the prefill's token and 5 decoded
        deadline = await rank._prefill(engine.max_running_requests, 0.0)
        deadline = await rank._decode(deadline)  # gated at 0: the extend skipped, all four holed
        engine.set_spec_max_bs(64)
        drafted = []
        while rank.running:
            deadline = await rank._decode(deadline)
            drafted.append(rank.batches_drafted)
        rank.submit(engine.new_request(8, 6, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, deadline)
        await rank._decode(deadline)
        return rank, drafted

    rank, drafted = asyncio.run(run())
    assert drafted == [0, 0, 0, 0]  # four drained steps, none drafted
    assert rank.batches_drafted == 1  # the fresh request drafts at once
    report = rank.holes.report()
    assert report == {"enabled": True, "holed_requests": 0, "batches_skipped": 1, "batches_drained": 4,
                      "drains_cut_short": 0, "prefills_skipped": 1}  # fmt: skip
