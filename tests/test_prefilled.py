"""control/prefilled.py: a mode's rate with the bin's prefill seconds per token in place of its own spans'."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectower.control import prefilled, speedup
from spectower.control.policy import learn_counters
from spectower.control.prefilled import ModeSteps, levelled_tok_s, prefill_s_per_token
from spectower.plugin.engine_counters import with_rates


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



def interval(bins: list[int], cells: dict[tuple[int, str], ModeSteps], with_block: bool = True) -> dict:
    """A counters interval (``rates()`` shape, outside folded) holding these cells."""
    out: dict = {"bins": bins}
    block: dict = {}
    for mode in ("drafted", "gated"):
        got = [cells.get((b, mode), ModeSteps(0, 0, 0.0)) for b in bins]
        out[mode] = with_rates({"steps": [c.steps for c in got], "tokens": [c.tokens for c in got],
                                "time_s": [c.time_s for c in got]})  # fmt: skip
        block[mode] = {"steps": [c.prefilled_steps for c in got], "tokens": [c.prefilled_tokens for c in got],
                       "time_s": [c.prefilled_time_s for c in got]}  # fmt: skip
    if with_block:
        out["prefilled"] = block
    return out


# The H100's streams (2026-12-06, data/gpu-runs/h100-8b-pair-triton-prefilled-2026-12-06), per step: a
# gated stream's prefilled steps hold 6.7 ms of prefill, a drafting stream's 10.2 ms (the draft prefills
# too); a request of 256 output tokens on average, so a prefill per 256 tokens in either stream.
GATED_PREFILL_S, DRAFTING_PREFILL_S, LENGTH = 0.0067, 0.0102, 256
BINS = [16, 32, 64]
CEILING_32 = [True, True, False]  # a ceiling of 32: bins 16 and 32 drafted, 64 gated


def window(n: int = 12) -> tuple[list[dict], list[list[bool]], float]:
    """``n`` intervals under a ceiling of 32: bin 32 a drafting stream whose explored gated steps carry its
    prefills, bin 64 a steady gated stream; and the steady gated stream's rate at 32 (the truth)."""
    gated_32 = stream(8000, 32, 0.0074, GATED_PREFILL_S, round(8000 * 32 / LENGTH))
    out = []
    for k in range(n):
        drafted = 750 + 10 * k
        explored = 25 + k % 3
        cells = {
            (32, "drafted"): stream(drafted, 83, 0.0143, DRAFTING_PREFILL_S, round(drafted * 83 / LENGTH)),
            # explored gated steps at a gated step's pure time, with the drafting stream's prefills
            (32, "gated"): stream(explored, 32, 0.0074, DRAFTING_PREFILL_S, round(explored * 83 / LENGTH)),
            (64, "gated"): stream(600 + k, 62, 0.0090, GATED_PREFILL_S, round((600 + k) * 62 / LENGTH)),
        }
        out.append(interval(BINS, cells))
    return out, [CEILING_32] * n, gated_32.tokens / gated_32.time_s


def bin_estimate(intervals: list[dict], b: int) -> speedup.BinEstimate:
    return next(e for e in speedup.estimate(intervals).bins if e.batch_size == b)


def test_a_drafting_bins_explored_gated_side_reads_the_steady_gated_rate_levelled() -> None:
    """Explored gated steps at 32 carry the drafting stream's prefills (2.6x as many per step, each with the
    draft's): raw they read well short of a gated stream's rate; levelled at the gated stream's steady
    prefill seconds per token (from bin 64, which the ceiling gates) they read it."""
    raw, masks, truth = window()
    before, after = bin_estimate(raw, 32), bin_estimate(prefilled.levelled_intervals(raw, masks), 32)
    assert before.gated_tok_s is not None and after.gated_tok_s is not None
    assert before.gated_tok_s / truth < 0.93
    assert after.gated_tok_s / truth == pytest.approx(1.0, abs=0.01)
    # steady cells stay as measured: the drafting side at 32, the gated stream at 64
    assert after.drafted_tok_s == pytest.approx(before.drafted_tok_s, rel=1e-9)
    assert bin_estimate(prefilled.levelled_intervals(raw, masks), 64).gated_tok_s == pytest.approx(
        bin_estimate(raw, 64).gated_tok_s, rel=1e-9)
    assert after.lo is not None and after.hi is not None  # the batch means are still there


