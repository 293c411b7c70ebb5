"""plugin/loop_stalls.py: the scheduler's output stalls, each long gap between two batch results kept with
where its time went. The hooks are driven as SGLang's overlap loop calls them (input, schedule, run this
batch, process the last batch's result), each call's time set by an injected clock; SGLang's own classes
run the same hooks in tests/sglang_plugin_checks/check_loop_stalls.py."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from spectower.plugin import loop_stalls

from tests.test_engine_counters import FakeClock as Clock

WALL = 1_796_417_829.25


def batch(mode: str, requests: int, tokens: int | None = None, *, copy: bool = False) -> SimpleNamespace:
    """A batch as the scheduler runs it, or (``copy``) as its result's copy carries it: per-request
    ``extend_lens`` and no ``extend_num_tokens`` (ScheduleBatch.copy in 0.5.17 and 0.5.23)."""
    out = SimpleNamespace(forward_mode=SimpleNamespace(name=mode), reqs=[object()] * requests)
    if tokens is not None:
        if copy:
            each = tokens // requests
            out.extend_lens = [each] * (requests - 1) + [tokens - each * (requests - 1)]
        else:
            out.extend_num_tokens = tokens
    return out


class Loop:
    """SGLang's overlap loop, one iteration at a time, through the plugin's four hooks."""

    def __init__(self, recorder: loop_stalls.LoopStalls, clock: Clock) -> None:
        self.recorder, self.clock = recorder, clock
        self.scheduler = SimpleNamespace(waiting_queue=[], running_batch=SimpleNamespace(reqs=[]))
        self.last: tuple[SimpleNamespace, float] | None = None  # the batch run last, its result's wait

    def _taking(self, seconds: float, answer: Any = None) -> Callable[..., Any]:
        def original(*_args: Any, **_kwargs: Any) -> Any:
            self.clock.now += seconds
            return answer

        return original

    def iteration(self, run: SimpleNamespace | None = None, *, run_s: float = 0.001, result_s: float = 0.008,
                  received: int = 0, waiting: int = 0, schedule_s: float = 0.0005) -> None:  # fmt: skip
        """One pass: receive ``received`` requests, schedule (``run`` or nothing, with ``waiting`` queued),
        launch ``run``, then process the last batch's result (its GPU time waited for: ``result_s``)."""
        s = self.scheduler
        loop_stalls.hook_process_input_requests(self._taking(0.0002), s, [object()] * received)
        s.waiting_queue = [object()] * waiting
        s.running_batch.reqs = list(run.reqs) if run is not None and run.forward_mode.name == "DECODE" else []
        plan = SimpleNamespace(batch_to_run=run, running_batch=s.running_batch)
        loop_stalls.hook_get_next_batch_to_run(self._taking(schedule_s, plan), s, running_batch=None,
                                               last_batch=None)  # fmt: skip
        previous = self.last
        if run is not None:
            loop_stalls.hook_run_batch(self._taking(run_s), s, run)
            copied = batch(run.forward_mode.name, len(run.reqs), getattr(run, "extend_num_tokens", None),
                           copy=True)  # fmt: skip
            self.last = (copied, result_s)
        else:
            self.last = None
        if previous is not None:
            done, wait = previous
            loop_stalls.hook_process_batch_result(self._taking(wait), s, done, SimpleNamespace())


@pytest.fixture
def loop(monkeypatch: pytest.MonkeyPatch) -> Loop:
    clock = Clock()
    recorder = loop_stalls.LoopStalls(threshold_s=0.25, clock=clock, wall=lambda: WALL)
    monkeypatch.setattr(loop_stalls, "_STALLS", recorder)
    return Loop(recorder, clock)


def test_steady_decode_has_gaps_but_no_stalls_and_every_phase_is_timed(loop: Loop) -> None:
    for _ in range(50):
        loop.iteration(batch("DECODE", 32))
    report = loop.recorder.report()
    assert report["stalls"] == 0 and report["recent"] == []
    assert report["gaps"] == 49  # the first result closes the gap opened by the first run
    assert {p: v["calls"] for p, v in report["phases"].items()} == {"input": 50, "schedule": 50, "run": 50,
                                                                    "result": 49}  # fmt: skip
    assert report["phases"]["result"]["seconds"] == pytest.approx(49 * 0.008)
    assert report["phases"]["result"]["longest_s"] == pytest.approx(0.008)


