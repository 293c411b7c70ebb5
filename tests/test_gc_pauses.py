"""plugin/gc_pauses.py: the scheduler process's garbage collections timed through ``gc.callbacks``, the long
ones kept with their wall-clock time; an injected clock for the figures, the real collector for the
hook-up."""

from __future__ import annotations

import gc
import itertools
from typing import Any

import pytest
from spectower.plugin import gc_pauses

from tests.test_engine_counters import FakeClock as Clock


def test_only_collections_at_or_above_the_threshold_are_long_and_kept_with_their_time() -> None:
    clock = Clock()
    # durations a binary fraction can hold exactly, so "at the threshold" is exact
    pauses = gc_pauses.GcPauses(threshold_s=0.25, clock=clock, wall=lambda: 1_796_417_829.25)
    for generation, took in ((0, 0.125), (2, 1.0), (1, 0.25), (0, 0.0)):
        pauses.callback("start", {"generation": generation})
        clock.now += took
        pauses.callback("stop", {"generation": generation})
    report = pauses.report()
    assert report["collections"] == 4 and report["seconds"] == 1.375
    assert report["long"] == 2 and report["long_seconds"] == 1.25 and report["longest_s"] == 1.0
    assert report["recent_long"] == [{"at": 1_796_417_829.25, "generation": 2, "seconds": 1.0},
                                     {"at": 1_796_417_829.25, "generation": 1, "seconds": 0.25}]  # fmt: skip


def test_the_newest_long_ones_are_kept_and_odd_calls_never_raise() -> None:
    clock = Clock()
    pauses = gc_pauses.GcPauses(threshold_s=0.01, clock=clock)
    pauses.callback("stop", {"generation": 0})  # a stop without a start: nothing to time
    for i in range(gc_pauses.KEPT + 5):
        pauses.callback("start", {"generation": 2})
        clock.now += 0.02 + i / 1000
        pauses.callback("stop", {"generation": 2})
    report = pauses.report()
    assert report["collections"] == report["long"] == gc_pauses.KEPT + 5
    assert len(report["recent_long"]) == gc_pauses.KEPT
    assert report["recent_long"][-1]["seconds"] == pytest.approx(0.02 + (gc_pauses.KEPT + 4) / 1000)
    pauses.callback("start", {})
    bad: Any = None
    pauses.callback("stop", bad)  # no info: still counted, generation unknown
    assert pauses.report()["collections"] == gc_pauses.KEPT + 6


@pytest.mark.parametrize(("raw", "expected"), [(None, 0.05), ("0.2", 0.2), ("0", 0.05), ("-1", 0.05),
                                               ("nan", 0.05), ("inf", 0.05), ("lots", 0.05)])  # fmt: skip
def test_the_threshold_comes_from_the_environment_when_it_is_a_positive_number(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float
) -> None:
    if raw is None:
        monkeypatch.delenv(gc_pauses.THRESHOLD_ENV, raising=False)
    else:
        monkeypatch.setenv(gc_pauses.THRESHOLD_ENV, raw)
    assert gc_pauses.GcPauses.from_environment().threshold_s == expected


def test_installed_it_times_the_real_collectors_runs_once_and_uninstalls() -> None:
    pauses = gc_pauses.GcPauses(threshold_s=1e-9)
    gc_pauses.install(pauses)
    gc_pauses.install(pauses)  # a second install is a no-op: each collection counted once
    try:
        cycles = [[] for _ in range(10_000)]
        for a, b in itertools.pairwise(cycles):
            a.append(b)
            b.append(a)
        del cycles
        gc.collect(2)
    finally:
        gc_pauses.uninstall(pauses)
    report = pauses.report()
    assert report["collections"] >= 1 and report["seconds"] > 0
    assert 2 in [c["generation"] for c in report["recent_long"]]
    before = report["collections"]
    gc.collect()
    assert pauses.report()["collections"] == before and pauses.callback not in gc.callbacks
