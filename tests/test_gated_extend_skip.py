"""The draft-extend skip and drain (spectower.plugin.gated_decode.ExtendSkip), as pure logic: which
batches skip, how long a drain holds, and its cap. Inside SGLang: tests/test_sglang_gated_decode.py."""

from __future__ import annotations

from types import SimpleNamespace

from spectower.plugin.gated_decode import ExtendSkip

WORKER = object()


def _batch(skip: ExtendSkip, rids: list[str], wanted: int) -> tuple[int, bool]:
    """One decode batch: SGLang (and the gate) want ``wanted`` steps; returns (steps run, extend skipped)."""
    skip.begin_batch(WORKER, [SimpleNamespace(rid=rid) for rid in rids])
    steps = skip.steps_for(wanted)
    skip.mark(steps)
    skipped = skip.skip_now
    skip.end_batch()
    return steps, skipped


def test_only_the_knob_at_zero_skips() -> None:
    ceiling = {"value": 8}
    skip = ExtendSkip(allowed=lambda: ceiling["value"] == 0, enabled=True, drain_max_steps=100)
    assert _batch(skip, ["a", "b"], 0) == (0, False)  # gated above a partial ceiling: the draft stays warm
    ceiling["value"] = 0
    assert _batch(skip, ["a", "b"], 0) == (0, True)
    assert skip.holed == {"a", "b"}


def test_no_knob_plugin_means_sglangs_own_zero_step_band_skips() -> None:
    skip = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100)
    assert _batch(skip, ["a"], 0) == (0, True)


def test_switched_off() -> None:
    skip = ExtendSkip(allowed=lambda: True, enabled=False, drain_max_steps=100)
    assert _batch(skip, ["a"], 0) == (0, False)
    assert skip.holed == set()


def test_the_drain_holds_until_the_holed_requests_finish() -> None:
    ceiling = {"value": 0}
    skip = ExtendSkip(allowed=lambda: ceiling["value"] == 0, enabled=True, drain_max_steps=100)
    _batch(skip, ["a", "b"], 0)
    ceiling["value"] = 64
    assert _batch(skip, ["a", "b", "c"], 3) == (0, False)  # drain: 0 steps, the extend runs
    assert _batch(skip, ["b", "c"], 3) == (0, False)
    assert _batch(skip, ["c", "d"], 3) == (3, False)
    assert (skip.batches_drained, skip.drains_cut_short, skip.drain_steps) == (2, 0, 0)


def test_a_drain_is_cut_short_at_its_cap() -> None:
    ceiling = {"value": 0}
    skip = ExtendSkip(allowed=lambda: ceiling["value"] == 0, enabled=True, drain_max_steps=3)
    _batch(skip, ["long"], 0)
    ceiling["value"] = 64
    runs = [_batch(skip, ["long", "x"], 3)[0] for _ in range(5)]
    assert runs == [0, 0, 0, 3, 3]
    assert (skip.batches_drained, skip.drains_cut_short, skip.holed) == (3, 1, set())


def test_a_new_off_period_after_a_drain_starts_a_fresh_cap() -> None:
    ceiling = {"value": 0}
    skip = ExtendSkip(allowed=lambda: ceiling["value"] == 0, enabled=True, drain_max_steps=2)
    _batch(skip, ["a"], 0)
    ceiling["value"] = 64
    assert [_batch(skip, ["b"], 3)[0] for _ in range(2)] == [3, 3]  # "a" finished: nothing to drain
    ceiling["value"] = 0
    _batch(skip, ["b"], 0)
    ceiling["value"] = 64
    assert [_batch(skip, ["b"], 3)[0] for _ in range(3)] == [0, 0, 3]
