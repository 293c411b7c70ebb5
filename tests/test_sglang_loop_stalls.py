"""The scheduler's output stalls (plugin/loop_stalls.py), loaded by SGLang's real load_plugins() from its
entry point, against SGLang's own classes (0.5.23 and 0.5.17): the four loop methods are wrapped by its
HookRegistry, called as its overlap loop calls them with its own batches, and the stall is published by its
real get_internal_state. What is real and what is constructed:
tests/sglang_plugin_checks/check_loop_stalls.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("loop_stalls")


@plugin_tests.sglang_check
def test_the_four_loop_methods_are_wrapped_through_sglangs_registry(checked: dict[str, Any]) -> None:
    assert checked["loop_plugin_loaded"] and checked["hooked"]
    assert checked["wrapped"] == {"process_input_requests": True, "get_next_batch_to_run": True,
                                  "run_batch": True, "process_batch_result": True}  # fmt: skip


@plugin_tests.sglang_check
def test_a_long_extend_is_published_as_a_stall_with_its_batch(checked: dict[str, Any]) -> None:
    loop = checked["loop"]
    assert loop is not None and loop["threshold_s"] == 0.25
    assert loop["watch"] is None  # SPECTOWER_STALL_STACKS=0 (tests/sglang_checks.py)
    assert loop["phases"]["run"]["calls"] == 16 and loop["phases"]["result"]["calls"] == 15
    assert loop["gaps"] == 15 and loop["stalls"] == 1  # every result closes one, the first from the first run
    (stall,) = loop["recent"]
    assert stall["seconds"] == pytest.approx(1.5 + 0.0002 + 0.0005 + 0.001, abs=1e-4)
    assert stall["phases"]["result"] == pytest.approx(1.5)
    assert stall["received"] == 0  # the extend's 3 arrived in the gap before: their result is this one
    # plugin 0.4.11: the input's time by what each call took in, named by SGLang's own request class
    kinds = loop["input_kinds"]
    assert kinds["GetInternalStateReq"]["calls"] == 1 and kinds["GetInternalStateReq"]["requests"] == 3
    assert kinds["none"]["calls"] == 15
    # ...and the batches by SGLang's own ForwardMode names: the extend's 1.5 s waited for in its result
    modes = loop["batch_modes"]
    assert modes["DECODE"]["runs"] == 15 and modes["EXTEND"]["runs"] == 1
    assert modes["EXTEND"]["tokens"] == 6000 and modes["EXTEND"]["result_s"] == pytest.approx(1.5)
    top = stall["batches"][0]
    assert (top["mode"], top["requests"], top["tokens"]) == ("EXTEND", 3, 6000)
    assert top["result_s"] == pytest.approx(1.5)


@plugin_tests.sglang_check
def test_the_frozen_count_is_taken_after_sglangs_freeze_not_on_every_read(checked: dict[str, Any]) -> None:
    """Plugin 0.4.11: ``gc.get_freeze_count()`` walks every frozen object (70-100 ms a read in a scheduler
    after /freeze_gc, on the H100 of 2026-12-05), so the gc block counts again only after SGLang's own
    ``Scheduler.handle_freeze_gc``, wrapped through its HookRegistry."""
    freeze = checked["freeze"]
    assert freeze["wrapped"]
    assert freeze["before"] == 0 and freeze["after"] > 0
    assert freeze["unhooked"] == freeze["after"]  # a freeze past the hook: the last count stands
    assert freeze["again"] > freeze["after"] + 50_000  # the hooked one counts again
    assert freeze["again"] == pytest.approx(freeze["actual"], rel=0.01)


@plugin_tests.sglang_check
def test_the_launchers_gather_carries_its_block_out(checked: dict[str, Any]) -> None:
    """Plugin 0.4.8 (plugin/launcher_state.py): SGLang's own TokenizerControlMixin.get_internal_state, wrapped
    by its HookRegistry, hands /server_info each rank's state with the launcher's block: its collections
    (timed from the first gather on), and what gc.freeze() froze, as SGLang's /freeze_gc does."""
    launcher = checked["launcher"]
    assert launcher["wrapped"]
    block = launcher["block"]
    assert block is not None and isinstance(block["pid"], int)
    assert block["gc"]["collections"] >= 1 and block["gc"]["frozen"] > 0
    # SGLang's own TokenizerManager.freeze_gc, wrapped: the launcher's count is taken after it
    assert launcher["freeze_wrapped"] and launcher["sent"] == ["FreezeGCReq"]
    # (frozen objects freed since leave the list: the count read after the freeze may be a few above)
    assert block["gc"]["frozen"] == pytest.approx(launcher["frozen_now"], rel=0.01)
    assert block["watch"] is None  # SPECTOWER_STALL_STACKS=0 (tests/sglang_checks.py)
