"""control/prefilled.py: a mode's rate with the bin's prefill seconds per token in place of its own spans'."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectower.control import prefilled
from spectower.control.prefilled import ModeSteps, levelled_tok_s, prefill_s_per_token


def stream(steps: int, tokens_per_step: float, step_s: float, prefill_s: float, prefills: int) -> ModeSteps:
    """A mode's steps in a bin: ``prefills`` of them carry a prefill of ``prefill_s`` in their span."""
    return ModeSteps(
        steps=steps,
        tokens=steps * tokens_per_step,
        time_s=steps * step_s + prefills * prefill_s,
        prefilled_steps=prefills,
        prefilled_tokens=prefills * tokens_per_step,
        prefilled_time_s=prefills * (step_s + prefill_s),
    )


def test_a_bin_of_one_mode_reads_its_plain_rate() -> None:
    """A steady stream: the levelled rate is tokens over all its seconds, prefills included."""
    off = stream(1000, 16, 0.007, 0.004, 60)
    per_token = prefill_s_per_token([off])
    assert per_token == pytest.approx(60 * 0.004 / 16000)
    assert levelled_tok_s(off, per_token or 0.0) == pytest.approx(off.tokens / off.time_s)


def test_explored_gated_steps_in_a_drafting_stream_read_the_steady_gated_rate() -> None:
    """The H100's case at 16 (2026-12-06): a drafting stream brings 2.5x the prefills per step; its explored
    gated steps carry that many and read low on their raw rate, at the steady rate levelled. A request of
    256 tokens on average: a prefill per 256 tokens in either stream."""
    prefill, length = 0.004, 256
    steady = stream(8000, 16, 0.0070, prefill, round(8000 * 16 / length))  # a prefill per 16 steps
    drafted = stream(9000, 40, 0.0100, prefill, round(9000 * 40 / length))
    explored = stream(300, 16, 0.0070, prefill, round(300 * 40 / length))  # the drafting stream's share
    raw = explored.tokens / explored.time_s
    steady_rate = steady.tokens / steady.time_s
    assert raw / steady_rate < 0.97  # the lean the levelling removes
    per_token = prefill_s_per_token([drafted, explored])
    assert per_token == pytest.approx(prefill / length, rel=0.02)
    assert (levelled_tok_s(explored, per_token or 0.0) or 0) / steady_rate == pytest.approx(1.0, abs=0.005)
    # the drafted side keeps its own rate: it carries its stream's own prefills
    own = drafted.tokens / drafted.time_s
    assert levelled_tok_s(drafted, per_token or 0.0) == pytest.approx(own, rel=0.01)


def test_too_few_pure_steps_read_nothing() -> None:
    thin = ModeSteps(steps=prefilled.MIN_PURE_STEPS + 3, tokens=400, time_s=0.3, prefilled_steps=4,
                     prefilled_tokens=60, prefilled_time_s=0.06)  # fmt: skip
    assert thin.pure_step_s() is None and thin.prefill_s() is None
    assert prefill_s_per_token([thin]) is None
    assert levelled_tok_s(thin, 0.0) is None
    # a mode with no steps in the bin is left out of the bin's prefill seconds
    empty = ModeSteps(0, 0, 0.0)
    assert prefill_s_per_token([empty, stream(100, 8, 0.006, 0.003, 10)]) == pytest.approx(0.03 / 800)
    assert prefill_s_per_token([empty]) is None


@given(
    steps=st.integers(100, 10_000),
    tokens_per_step=st.floats(1, 200),
    step_s=st.floats(0.001, 0.05),
    prefill_s=st.floats(0.0, 0.02),
    share=st.floats(0.0, 0.5),
)
def test_levelling_a_lone_mode_is_the_identity(
    steps: int, tokens_per_step: float, step_s: float, prefill_s: float, share: float
) -> None:
    mode = stream(steps, tokens_per_step, step_s, prefill_s, int(steps * share))
    per_token = prefill_s_per_token([mode])
    assert per_token is not None
    assert levelled_tok_s(mode, per_token) == pytest.approx(mode.tokens / mode.time_s, rel=1e-9)
