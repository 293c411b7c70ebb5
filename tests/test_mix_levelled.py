"""control/mix_levelled.py: a gated bin's explored drafted tokens at ``slots x H``, H the harmonic mean accept
of the window's exploring parts' requests; and ``rates()`` carrying the ``slots`` and ``mix`` blocks' deltas
(plugin 0.4.15) that it reads them from."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from spectower.control import kept_extend, mix_levelled, prefilled, speedup
from spectower.control.mix_levelled import FACTOR_BAND, MIN_MIX_REQUESTS, mix_levelled_intervals, window_mix
from spectower.control.policy import learn_counters
from spectower.plugin import engine_counters as ec

from tests.test_engine_counters import counters
from tests.test_part_mix import Req

BINS = [16, 32, 48]
CEILING = 24  # drafts 16, gates 32 and 48
MASK = learn_counters.drafted_by(BINS, CEILING)
Cells = Mapping[int, tuple[float, float, float]]  # bin -> (steps, tokens, time_s)
# Half the requests accepting 4 a verify, half 2: A 3.0, H 24 / 9 = 2.667 (12 at 4 and 12 at 2 over 3 parts)
MIX_48 = (2, 16, 48.0, 6.0)  # 2 parts, 8 at 4 and 8 at 2
MIX_32 = (1, 8, 24.0, 3.0)  # 1 part, 4 at 4 and 4 at 2
H = 24 / 9


def _fields(cells: Cells) -> dict[str, list[float]]:
    return {field: [cells.get(b, (0, 0, 0))[k] for b in BINS] for k, field in enumerate(ec.FIELDS)}


def interval(drafted: Cells, gated: Cells, slots: Mapping[int, float] | None = None,
             mix: Mapping[int, tuple[float, ...]] | None = None,
             held: Cells | None = None) -> dict[str, Any]:  # fmt: skip
    """An interval as ``rates()`` gives it: each mode's cells, and where given the drafted ``slots``, the
    ``mix`` block (bin -> MIX_FIELDS' sums) and the drafted ``prefilled`` steps (``held``)."""
    out: dict[str, Any] = {"bins": list(BINS), "restarted": False, "drafted": ec.with_rates(_fields(drafted)),
                           "gated": ec.with_rates(_fields(gated))}  # fmt: skip
    if slots is not None:
        out["slots"] = {"drafted": [float(slots.get(b, 0)) for b in BINS], "gated": [0.0] * len(BINS)}
    if mix is not None:
        out["mix"] = mix_lists(mix)
    if held is not None:
        out["prefilled"] = {"drafted": _fields(held), "gated": _fields({})}
    return out


def mix_lists(mix: Mapping[int, tuple[float, ...]]) -> dict[str, list[float]]:
    """A ``mix`` block from bin -> MIX_FIELDS' sums."""
    return {field: [float(mix.get(b, (0, 0, 0, 0))[k]) for b in BINS]
            for k, field in enumerate(ec.MIX_FIELDS)}  # fmt: skip


def window() -> list[dict[str, Any]]:
    """Two intervals under a ceiling of 24: bin 16 drafted steadily, 48 (and in the second 32) gated with
    explored drafting (40 requests a step at 2.9 tokens each, where H is 2.667), the parts' mix in 48 and
    32."""
    gated = {32: (300, 9600, 2.4), 48: (500, 20000, 5)}
    held = {16: (20, 800, 0.3), 48: (10, 1160, 0.2)}
    first = interval({16: (200, 8000, 2.0), 48: (100, 11600, 1.5)}, gated, slots={16: 3200, 48: 4000},
                     mix={48: MIX_48}, held=held)  # fmt: skip
    second = interval({16: (200, 8000, 2.0), 32: (50, 4500, 0.6), 48: (100, 11600, 1.5)}, gated,
                      slots={16: 3200, 32: 1600, 48: 4000}, mix={32: MIX_32}, held=held)  # fmt: skip
    return [first, second]


def drafted_tokens(intervals: list[dict[str, Any]], b: int) -> list[float]:
    return [x["drafted"]["tokens"][BINS.index(b)] for x in intervals]


def test_the_explored_drafted_cells_tokens_are_levelled_to_slots_times_the_windows_harmonic_mean() -> None:
    """H pooled over every interval and bin (the mix in 48 and in 32): 2.667 where A is 3.0. Bin 48's
    explored drafted tokens go from 11600 to 4000 x H (factor 0.920), its drafted rate with them and its
    prefilled drafted tokens by the same factor; bin 32's (the second interval) to 1600 x H (0.948)."""
    intervals = window()
    mix = window_mix(intervals)
    assert mix is not None
    assert mix[:4] == (pytest.approx(3.0), pytest.approx(H), 3, 24)
    # both intervals' parts read the same H: no draw, so any lean stands apart from it
    assert (mix.harmonic_rel_var, mix.intervals) == (pytest.approx(0.0), 2)
    out = mix_levelled_intervals(intervals, [MASK, MASK])
    assert drafted_tokens(out, 48) == pytest.approx([4000 * H] * 2)
    assert drafted_tokens(out, 32) == pytest.approx([0, 1600 * H])
    i = BINS.index(48)
    factor = 4000 * H / 11600
    assert out[0]["drafted"]["tok_s"][i] == pytest.approx(4000 * H / 1.5)
    assert out[0]["prefilled"]["drafted"]["tokens"][i] == pytest.approx(1160 * factor)
    assert out[0]["drafted"]["time_s"] == intervals[0]["drafted"]["time_s"]
    assert all("mix" not in x for x in out)  # levelling twice changes nothing
    assert mix_levelled_intervals(out, [MASK, MASK]) == out


def test_steady_drafted_cells_and_every_gated_cell_stay_as_measured() -> None:
    intervals = window()
    out = mix_levelled_intervals(intervals, [MASK, MASK])
    for before, after in zip(intervals, out, strict=True):
        assert after["gated"] == before["gated"]
        assert after["prefilled"]["gated"] == before["prefilled"]["gated"]
        assert drafted_tokens([after], 16) == drafted_tokens([before], 16)
    # every bin drafted by its ceiling: nothing explored, nothing levelled
    drafting = mix_levelled_intervals(intervals, [[True] * 3] * 2)
    assert [{k: v for k, v in x.items() if k != "mix"} for x in intervals] == drafting


@pytest.mark.parametrize(
    "mixes",
    [
        ({48: (2, 10, 30.0, 3.75)}, {32: (1, 5, 15.0, 1.875)}),  # 3 parts, 15 requests: too few
        ({48: (1, 40, 120.0, 15.0)}, None),  # 40 requests from one part
        (None, None),  # no mix block (a plugin before 0.4.15)
    ],
)
def test_a_window_with_too_few_requests_or_one_part_comes_back_unchanged(mixes: tuple[Any, Any]) -> None:
    intervals = window()
    for x, mix in zip(intervals, mixes, strict=True):
        x.pop("mix", None)
        if mix is not None:
            x["mix"] = mix_lists(mix)
    assert mix_levelled.levelling_mix(intervals) is None
    assert mix_levelled_intervals(intervals, [MASK, MASK]) == intervals
    assert MIN_MIX_REQUESTS == 16


def test_the_factor_is_held_within_the_band() -> None:
    """A cell whose tokens read far from slots x H (a bad row) moves by the band's edge at most: 2000 tokens
    over 4000 slots to 2500 (1.25), 20000 to 16000 (0.8)."""
    intervals = window()
    i = BINS.index(48)
    for x, tokens in zip(intervals, (2000, 20000), strict=True):
        x["drafted"] = ec.with_rates({**x["drafted"], "tokens": [*x["drafted"]["tokens"][:i], tokens]})
    out = mix_levelled_intervals(intervals, [MASK, MASK])
    assert drafted_tokens(out, 48) == pytest.approx([2000 * FACTOR_BAND[1], 20000 * FACTOR_BAND[0]])


def test_the_input_is_never_changed_and_an_interval_without_the_blocks_comes_back_as_it_was() -> None:
    """A window with an older plugin's interval beside (or a cell with no slots): those read as measured."""
    intervals = window()
    older = interval({48: (100, 11600, 1.5)}, {48: (500, 20000, 5)})
    no_slots = interval({48: (100, 11600, 1.5)}, {48: (500, 20000, 5)}, slots={16: 100})
    intervals += [older, no_slots]
    kept = copy.deepcopy(intervals)
    out = mix_levelled_intervals(intervals, [MASK] * 4)
    assert intervals == kept
    assert out[2] == older and out[3] == {k: v for k, v in no_slots.items() if k != "mix"}
    assert drafted_tokens(out, 48)[:2] == pytest.approx([4000 * H] * 2)
    with pytest.raises(ValueError, match="one per interval"):
        mix_levelled_intervals(intervals, [MASK])


def test_as_choices_levels_by_the_mix_first_then_for_the_prefills_of_the_levelled_tokens() -> None:
    """Learn's drafting side of gated bin 48: its tokens at slots x H, its seconds the pure steps' plus the
    drafting mode's steady prefill seconds per token (from bin 16) for those levelled tokens."""
    intervals = window()
    chosen = learn_counters.as_choices(intervals, [MASK, MASK], 1.0)
    i = BINS.index(48)
    pure_16 = (2.0 - 0.3) / 180
    per_token = 2 * (0.3 - 20 * pure_16) / (2 * 8000)  # the steady drafted cell's prefill seconds per token
    pure_48 = (1.5 - 0.2) / 90
    for x in chosen:
        assert x["drafted"]["tokens"][i] == pytest.approx(4000 * H)
        assert x["drafted"]["time_s"][i] == pytest.approx(1.3 + 10 * pure_48 + per_token * 4000 * H, abs=1e-8)
    levelled = prefilled.levelled_intervals(mix_levelled_intervals(intervals, [MASK, MASK]), [MASK, MASK])
    assert [x["drafted"]["time_s"] for x in chosen] == [x["drafted"]["time_s"] for x in levelled]


@given(
    cells=st.lists(st.tuples(st.integers(1, 64), st.floats(1.0, 6.0)), min_size=1, max_size=6),
    accepts=st.lists(st.floats(1.0, 6.0), min_size=MIN_MIX_REQUESTS, max_size=64),
)
def test_levelled_tokens_are_slots_times_h_within_the_band(cells: list[tuple[int, float]],
                                                            accepts: list[float]) -> None:  # fmt: skip
    """For every explored drafted cell (one per interval, in 48: ``slots`` requests a step for 10 steps at
    ``per_request`` tokens each), the levelled tokens are slots x H held within the band of its own."""
    half = len(accepts) // 2
    parts = [accepts[:half], accepts[half:]]
    intervals = []
    for k, (batch, per_request) in enumerate(cells):
        part = parts[k] if k < 2 else []
        mix = {48: (1, len(part), sum(part), sum(1 / a for a in part))} if part else None
        intervals.append(interval({48: (10, 10 * batch * per_request, 0.1)}, {48: (50, 50 * batch, 0.4)},
                                  slots={48: 10 * batch}, mix=mix))  # fmt: skip
    if len(cells) == 1:  # one interval: both parts in it
        intervals[0]["mix"] = mix_lists({48: (2, len(accepts), sum(accepts), sum(1 / a for a in accepts))})
    harmonic = len(accepts) / sum(1 / a for a in accepts)
    window = window_mix(intervals)
    assert window is not None and window.harmonic == pytest.approx(harmonic)
    out = mix_levelled_intervals(intervals, [MASK] * len(intervals))
    for before, after in zip(intervals, out, strict=True):
        tokens, slots = before["drafted"]["tokens"][2], before["slots"]["drafted"][2]
        low, high = FACTOR_BAND
        levelled = min(max(slots * harmonic, low * tokens), high * tokens)
        # levelled where H stands apart from the cell's own accept beyond H's draw, else as measured
        expected = levelled if mix_levelled.tells_apart(window, slots * harmonic / tokens) else tokens
        assert after["drafted"]["tokens"][2] == pytest.approx(expected)


def test_rates_carries_the_slots_and_mix_blocks_deltas_and_none_when_absent() -> None:
    """Per mode the slots' deltas, per field the mix's, as the other blocks are carried: from zero with no
    earlier snapshot or after a restart, on the later snapshot's bins where they grew; an older plugin's
    snapshot (no blocks) gives none."""
    c, _ = counters(8)
    c.record(8, True, 24, 0.01)
    first = c.snapshot()
    c.record(8, True, 30, 0.01)
    c.record(5, False, 5, 0.01)  # 5 requests, in bin 6
    reqs = [Req(4.0) for _ in range(6)] + [Req(2.0) for _ in range(2)]
    c.part_mix.batch(True, True, 8, lambda: reqs)
    for req in reqs:
        req.verify()
    c.part_mix.batch(False, False, 8, lambda: reqs)
    second = c.snapshot()
    delta = ec.rates(first, second)
    i, j = second["bins"].index(8), second["bins"].index(6)
    assert delta["slots"]["drafted"][i] == 8 and sum(delta["slots"]["drafted"]) == 8
    assert delta["slots"]["gated"][j] == 5 and sum(delta["slots"]["gated"]) == 5
    assert delta["mix"]["parts"][i] == 1 and delta["mix"]["requests"][i] == 8
    assert delta["mix"]["accept_sum"][i] == pytest.approx(28)
    assert delta["mix"]["inverse_sum"][i] == pytest.approx(2.5)
    assert set(delta["mix"]) == set(ec.MIX_FIELDS) and sum(delta["mix"]["parts"]) == 1
    assert ec.rates(None, second)["slots"]["drafted"][i] == 16
    # an older plugin's snapshot: no blocks, no deltas of them
    older = {key: value for key, value in second.items() if key not in ("slots", "mix")}
    assert "slots" not in ec.rates(first, older) and "mix" not in ec.rates(None, older)
    # the bins grew: the later snapshot's bins, the earlier one's padded with zeros
    c.record(16, True, 40, 0.01)
    grown = c.snapshot()
    later = ec.rates(second, grown)
    n = len(grown["bins"])
    assert later["bins"] == grown["bins"] and n > len(second["bins"])
    assert later["slots"]["drafted"] == [0.0] * (n - 1) + [16.0] and later["mix"]["parts"] == [0.0] * n
    # a restart: the later snapshot's blocks count from zero
    fresh, _ = counters(8)
    fresh.record(2, True, 4, 0.01)
    fresh.part_mix.sums = {2: [1, 2, 5.0, 0.75]}
    restarted = ec.rates(grown, {**fresh.snapshot(), "started_at": 9999.0})
    assert restarted["restarted"] and restarted["slots"]["drafted"] == [0, 2, 0, 0, 0, 0]
    assert restarted["mix"]["requests"] == [0, 2, 0, 0, 0, 0]


def test_the_samples_are_levelled_as_the_intervals_are_where_a_bins_explored_mode_is_known_per_bin() -> None:
    """What the console and ``control get`` read (``speedup.per_bin``, each bin's explored mode from the bin,
    not from a ceiling per interval): ``levelled_samples`` gives the grouping and the prefilled samples of
    ``mix_levelled_intervals``' intervals, sample for sample, with an older plugin's interval beside (its
    samples' slots unknown: as measured)."""
    intervals = [*window(), interval({48: (100, 11600, 1.5)}, {48: (500, 20000, 5)})]
    masks = [MASK] * len(intervals)
    explored = {32: "drafted", 48: "drafted", 16: "gated"}  # 24 gates 32 and 48, drafts 16
    given = (speedup.per_bin(intervals), prefilled.prefilled_samples(intervals))
    kept = copy.deepcopy(given)
    grouped, held = mix_levelled.levelled_samples(*given, mix_levelled.slot_samples(intervals),
                                                  window_mix(intervals), explored)  # fmt: skip
    assert given == kept  # the inputs are never changed
    levelled = mix_levelled_intervals(intervals, masks)
    assert grouped == speedup.per_bin(levelled)
    assert held == prefilled.prefilled_samples(levelled)  # the third's samples: None (no block)
    assert [tokens for tokens, _, _ in grouped[48]["drafted"]] == pytest.approx([4000 * H, 4000 * H, 11600])
    assert grouped[16] == speedup.per_bin(intervals)[16]  # the steady drafted bin as measured


def test_the_samples_stay_as_measured_without_slots_or_with_too_few_parts() -> None:
    intervals = window()
    grouped, prefilled_held = speedup.per_bin(intervals), prefilled.prefilled_samples(intervals)
    explored = {32: "drafted", 48: "drafted"}
    one_part = mix_levelled.WindowMix(3.0, H, 1, 40)
    for slots, mix in ((None, window_mix(intervals)), (mix_levelled.slot_samples(intervals), one_part),
                       (mix_levelled.slot_samples(intervals), None)):  # fmt: skip
        out, held = mix_levelled.levelled_samples(grouped, prefilled_held, slots, mix, explored)
        assert out == grouped and held == prefilled_held
    assert mix_levelled.slot_samples([interval({48: (1, 2, 0.1)}, {})]) is None  # an older plugin's window


def test_the_console_estimate_levels_a_gated_bins_explored_drafting_for_the_mix_before_the_prefills() -> None:
    """``kept_extend.corrected_estimate`` with the samples' slots and the window's mix: bin 48 (mostly gated)
    reads its drafted rate at slots x H, the same rate ``as_choices`` gives learn where each interval's
    ceiling is known; without them the rate as measured."""
    intervals = window()
    grouped, held = speedup.per_bin(intervals), prefilled.prefilled_samples(intervals)
    slots, mix = mix_levelled.slot_samples(intervals), window_mix(intervals)
    levelled, _ = kept_extend.corrected_estimate(grouped, 2, 0.0, held, slots, mix)
    raw, _ = kept_extend.corrected_estimate(grouped, 2, 0.0, held)
    chosen = learn_counters.as_choices(intervals, [MASK, MASK], 1.0)
    i = BINS.index(48)
    tokens, seconds = (sum(x["drafted"][field][i] for x in chosen) for field in ("tokens", "time_s"))
    learn_rate = tokens / seconds
    at_48 = {b.batch_size: b for b in levelled.bins}[48]
    assert at_48.drafted_tok_s == pytest.approx(learn_rate)
    assert {b.batch_size: b for b in raw.bins}[48].drafted_tok_s > at_48.drafted_tok_s * 1.05


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", ec.MIX_FIELDS)
def test_a_window_whose_stored_mix_sums_are_not_finite_levels_nothing(field: str, bad: float) -> None:
    """``window_of`` over the sums a database gives (``counter_samples``' ``mix_sums``): a NaN or infinite sum
    is a bad row, which must not swing a decision: no window, so the samples stay as measured."""
    sums = {"parts": 3.0, "requests": 24.0, "accept_sum": 72.0, "inverse_sum": 9.0}
    assert mix_levelled.window_of(sums) == mix_levelled.WindowMix(3.0, H, 3, 24)  # no intervals: no draw
    assert mix_levelled.window_of({**sums, field: bad}) is None


def _parts_window(kinds: list[tuple[int, int]], accept_per_request: float) -> list[dict[str, Any]]:
    """One interval per part in bin 48: the part's first batch ``(high, low)`` requests accepting 4 and 2 a
    verify, and the bin's explored drafted steps (ceiling 24) at 40 requests a step accepting
    ``accept_per_request`` tokens each."""
    out = []
    for high, low in kinds:
        part = (1, high + low, 4.0 * high + 2.0 * low, high / 4 + low / 2)
        out.append(interval({48: (100, 4000 * accept_per_request, 1.5)}, {48: (500, 20000, 5)},
                            slots={48: 4000}, mix={48: part}))  # fmt: skip
    return out


def test_a_gap_inside_the_draw_of_the_parts_first_batches_is_left_as_measured() -> None:
    """Three parts of 16 requests that drew 6, 10 and 4 of the high kind: H 2.526, each part's own 2.46,
    2.91 and 2.29. The cell's requests accepted 2.682 a verify (turned over to a drafting stream's mix): the
    6 % gap lies inside H's draw over three intervals, so the cell stays as measured (levelled by H it read
    0.942 of itself: an H100's 0.953 where raw read 1.022, data/gpu-runs/h100-8b-pair-triton-several-parts-
    2026-12-07)."""
    intervals = _parts_window([(6, 10), (10, 6), (4, 12)], 2.682)
    window = window_mix(intervals)
    assert window is not None and window.intervals == 3 and window.harmonic == pytest.approx(48 / 19)
    assert window.harmonic_rel_var is not None and window.harmonic_rel_var > 0
    assert not mix_levelled.tells_apart(window, window.harmonic / 2.682)
    out = mix_levelled_intervals(intervals, [MASK] * 3)
    assert drafted_tokens(out, 48) == drafted_tokens(intervals, 48)


def test_a_lean_beyond_the_draw_is_levelled() -> None:
    """Twelve parts of 16 requests, 9/7 and 7/9 of the kinds in turn (H 2.667, each part's within 4.5 % of
    it), and a cell whose requests accept 7.5 % over H (the simulator's short parts, before their batch
    turns over): the lean stands beyond H's draw, and the cell's tokens go to slots x H."""
    intervals = _parts_window([(9, 7), (7, 9)] * 6, 1.075 * H)
    window = window_mix(intervals)
    assert window is not None and window.intervals == 12 and window.harmonic == pytest.approx(H)
    assert mix_levelled.tells_apart(window, 1 / 1.075)
    out = mix_levelled_intervals(intervals, [MASK] * 12)
    assert drafted_tokens(out, 48) == pytest.approx([4000 * H] * 12)