def test_learn_reads_the_levelled_gated_side() -> None:
    """``as_choices`` (what learn and its warm start weigh) levels before it scales by the kept extend's
    tax: with no tax the drafting bin's gated side is the levelled one, and its drafting side what the bin
    served, its explored gated steps as measured."""
    raw, masks, truth = window()
    est = learn_counters.estimate_without_thin(learn_counters.as_choices(raw, masks, 1.0))[0]
    at_32 = next(e for e in est.bins if e.batch_size == 32)
    assert at_32.gated_tok_s is not None and at_32.gated_tok_s / truth == pytest.approx(1.0, abs=0.01)
    # drafting bin 32 served all it ran as measured: its gated steps with the prefills they carried
    i = BINS.index(32)
    tokens = sum(x[m]["tokens"][i] for x in raw for m in ("drafted", "gated"))
    seconds = sum(x[m]["time_s"][i] for x in raw for m in ("drafted", "gated"))
    assert at_32.drafted_tok_s == pytest.approx(tokens / seconds, rel=1e-9)


def test_without_a_steady_cell_of_the_mode_the_explored_cell_stays() -> None:
    """A ceiling at the top drafts every bin: no steady gated stream says what a gated stream's prefills
    cost, so the explored gated side is read as measured."""
    raw, _, _ = window()
    every = [[True, True, True]] * len(raw)
    levelled = prefilled.levelled_intervals(raw, every)
    assert [i["gated"]["time_s"] for i in levelled] == [i["gated"]["time_s"] for i in raw]


def test_levelling_twice_or_without_the_block_changes_nothing() -> None:
    raw, masks, _ = window()
    once = prefilled.levelled_intervals(raw, masks)
    assert all("prefilled" not in i for i in once)
    assert prefilled.levelled_intervals(once, masks) == once
    older = [{k: v for k, v in i.items() if k != "prefilled"} for i in raw]  # a plugin before 0.4.14
    assert prefilled.levelled_intervals(older, masks) == older
    with pytest.raises(ValueError, match="masks"):
        prefilled.levelled_intervals(raw, masks[:-1])


def test_too_few_explored_pure_steps_leave_the_cell_as_measured() -> None:
    thin = ModeSteps(steps=prefilled.MIN_PURE_STEPS, tokens=640, time_s=0.2, prefilled_steps=5,
                     prefilled_tokens=160, prefilled_time_s=0.09)  # fmt: skip
    raw = [interval(BINS, {(32, "drafted"): stream(500, 83, 0.0143, DRAFTING_PREFILL_S, 160),
                           (32, "gated"): thin,
                           (64, "gated"): stream(600, 62, 0.009, GATED_PREFILL_S, 145)})]  # fmt: skip
    assert prefilled.levelled_intervals(raw, [CEILING_32])[0]["gated"]["time_s"] == raw[0]["gated"]["time_s"]


@given(
    steps=st.lists(st.integers(50, 2000), min_size=2, max_size=8),
    tokens_per_step=st.floats(1, 200),
    step_s=st.floats(0.001, 0.05),
    prefill_s=st.floats(0.0, 0.02),
    share=st.floats(0.0, 0.5),
)
def test_steady_cells_keep_their_time(steps: list[int], tokens_per_step: float, step_s: float,
                                      prefill_s: float, share: float) -> None:  # fmt: skip
    raw = [interval([32], {(32, "gated"): stream(n, tokens_per_step, step_s, prefill_s, int(n * share))})
           for n in steps]  # fmt: skip
    levelled = prefilled.levelled_intervals(raw, [[False]] * len(raw))
    assert [i["gated"]["time_s"] for i in levelled] == [i["gated"]["time_s"] for i in raw]


