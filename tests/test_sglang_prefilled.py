"""The decode counters mark the steps that carried a prefill (plugin 0.4.14) inside SGLang's own classes
(0.5.23 and 0.5.17): the knob plugin's hook on the real ``Scheduler.get_next_batch_to_run`` tells a prefill
batch by SGLang's own ``ForwardMode`` and the step launched after it, in the overlap loop's order, is the
prefilled one. What is real and what is constructed: tests/sglang_plugin_checks/check_prefilled.py (one of the
session's batches of checks, tests/sglang_checks.py)."""

from __future__ import annotations

from typing import Any

from spectower.plugin.gate import PLUGIN_VERSION

from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("prefilled")


@plugin_tests.sglang_check
def test_prefills_are_told_by_sglangs_forward_mode_and_mark_the_step_launched_after_them(
    checked: dict[str, Any],
) -> None:
    assert checked["plugin_version"] == PLUGIN_VERSION
    # SGLang's extends the scheduler chooses are prefills; its decode, idle and the worker's own modes are not
    rule = checked["rule"]
    assert {mode for mode, prefill in rule.items() if prefill} == {
        "EXTEND", "MIXED", "SPLIT_PREFILL", "DLLM_EXTEND", "EXTEND, the batch itself"}  # fmt: skip
    assert not rule["DECODE"] and not rule["IDLE"] and not rule["TARGET_VERIFY"] and not rule["no batch"]
    # (decode steps ended, prefilled among them) at each decode result: the step in flight when the prefill
    # was chosen is not prefilled, the next one is; MIXED then EXTEND before one step: one prefilled step
    ends = [(end["steps"], end["prefilled"]) for end in checked["ends"]]
    assert ends == [(1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2), (7, 2), (8, 2)]
    counters = checked["counters"]
    i = counters["bins"].index(16)
    published = sum(counters["prefilled"][mode]["steps"][i] for mode in ("drafted", "gated"))
    assert published == 2 and counters["prefilled"]["drafted"]["tokens"][i] == 2 * 3 * 16
