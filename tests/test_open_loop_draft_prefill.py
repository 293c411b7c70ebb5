"""The draft's prefill in the open loop (simulator/open_loop.py, plugin 0.4.10's rule
``knob_contract.prefill_skippable``): where the decode batches skip their extend, a prefill skips the draft's
pass too and runs faster by the profile's ``draft_prefill_share``; its requests decode holed, which adds no
drain a gated decode step would not have made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spectower.control.policy import make_policy
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import OpenLoopResult, simulate_open_loop
from spectower.simulator.profile import Profile, ProfileError, parse_profile
from spectower.storage.request_traces import Arrival

from tests.conftest import REPO_ROOT
from tests.test_open_loop_cost import BASE, PREFILL_TOK_S

SHARE = 0.04
SKIPPED_TOK_S = PREFILL_TOK_S / (1 - SHARE)


def _profile(**changes: Any) -> Profile:
    return parse_profile({**BASE, "draft_prefill_share": SHARE, **changes}, source="draft-prefill")


def _run(profile: Profile, arrivals: list[Arrival], policy: str, skip: bool = True,
         share: float = 0.0) -> OpenLoopResult:  # fmt: skip
    ceiling = 0 if policy == "always-off" else int(policy.split(":")[1]) if ":" in policy else None
    config = HarnessConfig(explore_share=share, initial_max_bs=ceiling, skip_draft_prefill=skip)
    return simulate_open_loop(profile, arrivals, make_policy(policy, profile.max_running_requests),
                              trace_name="t", config=config)  # fmt: skip


def _ttfts(result: OpenLoopResult) -> list[float]:
    return [o.ttft_s or 0.0 for o in result.outcomes]


# a long request decoding from the start, then 1000-token prompts every 0.5 s while it decodes (the decode
# step in flight adds half a 10-ms step to each first token)
BESIDE_A_DECODE = [Arrival(0.0, 100, 400, 1), *(Arrival(0.5 * i, 1000, 2, i + 1) for i in range(1, 4))]


def test_with_the_knob_at_zero_every_prompt_skips_the_drafts_pass() -> None:
    """At a ceiling of 0 every decode batch is gated, so every prompt skips the draft's pass (the first one
    too): it prefills at prefill_tok_s / (1 - share)."""
    ttfts = _ttfts(_run(_profile(), BESIDE_A_DECODE, "always-off"))
    assert ttfts[0] == pytest.approx(100 / SKIPPED_TOK_S, rel=1e-6)
    for ttft in ttfts[1:]:
        assert ttft == pytest.approx(1000 / SKIPPED_TOK_S + 0.005, rel=1e-3)


def test_kept_where_the_plugin_keeps_it() -> None:
    """The draft's pass runs for every prompt with the skip switched off (SPECTOWER_SKIP_DRAFT_PREFILL=0, an
    older plugin), with no share in the profile, and while the batch drafts (the ceiling above the load)."""
    cases = [(_profile(), "always-off", False), (_profile(draft_prefill_share=0), "always-off", True),
             (_profile(), "threshold:8", True)]  # fmt: skip
    for profile, policy, skip in cases:
        ttfts = _ttfts(_run(profile, BESIDE_A_DECODE, policy, skip))
        for ttft in ttfts[1:]:
            assert ttft == pytest.approx(1000 / PREFILL_TOK_S + 0.005, rel=1e-3), (policy, skip)


def test_a_skipped_prompt_drains_no_longer_than_its_first_gated_step_would_have_made_it() -> None:
    """Threshold:1 with two long requests decoding (gated): a third prompt skips the draft's pass and decodes
    holed. Had it run the draft's pass, its first gated step would have holed it all the same: once the two
    finish it drains alone either way, so its decode takes the same time; only its first token comes
    sooner."""
    arrivals = [Arrival(0.0, 100, 300, 1), Arrival(0.0, 100, 300, 2), Arrival(0.5, 1000, 400, 3)]
    skipped, kept = (_run(_profile(), arrivals, "threshold:1", skip).outcomes[2] for skip in (True, False))
    assert skipped.ttft_s is not None and kept.ttft_s is not None
    saved = 1000 / PREFILL_TOK_S - 1000 / SKIPPED_TOK_S
    assert skipped.ttft_s == pytest.approx(kept.ttft_s - saved, rel=1e-3)
    assert (skipped.e2e_s or 0) - skipped.ttft_s == pytest.approx((kept.e2e_s or 0) - kept.ttft_s, rel=1e-3)


def test_under_a_partial_ceiling_only_a_prompt_whose_next_batch_is_gated_skips() -> None:
    """Threshold:2, two requests decoding (drafting): one more prompt takes the next batch to 3, gated, so it
    skips the draft's pass; at threshold:4 the next batch drafts, so it keeps it."""
    arrivals = [Arrival(0.0, 100, 400, 1), Arrival(0.0, 100, 400, 2), Arrival(0.5, 1000, 2, 3)]
    gated = _run(_profile(), arrivals, "threshold:2").outcomes[2].ttft_s
    drafting = _run(_profile(), arrivals, "threshold:4").outcomes[2].ttft_s
    assert gated is not None and drafting is not None  # both beside the same drafting step in flight
    assert drafting - gated == pytest.approx(1000 / PREFILL_TOK_S - 1000 / SKIPPED_TOK_S, rel=1e-3)