def test_the_per_bin_samples_level_as_the_intervals_do_and_unknown_samples_stay() -> None:
    """``levelled_samples`` (the console's grouping, the explored mode known per bin) gives the explored
    cell the levelled times ``levelled_intervals`` gives it; a sample whose prefilled steps are unknown (an
    interval before the plugin's upgrade), a bin with no explored mode, and a window without the block stay
    as they are."""
    raw, masks, _ = window()
    grouped = speedup.per_bin(raw)
    held = prefilled.prefilled_samples(raw)
    assert held is not None
    explored = {16: "gated", 32: "gated", 64: "drafted"}  # bins 16 and 32 drafted, 64 gated
    levelled = prefilled.levelled_samples(grouped, held, explored)
    want = speedup.per_bin(prefilled.levelled_intervals(raw, masks))
    assert levelled[32]["gated"] == pytest.approx(want[32]["gated"], rel=1e-12)
    assert levelled[32]["drafted"] == grouped[32]["drafted"] and levelled[64] == grouped[64]
    assert levelled[32]["gated"] != grouped[32]["gated"]
    held[32]["gated"][0] = None  # not known: that sample stays
    again = prefilled.levelled_samples(grouped, held, explored)
    assert again[32]["gated"][0] == grouped[32]["gated"][0]
    assert again[32]["gated"][1:] != grouped[32]["gated"][1:]
    assert prefilled.levelled_samples(grouped, held, {64: "drafted"})[32] == grouped[32]  # 32 not explored
    assert prefilled.levelled_samples(grouped, None, explored) == grouped
    older = [{k: v for k, v in i.items() if k != "prefilled"} for i in raw]
    assert prefilled.prefilled_samples(older) is None


def plateau(n: int = 12) -> tuple[list[dict], list[list[bool]], float]:
    """``n`` intervals under a ceiling of 32 with the load held at 64: a steady gated stream there and its
    explored drafting, whose steps carry the gated stream's prefills (no draft prefill, fewer a step); no
    bin drafts steadily. And a steady drafting stream's rate at 64 (the truth)."""
    drafting_64 = stream(6000, 150, 0.0200, DRAFTING_PREFILL_S, round(6000 * 150 / LENGTH))
    out = []
    for k in range(n):
        explored = 30 + k % 4
        cells = {
            (64, "gated"): stream(2000 + k, 62, 0.0090, GATED_PREFILL_S, round((2000 + k) * 62 / LENGTH)),
            (64, "drafted"): stream(explored, 150, 0.0200, GATED_PREFILL_S, round(explored * 150 / LENGTH)),
        }
        out.append(interval(BINS, cells))
    return out, [CEILING_32] * n, drafting_64.tokens / drafting_64.time_s


def test_a_load_held_above_the_ceiling_levels_its_explored_drafting_at_the_cost_measured_before() -> None:
    """Under a plateau above the ceiling no bin drafts steadily, so the window alone cannot say what a
    drafting stream's prefills cost, and the explored drafting (carrying a gated stream's cheaper prefills)
    reads high. With the cost the server's steady drafting measured before (``steady_costs`` of an earlier
    window), it reads a drafting stream's rate, as learn reads it. On an H100 (2026-12-07) such a cell read
    1.066 of always on raw, 1.036 at always on's cost."""
    earlier, earlier_masks, _ = window()
    costs = prefilled.steady_costs(earlier, earlier_masks)
    assert costs["drafted"] == pytest.approx(DRAFTING_PREFILL_S / LENGTH, rel=0.02)
    assert costs["gated"] == pytest.approx(GATED_PREFILL_S / LENGTH, rel=0.02)
    raw, masks, truth = plateau()
    assert "drafted" not in prefilled.steady_costs(raw, masks)  # no steady drafting in this window
    alone = bin_estimate(prefilled.levelled_intervals(raw, masks), 64)
    known = bin_estimate(prefilled.levelled_intervals(raw, masks, costs), 64)
    assert alone.drafted_tok_s is not None and known.drafted_tok_s is not None
    assert alone.drafted_tok_s == pytest.approx(bin_estimate(raw, 64).drafted_tok_s, rel=1e-9)
    assert alone.drafted_tok_s / truth > 1.005
    assert known.drafted_tok_s / truth == pytest.approx(1.0, abs=0.003)
    # a window's own steady cells win over what was measured before: the gated side keeps its own cost
    wrong = {"drafted": costs["drafted"], "gated": 10 * costs["gated"]}
    gated_known = bin_estimate(prefilled.levelled_intervals(raw, masks, wrong), 64).gated_tok_s
    assert gated_known == pytest.approx(known.gated_tok_s, rel=1e-9)
    # learn weighs the same: its choices with the costs it kept read the drafting stream's rate there
    chosen = learn_counters.estimate_without_thin(learn_counters.as_choices(raw, masks, 1.0, costs))[0]
    at_64 = next(e for e in chosen.bins if e.batch_size == 64)
    assert at_64.drafted_tok_s is not None and at_64.drafted_tok_s / truth == pytest.approx(1.0, abs=0.003)


