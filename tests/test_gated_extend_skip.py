"""The draft-extend skip and drain (spectower.plugin.draft_holes.ExtendSkip), as pure logic: which
batches skip, how long a drain holds, and its cap. Inside SGLang: tests/test_sglang_gated_decode.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from spectower.plugin import draft_holes
from spectower.plugin.draft_holes import ExtendSkip

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
    """One prefill batch through the worker, none decoding beside it: whether the draft's extend over its
    prompts is skipped."""
    skip.prefill_worker, skip.running_beside_prefill = WORKER, 0
    try:
        if not skip.may_skip_prefill(len(rids)):
            return False
        skip.prefill_skipped([SimpleNamespace(rid=rid) for rid in rids])
        return True
    finally:
        skip.prefill_worker = None


def test_a_skipped_prefills_prompts_drain_before_drafting() -> None:
    asked: list[int] = []
    locked_off = {"value": True}

    def allowed(new_requests: int) -> bool:
        asked.append(new_requests)  # the knob plugin hears how many requests the prefill adds
        return locked_off["value"]

    skip = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100, prefill_allowed=allowed)
    skip.prefill_enabled = True
    assert _prefill(skip, ["a", "b"]) is True
    assert skip.holed == {"a", "b"} and skip.prefills_skipped == 1
    locked_off["value"] = False  # released, the knob up: the next prompt runs the draft's prefill
    assert _prefill(skip, ["c"]) is False
    assert skip.holed == {"a", "b"} and skip.report()["prefills_skipped"] == 1
    assert _batch(skip, ["a", "b", "c"], 3) == (0, False)  # the prompts the draft never saw drain first
    assert _batch(skip, ["c"], 3) == (3, False)
    assert asked == [2, 1]


def test_the_drafts_prefill_runs_when_switched_off_or_outside_a_prefill() -> None:
    skip = ExtendSkip(allowed=lambda: True, enabled=False, drain_max_steps=100,
                      prefill_allowed=lambda n: True)  # fmt: skip
    assert skip.prefill_enabled is False  # the extend skip's own switch turns this one off too
    assert _prefill(skip, ["a"]) is False and skip.holed == set()
    on = ExtendSkip(allowed=lambda: True, enabled=True, drain_max_steps=100, prefill_allowed=lambda n: True)
    on.prefill_enabled = True
    assert on.may_skip_prefill(1) is False  # no prefill batch running: nothing to skip


def _fresh_gate(monkeypatch: pytest.MonkeyPatch) -> Any:
    from spectower.plugin import knob_gate

    monkeypatch.setattr(knob_gate, "_STATE", None)
    return knob_gate._state().gate


def test_the_knob_plugin_allows_the_prefill_skip_under_a_lock_at_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spectower.plugin import knob_contract as kc
    from spectower.plugin import knob_gate

    gate = _fresh_gate(monkeypatch)
    gate.set_explore_share(0.02)
    gate.set_ceiling(0)
    assert knob_gate.prefill_skip_allowed(1) is False  # a policy's 0 exploring, no window yet: kept
    knob_gate._state().owner.lock_writer = kc.WRITER_MANUAL  # an operator's off
    assert knob_gate.prefill_skip_allowed(1) is True
    assert knob_gate.prefill_skip_allowed(None) is True  # at 0 any batch is gated: the size does not matter
    gate.set_ceiling(48)  # the operator's on: prompts go through the draft
    assert knob_gate.prefill_skip_allowed(1) is False


def test_under_a_policy_the_prefill_skips_where_its_next_decode_batch_will_be_gated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plugin 0.4.10, no exploration: a policy's 0 gates every batch, so every prefill skips; under a ceiling
    of 16 a prefill skips where the decode batch its requests join next (those running beside it and its
    own) will be gated, judged with the hysteresis (it reopens at 16 less the margin, 2), not where that
    batch drafts, nor where its size is not known."""
    from spectower.plugin import knob_gate

    gate = _fresh_gate(monkeypatch)
    gate.set_explore_share(0.0)
    gate.set_ceiling(0)
    assert knob_gate.prefill_skip_allowed(1) is True
    gate.set_ceiling(16)
    assert knob_gate.prefill_skip_allowed(20) is True  # 20 > 16: closes
    assert knob_gate.prefill_skip_allowed(16) is False  # drafts
    assert knob_gate.prefill_skip_allowed(None) is False  # not known
    gate.decide(40)  # the gate closes
    assert knob_gate.prefill_skip_allowed(15) is True  # 15 > 16 - 2: still closed (hysteresis)
    assert knob_gate.prefill_skip_allowed(14) is True  # 14 <= 16 - 2, but it holds closed for its dwell
    for _ in range(gate.min_dwell):
        gate.decide(14)
    assert knob_gate.prefill_skip_allowed(14) is False  # reopened


