"""The open loop's server model under production-like requests (simulator/open_loop.py,
simulator/open_loop_cost.py): prefill at the profile's rate from the request's arrival, decode steps that
pay for their requests' context, prompts cut to the server's context, and the gate's drain."""

from __future__ import annotations

from typing import Any

import pytest
from spectower.control.policy import make_policy
from spectower.plugin.explore import WINDOW_EXPLORE_MAX_S, ExploreWindows
from spectower.simulator.harness import HarnessConfig
from spectower.simulator.open_loop import OpenLoopResult, simulate_open_loop
from spectower.simulator.profile import Profile, ProfileError, parse_profile
from spectower.storage.request_traces import Arrival

from benchmarks.simulator_process import H100, curve_profile

PREFILL_TOK_S = 20000.0
# Drafting doubles a lone request's speed (10 ms a step either way, 2 tokens drafted) and loses past 4.
BASE = curve_profile(
    "ctx", [1, 2, 4, 8],
    {"spec_on": [200.0, 360.0, 400.0, 440.0], "spec_off": [100.0, 200.0, 400.0, 800.0]},
    max_running_requests=8, gpus=H100, prefill_tok_s=PREFILL_TOK_S,
    description="test profile: speculation pays at 1-2 running, loses from 4",
)  # fmt: skip
# What a step pays per context token over 200 a request: a drafted one ten times a gated one's.
CONTEXT_COST = {"gated_s_per_token": 1e-6, "drafted_s_per_token": 1e-5, "reference_tokens": 200}


def _profile(**changes: Any) -> Profile:
    return parse_profile({**BASE, **changes}, source="ctx")


def _run(profile: Profile, arrivals: list[Arrival], policy: str, share: float = 0.0,
         window_start: int = 0) -> OpenLoopResult:  # fmt: skip
    # the knob where the policy keeps it from the start (a server launched with it)
    ceiling = 0 if policy == "always-off" else int(policy.split(":")[1]) if ":" in policy else None
    config = HarnessConfig(explore_share=share, initial_max_bs=ceiling)
    return simulate_open_loop(profile, arrivals, make_policy(policy, profile.max_running_requests),
                              trace_name="t", config=config, window_start=window_start)  # fmt: skip


def test_a_server_below_capacity_answers_in_a_prefills_time_from_the_arrival_itself() -> None:
    # one request every 2 s, arriving between ticks: its first token comes a prefill after its arrival,
    # not after the next tick (a 50 ms tick would add 37 ms to a 50 ms prefill)
    arrivals = [Arrival(2.0 * i + 0.013, 1000, 5, i + 1) for i in range(5)]
    res = _run(_profile(), arrivals, "always-off")
    for out in res.outcomes:
        assert out.ttft_s == pytest.approx(1000 / PREFILL_TOK_S, rel=1e-6)


def test_a_prompts_prefill_grows_with_its_length_at_the_profiles_rate() -> None:
    lengths = [250, 1000, 4000]
    arrivals = [Arrival(5.0 * i, n, 2, i + 1) for i, n in enumerate(lengths)]
    ttfts = [o.ttft_s for o in _run(_profile(), arrivals, "always-off").outcomes]
    assert ttfts == pytest.approx([n / PREFILL_TOK_S for n in lengths], rel=1e-6)


def test_requests_waiting_together_prefill_in_one_batch_and_a_later_one_in_the_next() -> None:
    # two 1000-token prompts at once: one batch, both first tokens at its end; a third arriving while it
    # runs waits for it, then prefills alone; 6000 + 4000 tokens exceed a batch's 8192: two batches (one
    # output token each: no decode step to wait for)
    prof = _profile()
    arrivals = [Arrival(0.0, 1000, 1, 1), Arrival(0.0, 1000, 1, 2), Arrival(0.05, 1000, 1, 3)]
    first, second, third = (o.ttft_s for o in _run(prof, arrivals, "always-off").outcomes)
    assert first == second == pytest.approx(2000 / PREFILL_TOK_S, rel=1e-6)
    assert third == pytest.approx(3000 / PREFILL_TOK_S - 0.05, rel=1e-6)
    big = [Arrival(0.0, 6000, 1, 1), Arrival(0.0, 4000, 1, 2)]
    a, b = (o.ttft_s for o in _run(prof, big, "always-off").outcomes)
    assert a == pytest.approx(6000 / PREFILL_TOK_S) and b == pytest.approx(10000 / PREFILL_TOK_S)


def test_a_first_token_waits_for_the_decode_step_in_flight() -> None:
    # the second request arrives while the first decodes (10 ms steps): half a step on top of its prefill
    arrivals = [Arrival(0.0, 100, 200, 1), Arrival(0.5, 1000, 2, 2)]
    second = _run(_profile(), arrivals, "always-off").outcomes[1]
    assert second.ttft_s == pytest.approx(1000 / PREFILL_TOK_S + 0.005, rel=1e-3)