def test_learn_keeps_the_last_cost_its_window_measured_for_a_window_without_it() -> None:
    """Learn levels with its window's own steady costs and keeps them: once the load holds above its ceiling
    and the window has no drafting bin left, the explored drafting is levelled at the cost measured before,
    where it read the gated stream's cheaper prefills as drafting's."""
    from spectower.control.policy.learn import LearnPolicy
    from spectower.control.policy.learn_counters import CEILING_KEY

    earlier, _, _ = window()
    raw, _, truth = plateau()
    policy = LearnPolicy(max_running_requests=64)
    # the window's intervals as learn keeps them, each with the ceiling it ran under (here 32 throughout)
    policy._intervals = [{**i, CEILING_KEY: 32} for i in raw]
    fresh = bin_estimate(policy._corrected_now(), 64)
    policy._intervals = [{**i, CEILING_KEY: 32} for i in earlier]
    policy._corrected_now()
    policy._intervals = [{**i, CEILING_KEY: 32} for i in raw]
    remembered = bin_estimate(policy._corrected_now(), 64)
    assert fresh.drafted_tok_s is not None and remembered.drafted_tok_s is not None
    assert fresh.drafted_tok_s / truth > 1.005
    assert remembered.drafted_tok_s / truth == pytest.approx(1.0, abs=0.003)


def test_the_warm_start_hands_learn_the_costs_its_stored_counters_measured() -> None:
    """The server's own stored counters (the warm start's first source) say what each stream's prefills
    cost, and learn takes them: a learn started under a plateau above its ceiling levels its explored
    drafting at the drafting cost stored before it started, where its own window has none. A bad cost is
    refused naming the option."""
    from spectower.control import warm_start
    from spectower.control.policy import PolicyError
    from spectower.control.policy.learn import LearnPolicy
    from spectower.control.policy.learn_counters import CEILING_KEY

    earlier, _, _ = window()
    started = warm_start.from_counters(earlier, 64, ceilings=[32] * len(earlier), current=32)
    assert started is not None
    assert started.prefill_costs["drafted"] == pytest.approx(DRAFTING_PREFILL_S / LENGTH, rel=0.02)
    raw, _, truth = plateau()
    policy = LearnPolicy(max_running_requests=64, prefill_costs=started.prefill_costs)
    policy._intervals = [{**i, CEILING_KEY: 32} for i in raw]  # its window as it keeps it: the plateau only
    at_64 = bin_estimate(policy._corrected_now(), 64)
    assert at_64.drafted_tok_s is not None and at_64.drafted_tok_s / truth == pytest.approx(1.0, abs=0.003)
    for bad in ({"draft": 1e-5}, {"drafted": -1.0}, {"gated": float("nan")}):
        with pytest.raises(PolicyError, match="prefill_costs"):
            LearnPolicy(max_running_requests=64, prefill_costs=bad)