def test_a_long_prefill_waited_for_in_its_result_is_a_stall_named_by_its_batch(loop: Loop) -> None:
    for _ in range(5):
        loop.iteration(batch("DECODE", 32))
    loop.iteration(batch("EXTEND", 9, 31_004), received=9)  # its GPU time: waited for in the next result
    loop.last = (loop.last[0], 1.2) if loop.last else None
    for _ in range(3):
        loop.iteration(batch("DECODE", 41))
    report = loop.recorder.report()
    assert report["stalls"] == 1 and report["longest_stall_s"] == pytest.approx(1.2 + 0.0017, abs=1e-3)
    (stall,) = report["recent"]
    assert stall["at"] == WALL
    assert stall["phases"]["result"] == pytest.approx(1.2)
    top = stall["batches"][0]
    assert (top["mode"], top["requests"], top["tokens"]) == ("EXTEND", 9, 31_004)  # tokens from extend_lens
    assert top["result_s"] == pytest.approx(1.2)
    assert stall["other_s"] == pytest.approx(0.0, abs=1e-6)


def test_idle_time_is_no_stall_and_the_next_gap_starts_when_a_batch_runs(loop: Loop) -> None:
    for _ in range(3):
        loop.iteration(batch("DECODE", 4))
    loop.iteration(None)  # nothing to run, nothing waiting: idle (the last result is processed here)
    for _ in range(100):
        loop.clock.now += 0.05  # five quiet seconds
        loop.iteration(None)
    loop.iteration(batch("EXTEND", 1, 300), received=1)
    loop.iteration(batch("DECODE", 1))
    loop.iteration(batch("DECODE", 1))
    assert loop.recorder.report()["stalls"] == 0


def test_requests_waiting_while_nothing_runs_are_a_stall_of_the_rest(loop: Loop) -> None:
    loop.iteration(batch("DECODE", 8))
    loop.iteration(batch("DECODE", 8))
    loop.iteration(None, waiting=12)  # the last result processed; 12 queued, nothing schedulable
    for _ in range(40):
        loop.clock.now += 0.01
        loop.iteration(None, waiting=12)
    loop.iteration(batch("EXTEND", 12, 8_000))
    loop.iteration(batch("DECODE", 20))
    (stall,) = loop.recorder.report()["recent"]
    assert stall["waiting_max"] == 12
    assert stall["other_s"] == pytest.approx(0.4, abs=1e-6)
    assert stall["iterations"] == 42


def test_collections_inside_a_stall_are_counted_from_the_gc_recorder(loop: Loop) -> None:
    gc_total = [3.0]
    loop.recorder._gc_seconds = lambda: gc_total[0]
    loop.iteration(batch("DECODE", 16))
    loop.iteration(batch("DECODE", 16))

    def collect_then_decode(*_args: Any, **_kwargs: Any) -> None:
        loop.clock.now += 0.7
        gc_total[0] += 0.7

    loop.iteration(batch("DECODE", 16))
    loop_stalls.hook_process_input_requests(collect_then_decode, loop.scheduler, [])
    loop.iteration(batch("DECODE", 16))
    (stall,) = loop.recorder.report()["recent"]
    assert stall["gc_s"] == pytest.approx(0.7)
    assert stall["phases"]["input"] == pytest.approx(0.7 + 0.0002)


def test_the_newest_stalls_are_kept_and_a_failing_call_still_counts(loop: Loop) -> None:
    loop.iteration(batch("DECODE", 2))
    for _ in range(loop_stalls.KEPT + 4):
        loop.iteration(batch("DECODE", 2), result_s=0.3)
    report = loop.recorder.report()
    assert report["stalls"] == loop_stalls.KEPT + 3 and len(report["recent"]) == loop_stalls.KEPT

    def fails(*_args: Any, **_kwargs: Any) -> None:
        loop.clock.now += 0.5
        raise RuntimeError("CUDA error")

    with pytest.raises(RuntimeError, match="CUDA error"):
        loop_stalls.hook_process_batch_result(fails, loop.scheduler, batch("DECODE", 2), None)
    assert loop.recorder.report()["stalls"] == loop_stalls.KEPT + 4


def test_odd_batches_are_described_without_raising(loop: Loop) -> None:
    assert loop_stalls.describe_batch(None) == {"mode": "?", "requests": None, "tokens": None}
    odd = SimpleNamespace(forward_mode=SimpleNamespace(name="MIXED"), reqs=(1, 2), extend_lens="x")
    assert loop_stalls.describe_batch(odd) == {"mode": "MIXED", "requests": None, "tokens": None}
    loop_stalls.hook_run_batch(lambda *_a, **_k: None, loop.scheduler, odd)
    loop_stalls.hook_get_next_batch_to_run(lambda *_a, **_k: object(), object())  # no plan, no scheduler
    assert loop.recorder.report()["phases"]["schedule"]["calls"] == 1


