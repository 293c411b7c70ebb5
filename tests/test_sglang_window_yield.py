"""An exploration window yields to a full server (plugin 0.4.12) inside SGLang's own classes (0.5.23 and
0.5.17): the knob plugin's hook on the real ``Scheduler.get_next_batch_to_run`` reads its waiting queue, and
the gate in the real ``AdaptiveSpeculativeParams`` waits, cuts a part short and begins again. What is real
and what is constructed: tests/sglang_plugin_checks/check_window_yield.py."""

from __future__ import annotations

from typing import Any

from spectower.plugin.gate import PLUGIN_VERSION

from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("window_yield")


@plugin_tests.sglang_check
def test_the_hook_notes_the_requests_left_waiting(checked: dict[str, Any]) -> None:
    assert checked["answers"] == {"policy_8": True} and checked["plugin_version"] == PLUGIN_VERSION
    assert all(t["noted"] == t["waiting"] for t in checked["turns"])


@plugin_tests.sglang_check
def test_an_idle_turn_leaves_the_gap_before_the_next_step_out_of_the_counters_outside_time(
    checked: dict[str, Any],
) -> None:
    """Plugin 0.4.13: the seconds outside every span grow only at the steps after a turn with requests
    waiting (not idle); after an idle turn the gap holds idle time, which no mode spent."""
    turns = checked["turns"]
    grew = [i for i in range(1, len(turns)) if turns[i]["outside_s"] > turns[i - 1]["outside_s"]]
    assert grew and all(turns[i]["waiting"] > 0 for i in grew)


@plugin_tests.sglang_check
def test_a_due_window_waits_for_room_and_a_queue_ends_its_part(checked: dict[str, Any]) -> None:
    turns = [(t["part"], t["steps"]) for t in checked["turns"]]
    cold, drafted = ("cold", 0), ("explore", 3)  # SGLang's steps 3 where the exploring part drafts
    assert turns[:94] == [cold] * 94  # the cold part, with room (a 100-batch cycle less its part of 6)
    # due, but 5 requests wait (3 batches), then 24 with room: not yet the 25 in a row a window needs
    assert turns[94:121] == [cold] * 27
    # the window drafts, until requests wait again after its third batch: back to cold, waiting for room
    assert turns[121:125] == [drafted] * 3 + [cold]
    # 25 batches with room later the window begins anew and runs its 4 batches, then cold
    assert turns[125:] == [cold] * 24 + [drafted] * 4 + [cold]
    window = checked["window"]
    assert (window["room_batches"], window["full_waited"], window["yielded"]) == (25, 52, 1)
    assert (window["windows"], window["forced"]) == (2, 0)