def test_after_the_load_falls_a_lone_prompt_keeps_the_drafts_pass_and_drafts() -> None:
    """Threshold:1: two requests decode gated and finish; a prompt arriving after them finds nobody decoding
    beside it, so it keeps the draft's pass and drafts alone at once; had it skipped, it would have drained
    its whole life, gated."""
    arrivals = [Arrival(0.0, 100, 50, 1), Arrival(0.0, 100, 50, 2), Arrival(1.0, 1000, 101, 3)]
    late = _run(_profile(), arrivals, "threshold:1").outcomes[2]
    assert late.ttft_s is not None and late.e2e_s is not None
    assert late.ttft_s == pytest.approx(1000 / PREFILL_TOK_S, rel=1e-3)
    assert late.e2e_s - late.ttft_s == pytest.approx(100 / 200.0, rel=1e-2)  # spec_on at 1: 200 tok/s


def test_a_server_without_speculation_never_runs_the_drafts_pass() -> None:
    plain = _profile().without_speculation()
    assert plain.prefill_tok_s == pytest.approx(SKIPPED_TOK_S) and plain.draft_prefill_share == 0
    assert plain.to_json()["prefill_tok_s"] == pytest.approx(SKIPPED_TOK_S)
    assert "draft_prefill_share" not in plain.to_json()
    ttfts = _ttfts(_run(plain, BESIDE_A_DECODE, "always-off", skip=False))
    assert ttfts[0] == pytest.approx(100 / SKIPPED_TOK_S, rel=1e-6)


@pytest.mark.parametrize("bad", [-0.1, 0.6, "0.04", True, float("nan")])
def test_a_bad_share_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ProfileError, match="'draft_prefill_share' must be"):
        _profile(draft_prefill_share=bad)


def test_a_skipped_prefills_requests_decode_holed_and_are_counted() -> None:
    """The queue itself: a batch that skips the draft's pass holes its requests (a window's warm part and the
    drain wait for them, as for a skipped decode extend) and counts one skipped prefill; a kept one does
    not."""
    from spectower.simulator.open_loop_queue import Queue, Request

    queue = Queue(8, _profile())
    for i in range(3):
        queue.prefilling.append(Request(Arrival(0.0, 100, 10, i + 1), 100.0, 100))
    queue.prefill(0.0, 1.0, skip_draft=lambda n, t: n == 3)
    assert (queue.holed, queue.prefills_skipped, len(queue.decoding)) == (3, 1, 3)
    queue.prefilling.append(Request(Arrival(0.0, 100, 10, 4), 100.0, 100))
    queue.prefill(0.0, 1.0, skip_draft=lambda n, t: False)
    assert (queue.holed, queue.prefills_skipped, len(queue.decoding)) == (3, 1, 4)


def test_sim_evaluate_says_how_many_prefills_skipped_the_drafts_pass(tmp_path: Path) -> None:
    """A profile with a share: the table's footer counts the prefill batches that skipped the draft's pass,
    and ``--json`` carries both counts; a profile without one says nothing of it."""
    from tests.test_open_loop import _evaluate, _slice

    trace = str(_slice(tmp_path, 200))
    pair = str(REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton.json")
    run = _evaluate("--profile", pair, "--trace", trace, "--policy", "always-off")
    assert run.returncode == 0, run.stderr
    said = " ".join(run.stdout.split())
    assert "the draft's pass over the prompts skipped in" in said and "(draft_prefill_share 0.04)" in said
    as_json = _evaluate("--profile", pair, "--trace", trace, "--policy", "always-off", "--json")
    result = json.loads(as_json.stdout)
    # the knob starts where the launch put it (max) and goes to 0 at always off's first decision: from then
    # on every prefill skips
    assert 0.5 * result["prefill_batches"] < result["prefills_skipped"] < result["prefill_batches"]
    plain = _evaluate("--profile", "llama31-8b-1x-h100", "--trace", trace, "--policy", "always-off")
    assert plain.returncode == 0 and "draft's pass" not in plain.stdout
