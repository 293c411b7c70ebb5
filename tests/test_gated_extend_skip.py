"""The draft-extend skip and drain (spectower.plugin.gated_decode.ExtendSkip), as pure logic: which
batches skip, how long a drain holds, and its cap. Inside SGLang: tests/test_sglang_gated_decode.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
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


def _prefill(skip: ExtendSkip, rids: list[str]) -> bool:
    """One prefill batch through the worker: whether the draft's extend over its prompts is skipped."""
    skip.prefill_worker = WORKER
    try:
        if not skip.may_skip_prefill():
            return False
        skip.prefill_skipped([SimpleNamespace(rid=rid) for rid in rids])
        return True
    finally:
        skip.prefill_worker = None


def test_only_a_locked_zero_skips_the_drafts_prefill_and_its_prompts_drain_before_drafting() -> None:
    locked_off = {"value": True}
    skip = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100,
                      prefill_allowed=lambda: locked_off["value"])  # fmt: skip
    skip.prefill_enabled = True
    assert _prefill(skip, ["a", "b"]) is True
    assert skip.holed == {"a", "b"} and skip.prefills_skipped == 1
    locked_off["value"] = False  # released, the knob up: the next prompt runs the draft's prefill
    assert _prefill(skip, ["c"]) is False
    assert skip.holed == {"a", "b"} and skip.report()["prefills_skipped"] == 1
    assert _batch(skip, ["a", "b", "c"], 3) == (0, False)  # the prompts the draft never saw drain first
    assert _batch(skip, ["c"], 3) == (3, False)


def test_the_drafts_prefill_runs_when_switched_off_or_outside_a_prefill() -> None:
    skip = ExtendSkip(allowed=lambda: True, enabled=False, drain_max_steps=100, prefill_allowed=lambda: True)
    assert skip.prefill_enabled is False  # the extend skip's own switch turns this one off too
    assert _prefill(skip, ["a"]) is False and skip.holed == set()
    on = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100, prefill_allowed=lambda: True)
    on.prefill_enabled = True
    assert on.may_skip_prefill() is False  # no prefill batch running: nothing to skip


def test_the_knob_plugin_allows_the_prefill_skip_under_a_lock_at_zero_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spectower.plugin import knob_contract as kc
    from spectower.plugin import knob_gate

    monkeypatch.setattr(knob_gate, "_STATE", None)
    state = knob_gate._state()
    state.gate.set_ceiling(0)
    assert knob_gate.prefill_skip_allowed() is False  # a policy's 0: its windows explore drafting
    state.owner.lock_writer = kc.WRITER_MANUAL  # an operator's off
    assert knob_gate.prefill_skip_allowed() is True
    state.gate.set_ceiling(48)  # the operator's on: prompts go through the draft
    assert knob_gate.prefill_skip_allowed() is False


def test_the_drafts_prefill_skip_has_its_own_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTOWER_SKIP_DRAFT_PREFILL", "0")
    assert ExtendSkip(enabled=True).prefill_enabled is False
    monkeypatch.delenv("SPECTOWER_SKIP_DRAFT_PREFILL")
    assert ExtendSkip(enabled=True).prefill_enabled is True


def test_a_prefill_skip_that_fails_runs_the_drafts_own_pass_and_never_raises_into_sglang(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the stub cannot be built (here: no SGLang in this interpreter, so its EagleDraftInput does not
    import), the hook runs SGLang's own draft prefill, logs why once, and stops trying."""
    from spectower.plugin import gated_decode as gd

    tracker = ExtendSkip(allowed=lambda: True, enabled=True, prefill_allowed=lambda: True)
    tracker.prefill_enabled = True
    tracker.prefill_worker = WORKER
    monkeypatch.setattr(gd, "_SKIP", tracker)
    ran: list[str] = []

    def original(draft_worker: object, batch: object, hidden: object, next_tokens: object) -> str:
        ran.append("draft prefill")
        return "its next draft input"

    batch = SimpleNamespace(reqs=[SimpleNamespace(rid="a")])
    answer = gd.hook_draft_extend_for_prefill(original, object(), batch, "hidden", "tokens")
    assert answer == "its next draft input"
    assert ran == ["draft prefill"] and tracker.prefill_enabled is False
    assert tracker.holed == set() and tracker.prefills_skipped == 0
    assert "cannot skip the draft's prefill" in caplog.text
