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


class Counter:
    """gc.get_freeze_count() as the plugin sees it: how many objects are frozen, and how often it was asked
    (CPython walks every frozen object to answer, ~100 ms for a scheduler's million)."""

    def __init__(self) -> None:
        self.frozen = 0
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.frozen


def test_the_frozen_count_is_read_while_nothing_is_frozen_and_once_after_each_freeze() -> None:
    counter = Counter()
    frozen = gc_pauses.FrozenCount(counter)
    assert [frozen.count() for _ in range(3)] == [0, 0, 0] and counter.reads == 3  # cheap while empty
    counter.frozen = 956_147  # SGLang's /freeze_gc, past any hook: the next read sees it
    assert [frozen.count() for _ in range(50)] == [956_147] * 50
    assert counter.reads == 4  # then never again: each read would walk the million
    counter.frozen = 1_200_000
    frozen.freeze_happened()  # a hooked freeze
    assert frozen.count() == 1_200_000 and frozen.count() == 1_200_000 and counter.reads == 5


def test_the_freeze_hooks_mark_a_freeze_whether_sglangs_call_is_sync_or_async(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    counter = Counter()
    monkeypatch.setattr(gc_pauses, "FROZEN", gc_pauses.FrozenCount(counter))
    counter.frozen = 10
    assert gc_pauses.GcPauses().report()["frozen"] == 10

    def handle_freeze_gc(scheduler: object, request: object) -> str:  # the scheduler's, synchronous
        counter.frozen = 20
        return "frozen"

    assert gc_pauses.hook_freeze(handle_freeze_gc, object(), object()) == "frozen"
    assert gc_pauses.GcPauses().report()["frozen"] == 20

    async def freeze_gc(manager: object) -> None:  # the launcher's TokenizerManager.freeze_gc
        counter.frozen = 30

    asyncio.run(gc_pauses.hook_freeze_async(freeze_gc, object()))
    assert gc_pauses.GcPauses().report()["frozen"] == 30

    def failing(scheduler: object) -> None:
        counter.frozen = 40
        raise RuntimeError("the detokenizer's socket is gone")

    with pytest.raises(RuntimeError):
        gc_pauses.hook_freeze(failing, object())
    assert gc_pauses.GcPauses().report()["frozen"] == 40  # it may have frozen before failing: counted again
