"""The seq-lens mirror (spectower.control.sglang_seq_lens.SeqLensMirror) as pure logic: what it remembers
after each kind of batch, when it answers, and how a difference turns it off. Inside SGLang, against its own
FutureMap: tests/test_sglang_seq_lens.py."""

from __future__ import annotations

import logging

import pytest
from spectower.control.sglang_seq_lens import DEFAULT_VERIFY_EVERY, SeqLensMirror


def test_a_gated_batch_grows_each_request_by_one_and_forgets_who_left() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    assert mirror.lengths_for(["a"]) is None  # nothing known yet: SGLang answers
    mirror.after_forward(["a", "b"], [5, 9], gated=True)
    assert mirror.lengths_for(["a", "b"]) == [6, 10]
    assert mirror.lengths_for(["b"]) == [10]
    assert mirror.lengths_for(["a", "c"]) is None  # one unknown request is enough to ask SGLang
    mirror.after_forward(["b"], [10], gated=True)  # a finished
    assert mirror.lengths_for(["a"]) is None and mirror.lengths_for(["b"]) == [11]


def test_a_drafting_batch_or_unknown_lengths_forget_everything() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.after_forward(["a", "b"], [5, 9], gated=True)
    mirror.after_forward(["a", "b"], [6, 10], gated=False)  # accepted counts are data
    assert mirror.lengths_for(["a"]) is None
    mirror.after_forward(["a"], [5], gated=True)
    mirror.after_forward(["a"], None, gated=True)  # no host lengths this batch: nothing to grow from
    assert mirror.lengths_for(["a"]) is None


def test_a_prefill_forgets_its_requests_a_mixed_batch_all() -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=0)
    mirror.after_forward(["a", "b"], [5, 9], gated=True)
    mirror.forget(["b"])
    assert mirror.lengths_for(["a"]) == [6] and mirror.lengths_for(["b"]) is None
    mirror.forget()
    assert mirror.lengths_for(["a"]) is None


def test_a_difference_turns_it_off_and_says_where(caplog: pytest.LogCaptureFixture) -> None:
    mirror = SeqLensMirror(enabled=True, verify_every=2)
    mirror.after_forward(["a", "b"], [5, 9], gated=True)
    mirror.hits = 1
    assert not mirror.due_for_check()
    mirror.hits = 2
    assert mirror.due_for_check()
    assert mirror.check(["a", "b"], [6, 10], [6, 10])
    with caplog.at_level(logging.WARNING):
        assert not mirror.check(["a", "b"], [6, 10], [6, 12])
    assert mirror.enabled is False and mirror.mismatches == 1 and mirror.verified == 2
    assert mirror.off_reason == "request 'b': remembered 10, SGLang 12"
    assert "OFF for this process" in caplog.text
    mirror.after_forward(["a"], [5], gated=True)
    assert mirror.lengths_for(["a"]) is None  # off for good


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_MIRROR", "0")
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_VERIFY_EVERY", "nonsense")
    mirror = SeqLensMirror()
    assert mirror.enabled is False and mirror.verify_every == DEFAULT_VERIFY_EVERY
    monkeypatch.setenv("SPECTOWER_SEQ_LENS_VERIFY_EVERY", "0")
    assert SeqLensMirror().verify_every == 0 and not SeqLensMirror().due_for_check()