def test_time_outside_the_gpus_work_adds_to_every_answer_once() -> None:
    # 20 ms of HTTP and hand-offs per request: its TTFT and end-to-end latency carry it, its decode does not
    prof = _profile(first_token_latency_s=0.02)
    arrivals = [Arrival(2.0 * i + 0.013, 1000, 11, i + 1) for i in range(3)]
    base = _run(_profile(), arrivals, "always-off").outcomes
    for late, plain in zip(_run(prof, arrivals, "always-off").outcomes, base, strict=True):
        assert late.ttft_s == pytest.approx((plain.ttft_s or 0) + 0.02, rel=1e-6)
        assert late.e2e_s == pytest.approx((plain.e2e_s or 0) + 0.02, rel=1e-6)
    with pytest.raises(ProfileError, match="'first_token_latency_s' must be >= 0"):
        _profile(first_token_latency_s=-1)


def _decode_s(profile: Profile, prompt: int, policy: str) -> float:
    out = _run(profile, [Arrival(0.0, prompt, 101, 1)], policy).outcomes[0]
    assert out.e2e_s is not None and out.ttft_s is not None
    return out.e2e_s - out.ttft_s


def test_a_decode_step_pays_for_its_context_as_the_profile_says() -> None:
    priced, free = _profile(context_cost=CONTEXT_COST), _profile()
    # without a context cost the curves stand for every prompt: 100 gated steps of 10 ms
    assert _decode_s(free, 4000, "always-off") == pytest.approx(_decode_s(free, 100, "always-off")) \
        == pytest.approx(1.0, rel=1e-3)
    # within the reference context nothing changes (100 + 100 tokens at most); past it each step pays its
    # context over 200 tokens
    assert _decode_s(priced, 99, "always-off") == pytest.approx(1.0, rel=1e-6)
    long = _decode_s(priced, 4000, "always-off")
    over = sum(4000 + 1 + k - 200 for k in range(100))  # the context of each of the 100 steps, over 200
    assert long == pytest.approx(1.0 + over * 1e-6, rel=0.02)


def test_long_prompts_turn_a_lone_request_against_drafting_where_drafting_costs_more_per_token() -> None:
    priced = _profile(context_cost=CONTEXT_COST)
    # short prompts: drafting halves a lone request's decode, as the curves say
    assert _decode_s(priced, 200, "always-on") < 0.6 * _decode_s(priced, 200, "always-off")
    # 3000-token prompts: a drafted step pays 28 ms of context for its 2 tokens, a gated one 2.8 ms for 1:
    # drafting loses by half
    assert _decode_s(priced, 3000, "always-on") > 1.3 * _decode_s(priced, 3000, "always-off")


def test_a_prompt_over_the_servers_context_is_cut_to_it() -> None:
    # context 4096, 2 output tokens, EAGLE's 4 draft slots and bench replay's margin of 2: 4088 tokens
    prof = _profile(context_length=4096)
    out = _run(prof, [Arrival(0.0, 9000, 2, 1)], "always-off").outcomes[0]
    assert out.ttft_s == pytest.approx(4088 / PREFILL_TOK_S, rel=1e-6)
    assert _run(_profile(), [Arrival(0.0, 9000, 2, 1)], "always-off").outcomes[0].ttft_s == pytest.approx(
        9000 / PREFILL_TOK_S, rel=1e-6
    )


def test_requests_the_ceiling_gated_keep_the_batch_gated_until_they_finish() -> None:
    # ceiling 4, five requests: the gate closes and skips the draft's extend; once the two short ones are
    # done, three remain (the ceiling and its margin of 1 would draft them) but their draft KV has holes:
    # they drain, gated, to their end. A request arriving after them, alone and clean, drafts.
    arrivals = [*(Arrival(0.0, 100, 300, i) for i in (1, 2, 3)), *(Arrival(0.0, 100, 20, i) for i in (4, 5)),
                Arrival(10.0, 100, 100, 6)]  # fmt: skip
    res = _run(_profile(), arrivals, "threshold:4")
    c = res.counters
    drafted = dict(zip(c["bins"], c["drafted"]["steps"], strict=True))
    gated = dict(zip(c["bins"], c["gated"]["steps"], strict=True))
    assert gated[6] > 0 and drafted[6] == 0  # above the ceiling
    assert drafted[3] == 0 and gated[3] > 200  # the drain: three running, under the ceiling, all gated
    assert drafted[1] > 40 and gated[1] == 0  # the late request drafts
    late = res.outcomes[-1]
    assert late.e2e_s is not None and late.e2e_s < 0.6  # 99 tokens, 2 a step at 10 ms: half a second


def _steps(res: OpenLoopResult, mode: str) -> dict[int, int]:
    return dict(zip(res.counters["bins"], res.counters[mode]["steps"], strict=True))


