"""plugin/explore.py, plugin 0.4.2: a window's exploring part drafts only batches up to the stream's limit
(``stream_limit``: twice the ceiling, at least ``EXPLORE_STREAM_FLOOR``, doubled after parts above it: 0.4.3);
a batch above it runs gated with the draft extend and is settling. The plugin's gate (pure logic) decides it;
tests/test_sglang_plugin.py runs the same gate against SGLang's own classes."""

from __future__ import annotations

from spectower.plugin import engine_counters as ec
from spectower.plugin import knob_contract as kc
from spectower.plugin.explore import (
    EXPLORE,
    EXPLORE_STREAM_CAP,
    EXPLORE_STREAM_FLOOR,
    EXPLORE_STREAM_OVER_CEILING,
    MAX_DOUBLINGS,
    RUN_LENGTH,
    Explorer,
    next_doublings,
    stream_drafts,
    stream_limit,
)
from spectower.plugin.gate import Gate

# a short cycle (64 batches: 60 cold, a warm part, an exploring part of 4 whose first 2 drafted ones turn
# over) at the largest share (one batch in 5), which shortens the cold part to 60 x 5 / 50 = 6 batches
CYCLE, SHARE, PERIOD, COLD = 64, 0.2, 5, 6


def test_the_limit_is_twice_the_ceiling_and_at_least_the_floor_on_bin_boundaries() -> None:
    assert (EXPLORE_STREAM_OVER_CEILING, EXPLORE_STREAM_FLOOR) == (2, 8)
    assert [stream_limit(c) for c in (0, 1, 4, 8, 12, 16, 48)] == [8, 8, 8, 16, 24, 32, 96]
    assert stream_drafts(16, 8) and not stream_drafts(17, 8)
    assert stream_drafts(8, 0) and not stream_drafts(9, 0)
    bins = ec.counter_bins(256)
    # a ceiling on a bin boundary (learn's) explores whole bins: twice a boundary is a boundary
    assert all(stream_limit(b) in bins for b in bins if stream_limit(b) <= bins[-1])


def _to_window(explorer: Explorer, ceiling: int) -> None:
    """Walk gated batches (of the ceiling's size plus one) until one is a window's first exploring batch."""
    for _ in range(4 * CYCLE):
        if explorer.next(ceiling + 1, True, PERIOD, ceiling=ceiling).phase == EXPLORE:
            return
    raise AssertionError("no window")


def test_an_exploring_batch_above_the_limit_runs_gated_with_the_extend_and_is_not_counted() -> None:
    explorer = Explorer(CYCLE)
    windows = explorer.windows
    assert windows is not None and windows.explore_length(PERIOD) == 4 and windows.turnover(PERIOD) == 2
    _to_window(explorer, 8)  # the window's first batch was 9 running: drafted (turnover)
    sizes = [40, 12, 16]  # the rest of the part: above, below, at the limit (16 under 8)
    plans = [explorer.next(size, True, PERIOD, ceiling=8) for size in sizes]
    assert [p.phase for p in plans] == [EXPLORE] * 3
    assert [p.explore for p in plans] == [False, True, True]
    # above the limit: settling (counted apart); the turnover counts drafted batches only: the second drafted
    # one still turns over, the third counts
    assert [p.settling for p in plans] == [True, True, False]
    # an above-limit batch uses up the part: four batches in all, then cold
    assert explorer.next(9, True, PERIOD, ceiling=8).phase == "cold"
    assert explorer.window_report()["over_limit"] == 1
    # the extend runs for them: the exploring part's phase is not "cold" (knob_contract.extend_skippable)
    assert not kc.extend_skippable(True, PERIOD, kc.OWNER_FREE, EXPLORE)