def test_a_policys_exploring_windows_keep_the_drafts_prefill_outside_their_cold_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a share, the gated batches run in windows (plugin/explore.py): the cold part skips the draft's
    prefill as it skips the extend; the warm part (holes draining) and the exploring part keep both."""
    from spectower.plugin import knob_gate
    from spectower.plugin.explore import COLD

    gate = _fresh_gate(monkeypatch)
    gate.set_explore_share(0.02)
    gate.set_ceiling(0)
    seen: dict[str, set[bool]] = {}
    for _ in range(3 * gate.explorer.windows.cycle):
        gate.decide(32, may_explore=True)
        phase = gate.explorer.phase_now
        assert phase is not None
        seen.setdefault(phase, set()).add(knob_gate.prefill_skip_allowed(33))
    assert seen.pop(COLD) == {True}
    assert seen and all(allowed == {False} for allowed in seen.values())


def _req(rid: str, finished: bool = False) -> SimpleNamespace:
    return SimpleNamespace(rid=rid, finished=lambda: finished)


def test_the_scheduler_hook_counts_who_decodes_beside_a_prefill() -> None:
    """Before a prefill runs, the requests of the running batch that go on decoding beside it: not finished,
    not in the prefill batch; nothing for a decode batch, an idle turn or an unreadable running batch."""
    from spectower.plugin import gated_decode as gd

    prefill_mode = SimpleNamespace(is_extend=lambda: True)
    decode_mode = SimpleNamespace(is_extend=lambda: False)
    new = [_req("n1"), _req("n2")]
    running = SimpleNamespace(reqs=[_req("a"), _req("b"), _req("done", finished=True), new[0]])
    plan = SimpleNamespace(batch_to_run=SimpleNamespace(forward_mode=prefill_mode, reqs=new),
                           running_batch=running)  # fmt: skip
    assert gd.running_beside(plan, None) == 2
    older = SimpleNamespace(forward_mode=prefill_mode, reqs=new)  # a version answering the batch itself
    assert gd.running_beside(older, SimpleNamespace(running_batch=running)) == 2
    assert gd.running_beside(SimpleNamespace(batch_to_run=None, running_batch=running), None) is None
    decode = SimpleNamespace(batch_to_run=SimpleNamespace(forward_mode=decode_mode, reqs=new),
                             running_batch=running)  # fmt: skip
    assert gd.running_beside(decode, None) is None
    assert gd.running_beside(SimpleNamespace(batch_to_run=older, running_batch=None), object()) is None


def test_the_prefill_asks_with_the_batch_its_requests_join_next_and_never_breaks_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spectower.plugin import gated_decode as gd

    asked: list[int | None] = []
    tracker = ExtendSkip(allowed=lambda: True, enabled=True,
                         prefill_allowed=lambda size: asked.append(size) is None)  # fmt: skip
    tracker.prefill_enabled = True
    monkeypatch.setattr(draft_holes, "_SKIP", tracker)
    prefill = SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: True), reqs=[_req("n")])
    plan = SimpleNamespace(batch_to_run=prefill, running_batch=SimpleNamespace(reqs=[_req("a"), _req("b")]))
    assert gd.hook_get_next_batch_to_run(lambda scheduler: plan, object()) is plan
    tracker.prefill_worker = WORKER
    assert tracker.may_skip_prefill(1) is True and asked == [3]

    def broken(scheduler: object) -> object:
        return SimpleNamespace(batch_to_run=SimpleNamespace(forward_mode="not a mode"), running_batch=None)

    gd.hook_get_next_batch_to_run(broken, object())  # its count fails: not known, nothing raised
    assert tracker.running_beside_prefill is None
    tracker.may_skip_prefill(1)
    assert asked == [3, None]


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

    tracker = ExtendSkip(allowed=lambda: True, enabled=True, prefill_allowed=lambda n: True)
    tracker.prefill_enabled = True
    tracker.prefill_worker = WORKER
    monkeypatch.setattr(draft_holes, "_SKIP", tracker)
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
