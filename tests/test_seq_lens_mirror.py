"""The seq-lens mirror (spectower.plugin.seq_lens_mirror.SeqLensMirror) as pure logic: what it remembers
after each kind of batch, when it answers, and how a difference turns it off. Inside SGLang, against its own
FutureMap: tests/test_sglang_seq_lens.py."""

from __future__ import annotations

import logging

import pytest
from spectower.plugin.seq_lens_mirror import DEFAULT_VERIFY_EVERY, SeqLensMirror


def test_a_gated_batch_grows_each_request_by_one_and_forgets_who_left() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    assert mirror.lengths_for(["a"]) is None  # nothing known yet: SGLang answers
    mirror.after_decode(["a", "b"], [5, 9], gated=True)
    assert mirror.lengths_for(["a", "b"]) == [6, 10]
    assert mirror.lengths_for(["b"]) == [10]
    assert mirror.lengths_for(["a", "c"]) is None  # one unknown request is enough to ask SGLang
    mirror.after_decode(["b"], [10], gated=True)  # a finished
    assert mirror.lengths_for(["a"]) is None and mirror.lengths_for(["b"]) == [11]


def test_a_prefill_is_known_until_its_request_decodes() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.after_decode(["a"], [5], gated=True)
    mirror.after_prefill(["c"], [7])  # SGLang publishes the prefilled length as the next start
    assert mirror.lengths_for(["a", "c"]) == [6, 7]
    mirror.after_decode(["a", "c"], [6, 7], gated=True)
    assert mirror.prefilled == {} and mirror.lengths_for(["a", "c"]) == [7, 8]
    mirror.after_prefill(["a"], [3])  # retracted, prefilled again: the prefill's length wins
    assert mirror.lengths_for(["a"]) == [3]
    mirror.after_prefill(["d"], None)  # no host lengths: not remembered
    assert mirror.lengths_for(["d"]) is None


def test_a_drafting_batch_or_unknown_lengths_forget_the_decoded() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.after_decode(["a", "b"], [5, 9], gated=True)
    mirror.after_prefill(["c"], [4])
    mirror.after_decode(["a", "b"], [6, 10], gated=False)  # accepted counts are data
    assert mirror.lengths_for(["a"]) is None
    assert mirror.lengths_for(["c"]) == [4]  # c has not run since its prefill
    mirror.after_decode(["a"], [5], gated=True)
    mirror.after_decode(["a"], None, gated=True)  # no host lengths this batch: nothing to grow from
    assert mirror.lengths_for(["a"]) is None
    mirror.forget()  # a mixed batch
    assert mirror.lengths_for(["c"]) is None


def test_prefilled_requests_that_never_decode_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SeqLensMirror, "MAX_PREFILLED", 3)
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.after_prefill(["a", "b"], [1, 2])
    mirror.after_prefill(["c", "d"], [3, 4])  # would exceed the bound: the aborted-looking rest is dropped
    assert mirror.prefilled == {"c": 3, "d": 4}


def test_a_difference_turns_it_off_and_says_where(caplog: pytest.LogCaptureFixture) -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=2)
    mirror.after_decode(["a", "b"], [5, 9], gated=True)
    mirror.hits = 1
    assert mirror.due_for_check()  # the first remembered answer is always checked
    mirror.hits = 3
    assert not mirror.due_for_check()
    mirror.hits = 4
    assert mirror.due_for_check()
    assert mirror.check(["a", "b"], [6, 10], [6, 10])
    with caplog.at_level(logging.WARNING):
        assert not mirror.check(["a", "b"], [6, 10], [6, 12])
    assert mirror.enabled is False and mirror.mismatches == 1 and mirror.verified == 2
    assert mirror.off_reason == "request 'b': remembered 10, SGLang 12"
    assert "OFF for this process" in caplog.text
    mirror.after_decode(["a"], [5], gated=True)
    assert mirror.lengths_for(["a"]) is None  # off for good


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_MIRROR", "0")
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_VERIFY_EVERY", "nonsense")
    mirror = SeqLensMirror()
    assert mirror.enabled is False and mirror.verify_every == DEFAULT_VERIFY_EVERY
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_VERIFY_EVERY", "0")
    assert SeqLensMirror().verify_every == 0 and not SeqLensMirror().due_for_check()


def test_lengths_of_another_count_are_a_difference_not_a_crash() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=1)
    assert not mirror.check(["a", "b"], [6, 10], [6])
    assert mirror.enabled is False and mirror.off_reason == "2 lengths remembered, SGLang gave 1"


def test_its_own_failure_never_reaches_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch the mirror cannot read (shaped unlike 0.5.17's or 0.5.23's) turns it off; SGLang resolves."""
    from types import SimpleNamespace

    from spectower.plugin import seq_lens_mirror

    monkeypatch.setattr(seq_lens_mirror, "_MIRROR", SeqLensMirror(enabled=True, verify_every=0))
    resolved = []
    future_map = SimpleNamespace(needs_cpu_seq_lens=True)
    unreadable = SimpleNamespace(spec_info=SimpleNamespace(future_indices=[1]), reqs=42)  # not a sequence

    def original(fm: object, batch: object) -> str:
        resolved.append(batch)
        return "sglang"

    assert seq_lens_mirror.hook_resolve_seq_lens_cpu(original, future_map, unreadable) == "sglang"
    assert resolved == [unreadable] and future_map.needs_cpu_seq_lens is True
    state = seq_lens_mirror.mirror()
    assert state.enabled is False and "could not read the batch" in (state.off_reason or "")
    assert seq_lens_mirror.before_forward(unreadable, decode=True) is None  # off: nothing noted


def test_a_gated_batch_sglang_resolved_is_counted_as_a_miss() -> None:
    """The resolve hook notes who answered (``last_by_sglang``); the batch that then runs says whether it was
    gated: SGLang's answer is due for a drafting batch and for the first gated one after it, any other is a
    miss inside a gated stream."""
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.last_by_sglang = True  # SGLang's host copy resolved it
    mirror.after_decode(["a"], [5], gated=False)  # a drafting batch: its acceptance is data, nothing missed
    assert mirror.gated_syncs == 0
    mirror.last_by_sglang = True
    mirror.after_decode(["a"], [8], gated=True)  # the first gated batch after drafting
    mirror.after_decode(["a"], [9], gated=True)  # resolved from the mirror: the hook left the flag down
    assert mirror.gated_syncs == 1
    mirror.last_by_sglang = True
    mirror.after_prefill(["b"], [4])  # a prefill in between: the flag belonged to no decode batch
    mirror.after_decode(["a", "b"], [10, 4], gated=True)
    assert mirror.report()["gated_by_sglang"] == 1