def test_the_gate_keeps_a_burst_out_of_the_stream() -> None:
    """The plugin's per-batch decision (Gate.decide, what the SGLang hook asks): at a ceiling of 8 a window
    meets a burst of 48 running, which stays gated (decide says gate) with the extend, settling; once the
    batch shrinks to 16 it drafts again in the same stream."""
    gate = Gate(explore_share=SHARE, explore_cycle=CYCLE)
    gate.set_ceiling(8)
    answers = []
    while True:
        gated = gate.decide(48)
        answers.append((gated, gate.plan.phase, gate.plan.settling))
        if gate.plan.phase == EXPLORE:
            break
    assert all(a[0] for a in answers)  # a burst above the limit never drafts, window or not
    assert answers[-1] == (True, EXPLORE, True) and gate.gated_by_ceiling_now
    # what plugin/knob_gate.py asks before the draft extend: it runs (the requests may draft in this stream)
    assert not kc.extend_skippable(gate.gated_by_ceiling_now, gate.explore_period, kc.OWNER_FREE,
                                   gate.explorer.phase_now)  # fmt: skip
    assert gate.decide(16) is False and gate.plan.explore and gate.plan.phase == EXPLORE
    assert not gate.gated_by_ceiling_now
    # the part's last two batches draft too; explored batches leave the hysteresis closed, so the next batch
    # at 16, cold, is gated by the ceiling
    assert gate.decide(16) is False and gate.decide(16) is False
    assert gate.decide(16) is True and gate.plan.phase == "cold"


def _part(explorer: Explorer, size: int, ceiling: int) -> list[bool]:
    """Walk gated batches of ``size`` to the next window's exploring part and through it (the first cold batch
    after it ends the part); whether each of the part's batches drafted."""
    drafted: list[bool] = []
    for _ in range(4 * CYCLE):
        plan = explorer.next(size, True, PERIOD, ceiling=ceiling)
        if plan.phase == EXPLORE:
            drafted.append(plan.explore)
        elif drafted:
            return drafted
    raise AssertionError("no window")


def test_the_limit_doubles_per_part_above_it_and_comes_back_down_with_the_load() -> None:
    """Plugin 0.4.3/0.4.4: a load that stays far above a low ceiling is measured within a few windows. The
    first part above the limit doubles it once (it may have met a burst: 40 running at a ceiling of 0, 8 ->
    16); escalated, the limit drafts twice the last part's largest batch (a held 40: 128 at once, so the third
    part drafts them), and follows the load down with that headroom (20: 64; 6: 16), back to the floor once
    twice the largest batch is within it (3: 8)."""
    explorer = Explorer(CYCLE)
    windows = explorer.windows
    assert windows is not None
    limits = []
    for size in (40, 40, 40, 20, 6, 3):  # the limit each part leaves for the next
        drafted = _part(explorer, size, 0)
        limits.append((all(drafted), not any(drafted), windows.doublings, explorer.window_report()["limit"]))
    assert limits == [
        (False, True, 1, 16), (False, True, 4, 128), (True, False, 4, 128),
        (True, False, 3, 64), (True, False, 1, 16), (True, False, 0, 8),
    ]  # fmt: skip
    assert explorer.window_report()["doublings"] == 0
    # a lone burst doubles the limit once, and a part within it takes that back
    assert next_doublings(0, 60, 0) == 1 and next_doublings(1, 4, 0) == 0


def test_the_doublings_stop_at_the_cap() -> None:
    explorer = Explorer(CYCLE)
    windows = explorer.windows
    assert windows is not None
    for _ in range(MAX_DOUBLINGS + 3):  # a batch above any limit: every part starves
        assert not any(_part(explorer, 10 * EXPLORE_STREAM_CAP, 0))
    assert windows.doublings == MAX_DOUBLINGS and windows.limit(0) == EXPLORE_STREAM_CAP
    assert stream_limit(0, MAX_DOUBLINGS + 5) == EXPLORE_STREAM_CAP
    # the cap never lowers a limit above it (a ceiling beyond the counters' bins)
    assert stream_limit(EXPLORE_STREAM_CAP, 3) == 2 * EXPLORE_STREAM_CAP
    assert next_doublings(MAX_DOUBLINGS, 10 * EXPLORE_STREAM_CAP, 0) == MAX_DOUBLINGS


# ---- plugin 0.4.12: a window yields to a full server (explore.WINDOW_WAIT_MAX_CYCLES) ------------------


def _walk(gate: Gate, waits: list[int], size: int = 16) -> list[tuple[str | None, bool]]:
    """Each batch's window part and whether it drafted, with ``waits[i]`` requests left waiting."""
    out = []
    for waiting in waits:
        gate.waiting = waiting
        drafted = not gate.decide(size)
        out.append((gate.plan.phase, drafted))
    return out


