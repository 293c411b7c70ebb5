"""The decode counters count what each step's requests kept (plugin 0.4.13, plugin/kept_tokens.py) inside
SGLang's own classes (0.5.23 and 0.5.17): the hook on the real ``process_batch_result_decode``, real ``Req``
objects, the real ``on_verify_complete_cpu``. What is real and what is constructed:
tests/sglang_plugin_checks/check_kept_tokens.py."""

from __future__ import annotations

from typing import Any

from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("kept_tokens")


@plugin_tests.sglang_check
def test_a_requests_overshoot_and_its_step_after_the_finish_are_not_counted(checked: dict[str, Any]) -> None:
    """Four drafting requests accept 3 tokens a step; the first may make 4. Step 1 keeps all 12; step 2 keeps
    1 of the first's 3 (cut at its max_new_tokens, SGLang's finished_len) and 9 of the others: 10 of 12; in
    step 3 the first, finished, is still in the batch (the overlap loop launched it before the finish was
    known) and SGLang drops its step: 9 of 12. The counters hold 31 tokens where the verifies counted 36."""
    assert [s["steps"] for s in checked["steps"]] == [1, 2, 3]
    assert [s["drafted_tokens"] for s in checked["steps"]] == [12, 22, 31]
    assert [s["not_kept"] for s in checked["steps"]] == [0, 2, 5]
    assert checked["finished_len"] == 4 and checked["lengths"] == [6, 9, 9, 9]
