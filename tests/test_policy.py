"""The policies: specs, the fixed ones and SGLang's default bands (the learning policy has its own file,
tests/test_control_policy_learn.py)."""

from __future__ import annotations

import json

import pytest
from spectower.control.policy import Decision, Observation, Policy, PolicyError, make_policy
from spectower.control.policy.static import sglang_default_ceiling

MRR = 64


def obs(
    ts: float = 0.0,
    running: float = 10.0,
    tok_s: float | None = 1000.0,
    accept: float | None = 2.5,
    knob: int | None = MRR,
    stale: bool = False,
    queued: float = 0.0,
) -> Observation:
    return Observation(
        ts=ts,
        num_running_reqs=running,
        num_queue_reqs=queued,
        output_tok_s=tok_s,
        accept_length=accept,
        spec_max_bs=knob,
        max_running_requests=MRR,
        stale=stale,
    )


# --- specs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["learn", "threshold:30", "threshold:0", "always-on", "always-off", "sglang-default"]
)
def test_every_spec_builds_a_policy(spec: str) -> None:
    policy = make_policy(spec, MRR)
    assert isinstance(policy, Policy)
    json.dumps(policy.state())  # JSON-serialisable


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "learning",
        "threshold",
        "threshold:",
        "threshold:-1",
        "threshold:3.5",
        "threshold:abc",
        "always_on",
    ],
)
def test_bad_spec_is_a_value_error_naming_it(spec: str) -> None:
    with pytest.raises(
        ValueError,
        match=repr(spec)
        .replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace(".", r"\.")
        .replace("$", r"\$"),
    ):
        make_policy(spec, MRR)


def test_bad_options_and_max_running_requests() -> None:
    with pytest.raises(PolicyError, match="bogus"):
        make_policy("learn", MRR, bogus=1)
    with pytest.raises(PolicyError, match="min_dwell_s"):
        make_policy("learn", MRR, min_dwell_s=-1)
    with pytest.raises(PolicyError, match="takes no options"):
        make_policy("always-on", MRR, min_dwell_s=3)
    with pytest.raises(PolicyError, match="max_running_requests"):
        make_policy("learn", 0)
    # sim evaluate scored it (control auto refused it later, at the knob): one bound, where policies are made
    with pytest.raises(PolicyError, match=r"^threshold must be at most 2147483647, got 9{20}$"):
        make_policy("threshold:99999999999999999999", MRR)


# --- fixed policies ----------------------------------------------------------------------------------


def test_threshold_sets_then_holds_and_holds_when_stale() -> None:
    policy = make_policy("threshold:30", MRR)
    assert policy.decide(obs(knob=64)).max_bs == 30
    assert policy.decide(obs(knob=30)).max_bs is None
    stale = policy.decide(obs(knob=64, stale=True))
    assert stale.max_bs is None and "stale" in stale.reason


def test_always_on_and_off() -> None:
    assert make_policy("always-on", MRR).decide(obs(knob=0)).max_bs == MRR
    assert make_policy("always-off", MRR).decide(obs(knob=MRR)).max_bs == 0
    assert make_policy("always-off", MRR).decide(obs(knob=0)).max_bs is None


def test_sglang_default_ceiling_follows_cuda_graph_padding() -> None:
    # spec-decoding CUDA-graph sizes ... 56, 60, 64: 61..64 pad to 64 -> band 64 -> 0 steps
    assert sglang_default_ceiling(64) == 60
    assert sglang_default_ceiling(48) == 48  # never reaches band 64
    assert sglang_default_ceiling(200) == 60


def test_sglang_default_drops_to_band_one_when_acceptance_is_poor() -> None:
    policy = make_policy("sglang-default", MRR)
    assert policy.decide(obs(knob=MRR, running=10, accept=2.5)).max_bs == 60
    decision = Decision(None, "")
    for i in range(40):  # drafts accepted ~0.2 per step: the bands' EMA falls under 0.5
        decision = policy.decide(obs(ts=5.0 * i, knob=60, running=10, accept=1.2))
        if decision.max_bs is not None:
            break
    assert decision.max_bs == 7, decision


# --- the learning policy: tests/test_control_policy_learn.py (counters streams) and tests/test_harness.py
# (every shipped profile x built-in trace).