def _due_gate() -> Gate:
    """A policy's 8 at the largest share after its cold part (6 batches of 16): the next window is due."""
    gate = Gate(explore_share=SHARE, explore_cycle=CYCLE)
    gate.set_ceiling(8)
    assert _walk(gate, [0] * COLD) == [("cold", False)] * COLD
    return gate


ROOM = CYCLE // 4  # the batches in a row with room a window needs (explore.WINDOW_ROOM_BATCHES, scaled)


def test_a_due_window_waits_while_requests_wait_and_then_for_room() -> None:
    gate = _due_gate()
    assert gate.explorer.window_report()["room_batches"] == ROOM
    assert _walk(gate, [3] * 5) == [("cold", False)] * 5  # full: nothing drafts, the extend stays skipped
    # the queue clears: ROOM batches in a row with room, and the window's 4 batches draft
    walked = _walk(gate, [0] * (ROOM + 4))
    assert walked == [("cold", False)] * (ROOM - 1) + [(EXPLORE, True)] * 4 + [("cold", False)]
    report = gate.explorer.window_report()
    assert (report["full_waited"], report["yielded"]) == (5 + ROOM - 1, 0)
    assert (report["forced"], report["windows"]) == (0, 1)


def test_requests_waiting_end_an_exploring_part_and_the_window_begins_again() -> None:
    gate = _due_gate()  # a fresh server has had room: the due window begins at once
    assert _walk(gate, [0, 0, 2, 2]) == [(EXPLORE, True)] * 2 + [("cold", False)] * 2
    walked = _walk(gate, [0] * (ROOM + 4))
    assert walked == [("cold", False)] * (ROOM - 1) + [(EXPLORE, True)] * 4 + [("cold", False)]
    report = gate.explorer.window_report()
    assert (report["full_waited"], report["yielded"], report["windows"]) == (2 + ROOM - 1, 1, 2)
    # the window that ran its course resets the wait: the next falls due a cold part later
    assert _walk(gate, [0] * (COLD - 1)) == [("cold", False)] * (COLD - 1)
    assert _walk(gate, [3]) == [("cold", False)]
    assert gate.explorer.window_report()["full_waited"] == 2 + ROOM


def test_a_window_waits_one_cycle_at_most_then_runs_full_to_its_end() -> None:
    """A server that stays full is still measured: the window falls due, waits one cycle of batches, then
    runs its whole part whatever the queue."""
    gate = _due_gate()
    walked = _walk(gate, [4] * (CYCLE + 4))
    assert walked[:CYCLE - 1] == [("cold", False)] * (CYCLE - 1)
    assert walked[CYCLE - 1:CYCLE + 3] == [(EXPLORE, True)] * 4 and walked[CYCLE + 3] == ("cold", False)
    report = gate.explorer.window_report()
    assert (report["full_waited"], report["forced"], report["yielded"]) == (CYCLE - 1, 1, 0)


def test_without_yielding_a_window_explores_on_a_full_server() -> None:
    """What plugin 0.4.11 did (``yield_to_full`` off: the simulators' what-if)."""
    gate = _due_gate()
    windows = gate.explorer.windows
    assert windows is not None
    windows.yield_to_full = False
    assert _walk(gate, [3] * 5) == [(EXPLORE, True)] * 4 + [("cold", False)]
    report = gate.explorer.window_report()
    assert (report["full_waited"], report["yielded"], report["forced"]) == (0, 0, 0)


def test_a_full_server_leaves_the_runs_of_a_drafting_bin_alone() -> None:
    """Only the windows of the batches the ceiling gates wait: a bin the ceiling drafts explores its runs."""
    gate = Gate(explore_share=SHARE, explore_cycle=CYCLE)
    gate.set_ceiling(32)
    walked = _walk(gate, [5] * 12, size=16)
    # bin 16's 5th batch begins a run of 4 gated ones (period 5), full or not
    assert [drafted for _phase, drafted in walked] == [True] * 4 + [False] * RUN_LENGTH + [True] * 4
