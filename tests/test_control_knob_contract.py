"""plugin/knob_contract.py's exploration key: validation, who may set it, and that alone it moves no lock."""

from __future__ import annotations

import math

import pytest
from spectower.plugin import knob_contract as kc


def test_the_share_is_validated_naming_the_key() -> None:
    request = kc.parse_request({kc.EXPLORE_KEY: 0.05})
    assert request is not None and request.explore_share == 0.05 and request.settings_only
    assert kc.parse_request({kc.EXPLORE_KEY: 0})  # 0 turns exploring off
    for bad in (-0.01, 0.21, math.inf, True, "0.1"):
        with pytest.raises(kc.ContractError, match=f"{kc.EXPLORE_KEY} must be a number in 0..0.2"):
            kc.explore_share_of(bad)
    assert kc.explore_period(0.02) == 50 and kc.explore_period(0.03) == 33 and kc.explore_period(0.0) == 0


def test_a_share_alone_takes_no_lock_and_a_ceiling_beside_it_does() -> None:
    owner = kc.KnobOwner(clock=lambda: 1000.0)
    for writer in (kc.WRITER_MANUAL, kc.WRITER_SWEEP):
        request = kc.parse_request({kc.WRITER_KEY: writer, kc.EXPLORE_KEY: 0.1})
        assert request is not None and owner.check(request) is None
        owner.commit(request, previous=64)
        assert owner.owner() == kc.OWNER_FREE, writer
    both = kc.parse_request({kc.WRITER_KEY: kc.WRITER_MANUAL, kc.KNOB_KEY: 0, kc.EXPLORE_KEY: 0.0})
    assert both is not None and not both.settings_only
    owner.commit(both, previous=64)
    assert owner.owner() == "manual"
    policy = kc.parse_request({kc.WRITER_KEY: kc.WRITER_POLICY, kc.EXPLORE_KEY: 0.05})
    assert policy is not None and "locked by a manual write" in (owner.check(policy) or "")


def test_the_client_side_sends_it_and_a_bare_hold_still_needs_something_to_do() -> None:
    args = kc.KnobRequest(writer=kc.WRITER_MANUAL, explore_share=0.1).to_server_args()
    assert args == {kc.WRITER_KEY: kc.WRITER_MANUAL, kc.EXPLORE_KEY: 0.1}
    with pytest.raises(kc.ContractError, match=f"nothing to do: give .*{kc.EXPLORE_KEY}"):
        kc.parse_request({kc.WRITER_KEY: kc.WRITER_POLICY})


def test_the_extend_is_skippable_for_a_batch_the_ceiling_gates_with_nothing_needing_the_draft_warm() -> None:
    """One rule for the plugin, the simulator and its harness: a batch the ceiling gates (any ceiling)
    skips the extend when nothing explores (a lock pauses exploration, or the share is 0) or in an
    exploration window's cold part; a batch gated by exploration inside a drafting bin keeps it."""
    period = kc.explore_period(0.02)
    assert kc.extend_skippable(True, 0, kc.OWNER_FREE)
    assert kc.extend_skippable(True, period, "manual")
    assert not kc.extend_skippable(True, period, kc.OWNER_FREE)  # exploring, no window phase: kept
    assert kc.extend_skippable(True, period, kc.OWNER_FREE, "cold")
    assert not kc.extend_skippable(False, 0, kc.OWNER_FREE)
    assert not kc.extend_skippable(False, period, "manual")


def test_the_drafts_prefill_is_skippable_under_a_lock_at_zero_or_before_a_batch_skipping_its_extend() -> None:
    """Plugin 0.4.10: a prefill skips the draft's pass under a lock at 0, and where the decode batch its
    requests join next will be gated and skip its extend; a drafting batch next and a window's warm and
    exploring parts keep it."""
    period = kc.explore_period(0.02)
    assert kc.prefill_skippable(0, True, period, "manual")  # an operator's off
    assert not kc.prefill_skippable(48, False, period, "manual")  # an operator's on
    assert not kc.prefill_skippable(0, True, period, kc.OWNER_FREE)  # a policy's 0 exploring, no window
    assert kc.prefill_skippable(16, True, 0, kc.OWNER_FREE)  # gated load, nothing explores
    assert kc.prefill_skippable(16, True, period, kc.OWNER_FREE, "cold")
    for part in ("warm", "explore", None):
        assert not kc.prefill_skippable(16, True, period, kc.OWNER_FREE, part)
    assert not kc.prefill_skippable(16, False, 0, kc.OWNER_FREE)  # the next batch drafts
    assert not kc.prefill_skippable(None, False, 0, kc.OWNER_FREE)  # no ceiling: nothing is gated
