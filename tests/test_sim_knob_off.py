"""The simulator's scheduler serves the profile's curves: the knob at 0 runs the measured knob-off curve
(``spec_off``), not a plain server's; a profile without speculation runs its plain curve and never drafts.

Virtual time: the rank's sleep is replaced by one that returns at once, so a step's duration is what the
scheduler computed (its ``busy_s``) and the checks are exact on any machine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import Profile, parse_profile
from spectower.simulator.server_info import ServerInfo

from tests.test_bench_plain_sim import THREE_CURVES
from tests.test_sim_explore import virtual_time  # noqa: F401 (autouse: the step clock's sleep patched out)

BATCH = 16  # a profile point: the curve there is the profile's number, no interpolation


# at 16: knob on 750, knob off (measured) 650, a plain server 1200
CURVES = {"spec_on": [190.0, 430.0, 750.0], "spec_off": [84.0, 240.0, 650.0], "plain": [100.0, 380.0, 1200.0]}


def _profile(**changes: Any) -> Profile:
    data = json.loads(json.dumps(THREE_CURVES)) | {"output_tok_s": CURVES}
    return parse_profile(data | changes, source="three-curves")


def _decode_rate(profile: Profile, knob: int | None, steps: int = 200) -> tuple[float, RankScheduler]:
    """Aggregate output tokens/s of ``steps`` decode steps over ``BATCH`` running requests."""

    async def run() -> tuple[float, RankScheduler]:
        engine = Engine(SimConfig(profile=profile, explore_share=0.0))  # the curves alone, no exploring
        if knob is not None:
            engine.set_spec_max_bs(knob)
        rank = engine.ranks[0]
        for _ in range(BATCH):
            rank.submit(engine.new_request(8, 100_000, streaming=False))
        deadline = await rank._prefill(engine.max_running_requests, 0.0)
        busy, tokens = rank.busy_s, rank.total_decode_tokens
        for _ in range(steps):
            deadline = await rank._decode(deadline)
        return (rank.total_decode_tokens - tokens) / (rank.busy_s - busy), rank

    return asyncio.run(run())


def test_knob_zero_serves_the_measured_knob_off_curve_not_the_plain_one() -> None:
    profile = _profile()
    rate, rank = _decode_rate(profile, knob=0)
    assert rate == pytest.approx(650.0, rel=1e-9)  # output_tok_s.spec_off at 16
    assert rate != pytest.approx(1200.0, rel=0.1)  # output_tok_s.plain at 16
    assert rank.batches_drafted == 0 and rank.batches_gated == 200


def test_a_ceiling_below_the_batch_gates_it_onto_the_knob_off_curve_too() -> None:
    rate, rank = _decode_rate(_profile(), knob=BATCH - 1)
    assert rate == pytest.approx(650.0, rel=1e-9)
    assert rank.batches_gated == 200


def test_knob_on_serves_the_spec_on_curve() -> None:
    # accept 1.9 at 16 is split into 1 or 2 tokens per request (seeded); the rate holds on average
    rate, rank = _decode_rate(_profile(), knob=None, steps=400)
    assert rate == pytest.approx(750.0, rel=0.03)
    assert rank.batches_drafted == 400


def test_without_speculation_the_plain_curve_and_never_a_draft() -> None:
    plain = _profile().without_speculation()
    assert not plain.speculative and plain.raw["speculative_algorithm"] is None
    for knob in (None, 0, 64):
        rate, rank = _decode_rate(plain, knob=knob)
        assert rate == pytest.approx(1200.0, rel=1e-9)
        assert rank.batches_drafted == 0 and rank.active_steps == 0


def test_without_a_plain_curve_spec_off_stands_for_the_plain_server() -> None:
    old = _profile(output_tok_s={"spec_on": [190.0, 430.0, 750.0], "spec_off": [84.0, 240.0, 650.0]})
    assert old.plain_tok_s is None
    rate, _ = _decode_rate(old.without_speculation(), knob=None)
    assert rate == pytest.approx(650.0, rel=1e-9)


def test_a_profile_with_a_null_algorithm_is_a_plain_server_in_server_info(tmp_path: Path) -> None:
    profile = _profile(speculative_algorithm=None)
    assert not profile.speculative

    async def info() -> dict[str, Any]:
        engine = Engine(SimConfig(profile=profile))
        server = ServerInfo(SimConfig(profile=profile), engine)
        try:
            return server.server_info()
        finally:
            server.close()

    data = asyncio.run(info())
    assert data["speculative_algorithm"] is None and data["speculative_adaptive"] is False
    assert data["speculative_num_draft_tokens"] is None
    state = data["internal_states"][0]
    assert "spectower" not in state and state["speculative_num_steps"] is None
