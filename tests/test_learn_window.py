"""control/policy/learn_window.py: learn's window read with each interval's part kept gives exactly what
``learn_counters.as_choices`` then ``speedup.per_bin`` give afresh, at every kept sample: while intervals age
out of the window, after ``load_state``, after a server restart, while the kept extend's tax moves and while
the bins the window knows by their ceiling change."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from spectower.control import speedup
from spectower.control.policy import make_policy
from spectower.control.policy.learn import LearnPolicy
from spectower.control.policy.learn_counters import as_choices, ceiling_masks, estimate_without_thin
from spectower.control.policy.learn_window import WindowChoices

from tests.test_control_policy_learn import BINS, FALLING, INTERVAL_S, MRR, CounterStream, observe


class Checked(WindowChoices):
    """``WindowChoices`` that checks each read against the reference computed afresh."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.reused = 0  # intervals whose drafting side a read took from the last one

    def read(
        self,
        window: list[dict[str, Any]],
        masks: list[list[bool]],
        scale: float,
        prefill_costs: Mapping[str, float] | None = None,
    ) -> tuple[list[dict[str, Any]], speedup.PerBin]:
        before = {key: entry.drafting for key, entry in self._kept.items()}
        choices, samples = super().read(window, masks, scale, prefill_costs)
        assert masks == ceiling_masks(window)
        expected = as_choices(window, masks, scale, prefill_costs)
        assert choices == expected
        assert samples == speedup.per_bin(expected)
        assert estimate_without_thin(choices, samples=samples) == estimate_without_thin(expected)
        # only the window's intervals are kept: one that left it is dropped at once
        assert set(self._kept) <= {id(interval) for interval in window}
        self.reads += 1
        kept = [self._kept[id(i)].drafting for i in window if id(i) in self._kept]
        self.reused += sum(any(d is b for b in before.values()) for d in kept)
        return choices, samples


def checked(policy: Any) -> Checked:
    assert isinstance(policy, LearnPolicy)
    policy._choices = Checked()
    return policy._choices


def test_the_kept_parts_read_as_the_window_afresh_while_it_slides_restores_and_restarts() -> None:
    """A short window (8 samples) so intervals age out often; speedups that move the crossover, so the knob
    moves and the bins known by their ceiling change; the extend block, so the measured tax moves; a restored
    state halfway; a server that restarts (its counters anew) later."""
    options = {"window_s": 120.0, "min_dwell_s": 30.0, "max_flips_per_hour": 60}
    policy = make_policy("learn", MRR, **options)
    check = checked(policy)
    stream = CounterStream(FALLING, noise=0.05, seed=3, extend=True)
    knob, t, moves = MRR, 0.0, 0
    restored = restarted = False
    while t < 1800:
        t += INTERVAL_S
        stream.speedups = {b: v + (0.3 if (t // 400) % 2 else -0.1) for b, v in FALLING.items()}
        counters = stream.advance(INTERVAL_S, knob)
        if t >= 1300:
            counters["started_at"] = 2.0
        decision = policy.decide(observe(t, knob, counters))
        moves += decision.max_bs is not None and decision.max_bs != knob
        knob = decision.max_bs if decision.max_bs is not None else knob
        if t >= 700 and not restored:  # a new process restores the state: its parts are built again
            state = json.loads(json.dumps(policy.state()))
            policy = make_policy("learn", MRR, **options)
            policy.load_state(state)
            fresh = checked(policy)
            fresh.reads, fresh.reused = check.reads, check.reused
            check, restored = fresh, True
        if t >= 1300 and not restarted:  # the server restarts: its counters count from 0 again
            stream = CounterStream(stream.speedups, noise=0.05, seed=4, extend=True)
            restarted = True
    assert check.reads >= 110 and moves >= 2, (check.reads, moves)
    # the window holds 8 intervals: most of each read's were kept from the one before
    assert check.reused > 5 * check.reads, (check.reused, check.reads)


def test_a_window_that_levels_is_read_afresh_and_keeps_nothing() -> None:
    """Intervals that carry the prefilled block level their explored cells by the whole window's: the read
    is ``as_choices`` itself, and no part is kept for the next."""
    stream = CounterStream(FALLING, noise=0.05, seed=5)
    snapshots = []
    for k in range(12):
        snap = stream.advance(INTERVAL_S * 3, MRR if k < 6 else 8)
        fields = ("steps", "tokens", "time_s")
        snap["prefilled"] = {mode: {field: [0.1 * v for v in snap[mode][field]] for field in fields}
                             for mode in ("drafted", "gated")}  # fmt: skip
        snapshots.append((15.0 * k, snap))
    policy = make_policy("learn", MRR)
    assert isinstance(policy, LearnPolicy)
    window = policy._with_ceilings(snapshots)
    reader = WindowChoices()
    reader._kept = {1: None}  # type: ignore[dict-item]  # anything kept before is dropped
    choices, samples = reader.read(window, ceiling_masks(window), 1.1)
    assert choices == as_choices(window, ceiling_masks(window), 1.1)
    assert samples == speedup.per_bin(choices) and reader._kept == {}


@pytest.mark.parametrize("scale", [1.0, 1.0 / (1.0 - 0.07)])
def test_a_part_kept_for_one_tax_is_not_read_for_another(scale: float) -> None:
    stream = CounterStream(FALLING, noise=0.05, seed=6, weights={b: 1.0 / len(BINS) for b in BINS})
    snapshots = [(15.0 * k, stream.advance(15.0, 16)) for k in range(6)]
    window = LearnPolicy._with_ceilings(snapshots)
    masks = ceiling_masks(window)
    reader = WindowChoices()
    reader.read(window, masks, 1.25)
    choices, samples = reader.read(window, masks, scale)
    assert choices == as_choices(window, masks, scale)
    assert samples == speedup.per_bin(choices)