@pytest.mark.parametrize(("raw", "expected"), [(None, 0.25), ("0.5", 0.5), ("soon", 0.25), ("0", 0.25),
                                               ("nan", 0.25), ("-1", 0.25)])  # fmt: skip
def test_the_threshold_comes_from_the_environment_when_valid(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, expected: float
) -> None:
    if raw is None:
        monkeypatch.delenv(loop_stalls.THRESHOLD_ENV, raising=False)
    else:
        monkeypatch.setenv(loop_stalls.THRESHOLD_ENV, raw)
    assert loop_stalls.LoopStalls.from_environment().threshold_s == expected


def test_switched_off_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv(loop_stalls.DISABLE_ENV, "0")
    monkeypatch.setattr(loop_stalls, "_HOOKED", False)
    loop_stalls.register()
    assert not loop_stalls.hooked()
    assert "off" in capsys.readouterr().err


class GenerateReqInput:  # named as SGLang's classes are: the recorder files a call by its requests' class
    pass


class GetInternalStateReq:
    pass


def test_input_is_split_by_what_each_call_took_in(loop: Loop) -> None:
    s, take = loop.scheduler, loop._taking
    loop_stalls.hook_process_input_requests(take(0.0001), s, [])
    loop_stalls.hook_process_input_requests(take(0.0001), s, [])
    loop_stalls.hook_process_input_requests(take(0.004), s, [GenerateReqInput(), GenerateReqInput()])
    loop_stalls.hook_process_input_requests(take(0.050), s, [GetInternalStateReq()])
    loop_stalls.hook_process_input_requests(take(0.003), s, [GenerateReqInput(), GetInternalStateReq()])
    kinds = loop.recorder.report()["input_kinds"]
    assert kinds["none"] == {"calls": 2, "seconds": pytest.approx(0.0002), "longest_s": pytest.approx(0.0001),
                             "requests": 0}  # fmt: skip
    assert kinds["GenerateReqInput"]["requests"] == 2
    assert kinds["GenerateReqInput"]["seconds"] == pytest.approx(0.004)
    assert kinds["GetInternalStateReq"]["longest_s"] == pytest.approx(0.050)
    assert kinds["mixed"]["calls"] == 1
    # every call is filed once: the kinds add up to the phase
    phase = loop.recorder.report()["phases"]["input"]
    assert sum(k["calls"] for k in kinds.values()) == phase["calls"] == 5
    assert sum(k["seconds"] for k in kinds.values()) == pytest.approx(phase["seconds"])


def test_input_kinds_past_the_ones_kept_apart_go_under_other(loop: Loop) -> None:
    s = loop.scheduler
    classes = [type(f"Req{i}", (), {}) for i in range(loop_stalls.INPUT_KINDS_KEPT + 5)]
    for cls in classes:
        loop_stalls.hook_process_input_requests(loop._taking(0.001), s, [cls()])
    kinds = loop.recorder.report()["input_kinds"]
    assert len(kinds) == loop_stalls.INPUT_KINDS_KEPT + 1
    assert kinds["other"]["calls"] == 5
    assert loop_stalls.input_kind(None) == "none" and loop_stalls.input_kind(42) == "other"


def test_batches_run_and_result_time_is_kept_by_forward_mode(loop: Loop) -> None:
    """Plugin 0.4.11: a prefill's GPU time (waited for in its result) is apart from the decode steps'."""
    for _ in range(10):
        loop.iteration(batch("DECODE", 32), result_s=0.008)
    loop.iteration(batch("EXTEND", 3, 6000), result_s=0.3)
    loop.iteration(batch("DECODE", 35), result_s=0.008)
    loop.iteration(None)  # the last decode's result
    modes = loop.recorder.report()["batch_modes"]
    assert modes["DECODE"]["runs"] == 11 and modes["DECODE"]["results"] == 11
    assert modes["DECODE"]["tokens"] == 0
    # the extend's GPU time is waited for in its own result's processing, as the overlap loop does
    assert modes["EXTEND"] == {"runs": 1, "run_s": pytest.approx(0.001), "results": 1,
                               "result_s": pytest.approx(0.3), "tokens": 6000}  # fmt: skip
    assert modes["DECODE"]["result_s"] == pytest.approx(11 * 0.008)
    phases = loop.recorder.report()["phases"]
    assert sum(m["result_s"] for m in modes.values()) == pytest.approx(phases["result"]["seconds"])
    assert sum(m["runs"] for m in modes.values()) == phases["run"]["calls"]