def test_a_window_explores_in_a_stream_of_drafted_batches_above_the_ceiling() -> None:
    # six long requests above a ceiling of 2 with exploration on: the gated batches' window
    # (plugin/explore.py) explores nothing until its cold part is done, then, once the warm part has given up
    # on the holed requests (they outlive it), drafts a stream of batches in a row at 6 running, the first
    # half (the turnover) left out of the counters: at the quiet share (0.005, one batch in 200) 82 batches
    # of about 29 ms, 2.3 s, within the part's time cap
    windows = ExploreWindows()
    arrivals = [Arrival(0.0, 100, 3000, i) for i in range(1, 7)]
    fresh = _run(_profile(), arrivals, "threshold:2", share=0.02)
    assert _steps(fresh, "drafted")[6] == 0 and _steps(fresh, "gated")[6] > 2000
    start = windows.cycle - windows.explore_batches - 100
    late = _run(_profile(), arrivals, "threshold:2", share=0.005, window_start=start)
    counted = windows.explore_length(200) - windows.turnover(200)
    assert counted - 2 <= _steps(late, "drafted")[6] <= counted
    # at the default share (one in 50) the part would be 328 such batches, 9.4 s of drafting at 6 running:
    # it ends after WINDOW_EXPLORE_MAX_S of busy time instead, and counts its second half in time (plugin
    # 0.4.4: near capacity a long part left a queue of a hundred requests behind it)
    capped = _run(_profile(), arrivals, "threshold:2", share=0.02, window_start=start)
    drafted = capped.counters["drafted"]
    step_s = drafted["time_s"][4] / drafted["steps"][4]
    assert drafted["time_s"][4] == pytest.approx(WINDOW_EXPLORE_MAX_S / 2, abs=2 * step_s)
    assert drafted["steps"][4] < windows.explore_length(50) - windows.turnover(50)
    length = windows.explore_length(50)  # the default 2 % share: one batch in 50
    # the stream holds all six for its length: drafting at 6 costs them more than the gated steps would
    slow = [r.e2e_s or 0.0 for r in late.outcomes]
    assert min(slow) > max(r.e2e_s or 0.0 for r in fresh.outcomes)
    # twelve running are above the stream's limit under a ceiling of 2 (explore.stream_limit: 8): the
    # exploring part runs them gated with the extend, settling: nothing drafted, and its batches in no bin
    many = [Arrival(0.0, 100, 3000, i) for i in range(1, 13)]
    wide = _profile(max_running_requests=16)
    cold = _run(wide, many, "threshold:2", share=0.02)
    limited = _run(wide, many, "threshold:2", share=0.02,
                   window_start=windows.cycle - windows.explore_batches - 100)  # fmt: skip
    assert _steps(limited, "drafted")[12] == 0 and _steps(cold, "drafted")[12] == 0
    assert _steps(cold, "gated")[12] - _steps(limited, "gated")[12] >= length - 2


def test_prefill_seconds_land_in_the_decode_step_they_ran_beside() -> None:
    # one request decodes alone (10 ms gated steps) while others' 4000-token prompts prefill beside it: the
    # counters' time per step at its bin grows by the prefills' seconds, as the plugin counts it
    arrivals = [Arrival(0.0, 100, 500, 1), *(Arrival(1.0 + 0.5 * i, 4000, 1, i + 2) for i in range(4))]
    c = _run(_profile(), arrivals, "always-off").counters
    steps, seconds = c["gated"]["steps"][0], c["gated"]["time_s"][0]
    assert seconds == pytest.approx(steps * 0.01 + 4 * 4000 / PREFILL_TOK_S, rel=0.02)


def test_a_prefill_on_an_idle_server_lands_in_the_first_step_after_it() -> None:
    # the plugin's step runs from one result to the next: the first decode step after an idle server's
    # prefill was launched while the prefill ran, so its time holds the prefill
    arrivals = [Arrival(0.0, 4000, 101, 1)]
    c = _run(_profile(), arrivals, "always-off").counters
    assert c["gated"]["steps"][0] == 100
    assert c["gated"]["time_s"][0] == pytest.approx(100 * 0.01 + 4000 / PREFILL_TOK_S, rel=1e-3)


@pytest.mark.parametrize(
    ("cost", "field"),
    [
        ("fast", "'context_cost' must be an object"),
        ({"gated_s_per_token": -1, "drafted_s_per_token": 0, "reference_tokens": 0},
         "'context_cost.gated_s_per_token' must be >= 0"),
        ({"gated_s_per_token": 0, "reference_tokens": 0}, "missing key 'context_cost.drafted_s_per_token'"),
    ],
)  # fmt: skip
def test_a_bad_context_cost_is_one_line_naming_the_field(cost: Any, field: str) -> None:
    with pytest.raises(ProfileError, match=field):
        _profile(context_cost=cost)
    with pytest.raises(ProfileError, match="'context_length' must be an integer >= 2"):
        _profile(context_length=1)
