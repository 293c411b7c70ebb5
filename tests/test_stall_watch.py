"""plugin/stall_watch.py: during a stall a watch thread takes the scheduler thread's Python stack, and notes
when it woke late (the GIL held). The scheduler thread here is a real thread parked inside a call of the loop
(an Event it waits on, so nothing waits on the wall clock); the watch's wakes are driven one by one with the
recorder's injected clock."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from spectower.collectors.sglang.stalls import loop_report
from spectower.plugin import loop_stalls, stall_watch

from tests.test_engine_counters import FakeClock as Clock
from tests.test_loop_stalls import Loop, batch
from tests.test_loop_stalls import loop as loop  # the fixture: the recorder behind the hooks


def _parked_result(loop: Loop) -> tuple[threading.Thread, threading.Event, threading.Event]:
    """A scheduler thread inside ``process_batch_result``, parked in a function named for the test."""
    entered, release = threading.Event(), threading.Event()

    def waiting_for_the_gpu(*_args: Any, **_kwargs: Any) -> None:
        entered.set()
        release.wait()

    def scheduler_thread() -> None:
        loop_stalls.hook_process_batch_result(waiting_for_the_gpu, loop.scheduler, batch("EXTEND", 6, 20_000))

    thread = threading.Thread(target=scheduler_thread)
    thread.start()
    assert entered.wait(timeout=30)
    return thread, entered, release


def test_a_stalled_threads_stack_is_kept_with_its_stall(loop: Loop) -> None:
    loop.iteration(batch("DECODE", 20))
    loop.iteration(batch("DECODE", 20))
    thread, _entered, release = _parked_result(loop)
    watch = stall_watch.StallWatch(loop.recorder, thread.ident or 0, clock=loop.clock)
    watch.watch_once(loop.clock())  # a fresh gap: nothing to take yet
    loop.clock.now += 0.3
    watch.watch_once(loop.clock())  # past the threshold: the first sample
    watch.watch_once(loop.clock())  # the second waits for twice the threshold
    loop.clock.now += 0.3
    watch.watch_once(loop.clock(), late_s=0.2)  # woke 0.2 s late: the GIL was held
    release.set()
    thread.join()
    assert watch.sampled == 2 and watch.wakes == 4
    (stall,) = loop.recorder.report()["recent"]
    first, second = stall["samples"]
    assert first["phase"] == second["phase"] == "result"
    assert first["after_s"] == pytest.approx(0.3) and second["after_s"] == pytest.approx(0.6)
    # innermost last: the Event's own wait, inside the parked call, inside the plugin's hook
    stack = first["stack"]
    assert stack[-1].endswith(" wait") and len(stack) <= stall_watch.STACK_FRAMES
    assert any(frame.endswith("waiting_for_the_gpu") for frame in stack)
    assert any(frame.endswith("hook_process_batch_result") for frame in stack)
    assert stall["watch_late_s"] == pytest.approx(0.2)
    read = loop_report(loop.recorder.report())
    assert read is not None
    where = read.recent[0].where()
    assert where == second["stack"][-1] and "threading.py:" in where
    assert read.recent[0].text().endswith(f"; at {where}; the GIL held 0.20 s")


def test_no_sample_while_idle_or_in_a_short_gap_and_samples_never_leak_into_the_next_gap(loop: Loop) -> None:
    watch = stall_watch.StallWatch(loop.recorder, threading.get_ident(), clock=loop.clock)
    loop.clock.now += 5.0
    watch.watch_once(loop.clock(), late_s=1.0)  # idle: nothing owed, nothing noted
    loop.iteration(batch("DECODE", 4))
    loop.clock.now += 0.1
    watch.watch_once(loop.clock())  # a gap of 0.1 s: under the threshold
    loop.iteration(batch("DECODE", 4))
    loop.iteration(batch("DECODE", 4), result_s=0.3)  # a stall nobody sampled
    loop.iteration(batch("DECODE", 4))
    assert watch.sampled == 0
    (stall,) = loop.recorder.report()["recent"]
    assert stall["samples"] == [] and stall["watch_late_s"] == 0.0


def test_at_most_three_samples_a_stall_at_doubling_times(loop: Loop) -> None:
    loop.iteration(batch("DECODE", 4))
    thread, _entered, release = _parked_result(loop)
    watch = stall_watch.StallWatch(loop.recorder, thread.ident or 0, clock=loop.clock)
    for _ in range(40):  # 4 s in wakes of 0.1 s
        loop.clock.now += 0.1
        watch.watch_once(loop.clock())
    release.set()
    thread.join()
    (stall,) = loop.recorder.report()["recent"]
    assert [s["after_s"] for s in stall["samples"]] == pytest.approx([0.3, 0.5, 1.0], abs=0.002)


def test_the_thread_starts_stops_and_survives_a_failing_wake(
    loop: Loop, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(loop_stalls.LoopStalls):
        def gap_now(self, now: float) -> tuple[int, float, str | None] | None:
            raise RuntimeError("bad read")

    woke = threading.Event()
    recorder = Broken()

    def clock() -> float:
        if watch.wakes:  # the failing wake counted: let the test go on
            woke.set()
        return loop.clock()

    watch = stall_watch.StallWatch(recorder, threading.get_ident(), clock=clock, poll_s=0.0)
    watch.start()
    assert woke.wait(timeout=30)
    watch.stop()
    assert watch.wakes >= 1 and "a wake failed; it goes on" in caplog.text


def test_frames_read_from_the_package_on() -> None:
    import traceback

    inside = traceback.FrameSummary("/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py",
                                    2104, "process_batch_result")  # fmt: skip
    assert stall_watch.frame_text(inside) == "sglang/srt/managers/scheduler.py:2104 process_batch_result"
    outside = traceback.FrameSummary("/work/repo/plugin/loop_stalls.py", 9, "hook")
    assert stall_watch.frame_text(outside) == "plugin/loop_stalls.py:9 hook"
    assert stall_watch.stack_of(-1) is None  # no such thread


def test_one_watch_a_process_attached_to_the_scheduler_loops_recorder_unless_switched_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """register() starts the process's watch (in SGLang's launcher it only logs); the scheduler's recorder,
    made on the loop's thread, takes it over; SPECTOWER_STALL_STACKS=0: none."""
    monkeypatch.setattr(loop_stalls, "_WATCH", None)
    monkeypatch.setattr(loop_stalls, "_STALLS", None)
    monkeypatch.delenv(stall_watch.DISABLE_ENV, raising=False)
    loop_stalls._start_watch()
    watch = loop_stalls._WATCH
    try:
        assert watch is not None and watch.recorder is None
        loop_stalls._start_watch()
        assert loop_stalls._WATCH is watch  # one a process
        recorder = loop_stalls.stalls()
        assert recorder.watch is watch and watch.recorder is recorder
        assert watch.thread_ident == threading.get_ident()
        assert recorder.report()["watch"]["poll_s"] == stall_watch.POLL_S
    finally:
        watch.stop()
    monkeypatch.setattr(loop_stalls, "_WATCH", None)
    monkeypatch.setattr(loop_stalls, "_STALLS", None)
    monkeypatch.setenv(stall_watch.DISABLE_ENV, "0")
    loop_stalls._start_watch()
    assert loop_stalls._WATCH is None and loop_stalls.stalls().watch is None


def test_the_launchers_watch_logs_each_late_wake_with_its_utc_time(caplog: pytest.LogCaptureFixture) -> None:
    """No loop to sample in SGLang's launcher: a wake 0.6 s late (its HTTP server and tokenizer manager held
    Python that long) is a line in the server's log; one 0.2 s late is not (under a quarter second)."""
    clock = Clock()
    watch = stall_watch.StallWatch(None, threading.get_ident(), clock=clock, wall=lambda: 1_796_463_029.5)
    watch.watch_once(clock(), late_s=0.2)
    watch.watch_once(clock(), late_s=0.6)
    printed = caplog.text  # SGLang's log once it configured logging (stderr before)
    assert printed.count("spectower watch:") == 1 and watch.late_logged == 1
    assert "Python was held 0.60 s (the GIL, a collection or the CPU), to 09:30:29.5 UTC" in printed
    assert watch.sampled == 0
