"""plugin/launcher_state.py: the launcher's block added to each rank's state on its way out of SGLang's
``get_internal_state`` (an async method wrapped by a synchronous AROUND hook); through SGLang's own classes in
tests/test_sglang_loop_stalls.py."""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import pytest
from spectower.plugin import gc_pauses, launcher_state, loop_stalls, stall_watch


@pytest.fixture(autouse=True)
def _own_timer(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A timer of this test's own, uninstalled after it (the module keeps one per process)."""
    monkeypatch.setattr(launcher_state, "_PAUSES", None)
    yield
    if launcher_state._PAUSES is not None:
        gc_pauses.uninstall(launcher_state._PAUSES)


def _states() -> list[dict[str, Any]]:
    return [{"dp_rank": 0, "spectower": {"spec_max_bs": 16}}, {"dp_rank": 1}]  # rank 1: no plugin block


def test_the_hook_awaits_sglangs_gather_and_adds_the_launchers_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_stalls, "_WATCH", None)
    seen: list[Any] = []

    async def gather(manager: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        seen.append((manager, args, kwargs))
        return _states()

    states = asyncio.run(launcher_state.hook_get_internal_state(gather, "manager", 1, key="v"))
    assert seen == [("manager", (1,), {"key": "v"})]
    block = states[0]["spectower"]["launcher"]
    assert block["pid"] == os.getpid() and block["watch"] is None
    assert block["gc"]["threshold_s"] == gc_pauses.DEFAULT_THRESHOLD_S and "frozen" in block["gc"]
    assert "spectower" not in states[1]  # a rank without the plugin's block is left alone
    assert launcher_state._PAUSES is not None and launcher_state._PAUSES.callback in gc.callbacks


def test_the_launchers_collections_and_held_python_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer counts this process's collections from the first call; the watch's late wakes come along."""
    watch = stall_watch.StallWatch(None, 0, wall=lambda: 1_796_435_875.3)
    watch.watch_once(0.0, late_s=0.33)  # a wake 0.33 s late: the launcher's Python was held
    monkeypatch.setattr(loop_stalls, "_WATCH", watch)
    launcher_state.report()  # the first call installs the timer
    gc.collect()
    block = launcher_state.report()
    assert block["gc"]["collections"] >= 1
    assert block["watch"]["held"] == 1
    assert block["watch"]["recent_held"] == [{"at": 1_796_435_875.3, "seconds": 0.33}]


def test_a_failure_leaves_sglangs_states_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("no report")

    monkeypatch.setattr(launcher_state, "report", broken)

    async def gather(manager: Any) -> list[dict[str, Any]]:
        return _states()

    assert asyncio.run(launcher_state.hook_get_internal_state(gather, None)) == _states()


def test_an_sglang_without_the_gather_is_not_hooked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher_state, "TARGET", ("spectower.plugin.gate", "Gate", "no_such_method"))
    assert launcher_state.register(None, None) is False
    monkeypatch.setattr(launcher_state, "TARGET", ("no_such_module_here", "X", "get_internal_state"))
    assert launcher_state.register(None, None) is False


def test_frozen_objects_are_the_read_back_of_a_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    """``frozen`` in each gc block is gc.get_freeze_count(): 0 until SGLang's /freeze_gc froze the process;
    the first freeze shows without any hook (the count is read while it is 0)."""
    monkeypatch.setattr(gc_pauses, "FROZEN", gc_pauses.FrozenCount())  # this process's, as it starts
    # a process that has frozen nothing yet, as a server before /freeze_gc: another test in this worker may
    # have frozen (the simulator's route, in-process), and a first freeze past the hooks is what this asks
    gc.unfreeze()
    pauses = gc_pauses.GcPauses()
    assert pauses.report()["frozen"] == gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = pauses.report()["frozen"]
        # a frozen object freed since leaves the list: the count read then may be a few above today's
        assert frozen > 0 and frozen == pytest.approx(gc.get_freeze_count(), rel=0.01)
    finally:
        gc.unfreeze()
