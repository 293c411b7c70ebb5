"""CPU cost per decode step of the decode counters (plugin/engine_counters.py) as the SGLang plugin runs
them: ``begin`` in the get_steps_for_batch hook and ``end`` in the on_verify_complete hook (the real
``time.perf_counter`` clock, a verify result of ``--batch`` requests), and the simulator's ``record``.

    python3 benchmarks/counter_overhead.py [--batch 32] [--steps 200000] [--step-ms 5.6]

Prints ns per step for each, the same for the plugin's two hooks end to end (the gate included, SGLang's
methods replaced by trivial ones) and for the loop-stall plugin's four hooks per scheduler iteration, and
the share of a decode step of ``--step-ms`` (an H200 decode step is about 5.6 ms), and the gated-decode
plugin's scheduler hook (plugin 0.4.10: it counts who decodes beside a prefill) on a decode turn and on a
prefill turn beside ``--batch`` running requests, and the knob plugin's (plugin 0.4.12: it notes the requests
left waiting) on every turn. Nothing here is asserted: the unit tests never time
anything.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace

from spectower.plugin import engine_counters, gated_decode, kept_tokens, knob_gate, loop_stalls, stall_watch


def per_step_ns(fn: Callable[[int], None], steps: int) -> float:
    best = float("inf")
    for _ in range(5):  # best of 5: the least disturbed run
        start = time.perf_counter_ns()
        fn(steps)
        best = min(best, (time.perf_counter_ns() - start) / steps)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="requests per decode batch")
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--step-ms", type=float, default=5.6, help="decode step to compare with (H200)")
    args = parser.parse_args()
    batch = args.batch
    accepts = [2] * batch

    def empty_loop(n: int) -> None:
        for _ in range(n):
            pass

    def counters_begin_end(n: int) -> None:
        c = engine_counters.EngineCounters(64)
        for i in range(n):
            c.begin(batch, i & 1 == 0)
            c.end(batch, accepts)

    def counters_record(n: int) -> None:
        c = engine_counters.EngineCounters(64)
        for i in range(n):
            c.record(batch, i & 1 == 0, 3 * batch, 0.0056)

    class Params:
        candidate_steps = (0, 3)

    params = Params()
    knob_gate._STATE = None
    state = knob_gate._state()
    state.refusal, state.refusal_checked = None, True  # as on a server the plugin accepted
    state.gate.set_ceiling(batch)  # drafting: the gate's path for every batch

    def original_steps(_params: object, _bs: int) -> int:
        return 3

    def original_verify(_params: object, _num: list[int], _bs: int) -> None:
        return None

    def hooks(n: int) -> None:
        steps_hook, verify_hook = (
            knob_gate.hook_get_steps_for_batch,
            knob_gate.hook_on_verify_complete,
        )
        for _ in range(n):
            steps_hook(original_steps, params, batch)
            verify_hook(original_verify, params, accepts, batch)

    class NoCounters(engine_counters.EngineCounters):
        def begin(self, batch_size: int, drafted: bool, settling: bool = False) -> None:
            pass

        def end(self, batch_size: int, num_correct_drafts_per_req: Sequence[int]) -> None:
            pass

    def hooks_without_counters(n: int) -> None:
        saved = state.counters
        state.counters = NoCounters(64)
        try:
            hooks(n)
        finally:
            state.counters = saved

    # the loop-stall hooks (plugin 0.4.7): the scheduler loop's four calls once per iteration, as the overlap
    # loop makes them; SGLang's methods replaced by trivial ones
    running = SimpleNamespace(reqs=[object()] * batch)
    decode = SimpleNamespace(forward_mode=SimpleNamespace(name="DECODE"), reqs=running.reqs)
    scheduler = SimpleNamespace(waiting_queue=[], running_batch=running)
    plan = SimpleNamespace(batch_to_run=decode, running_batch=running)

    def answer_plan(*_args: object, **_kwargs: object) -> object:
        return plan

    def nothing(*_args: object, **_kwargs: object) -> None:
        return None

    def loop_hooks(n: int) -> None:
        for _ in range(n):
            loop_stalls.hook_process_input_requests(nothing, scheduler, [])
            loop_stalls.hook_get_next_batch_to_run(answer_plan, scheduler, running_batch=running,
                                                   last_batch=None)  # fmt: skip
            loop_stalls.hook_run_batch(nothing, scheduler, decode)
            loop_stalls.hook_process_batch_result(nothing, scheduler, decode, None)

    def loop_hooks_watched(n: int) -> None:
        # the same, with the watch thread (plugin/stall_watch.py) waking every POLL_S beside them
        watch = stall_watch.StallWatch(loop_stalls.stalls(), threading.get_ident())
        watch.start()
        try:
            loop_hooks(n)
        finally:
            watch.stop()

    # the gated-decode plugin's scheduler hook (plugin 0.4.10): every loop turn; a prefill's counts the
    # requests decoding beside it (SGLang's Req.finished() is a method)
    def req() -> SimpleNamespace:
        return SimpleNamespace(finished=lambda: False)

    beside = SimpleNamespace(reqs=[req() for _ in range(batch)])
    decode_mode = SimpleNamespace(is_extend=lambda: False)
    prefill_mode = SimpleNamespace(is_extend=lambda: True)
    decode_batch = SimpleNamespace(forward_mode=decode_mode)
    decode_plan = SimpleNamespace(batch_to_run=decode_batch, running_batch=beside)
    prefill_batch = SimpleNamespace(forward_mode=prefill_mode, reqs=[req()])
    prefill_plan = SimpleNamespace(batch_to_run=prefill_batch, running_batch=beside)

    def scheduler_hook(plan_now: object) -> Callable[[int], None]:
        def answer(*_args: object, **_kwargs: object) -> object:
            return plan_now

        def turns(n: int) -> None:
            for _ in range(n):
                gated_decode.hook_get_next_batch_to_run(answer, scheduler, running_batch=beside,
                                                        last_batch=None)  # fmt: skip

        return turns

    # the knob plugin's scheduler hook (plugin 0.4.12): every loop turn, it notes the requests left waiting
    def waiting_hook(n: int) -> None:
        for _ in range(n):
            knob_gate.hook_get_next_batch_to_run(answer_plan, scheduler, running_batch=running,
                                                 last_batch=None)  # fmt: skip

    # the kept-tokens plugin's hook (plugin 0.4.13): every decode result, it reads each request's output
    # length and finish before and after SGLang's body (here nothing: its own cost alone)
    def decode_req() -> SimpleNamespace:
        return SimpleNamespace(output_ids=[7] * 200, finished=lambda: False, is_retracted=False,
                               finished_len=None)  # fmt: skip

    decoded = SimpleNamespace(reqs=[decode_req() for _ in range(batch)])

    def kept_hook(n: int) -> None:
        for _ in range(n):
            kept_tokens.hook_process_batch_result_decode(nothing, None, decoded, None)

    base = per_step_ns(empty_loop, args.steps)
    step_ns = args.step_ms * 1e6
    rows = [
        ("counters begin+end (plugin)", per_step_ns(counters_begin_end, args.steps) - base),
        ("counters record (simulator)", per_step_ns(counters_record, args.steps) - base),
        ("plugin hooks with counters", per_step_ns(hooks, args.steps) - base),
        ("plugin hooks without counters", per_step_ns(hooks_without_counters, args.steps) - base),
        ("loop-stall hooks (per iteration)", per_step_ns(loop_hooks, args.steps) - base),
        ("the same, watch thread on", per_step_ns(loop_hooks_watched, args.steps) - base),
        ("scheduler hook, a decode turn", per_step_ns(scheduler_hook(decode_plan), args.steps) - base),
        ("scheduler hook, a prefill turn", per_step_ns(scheduler_hook(prefill_plan), args.steps) - base),
        ("knob's waiting-queue hook", per_step_ns(waiting_hook, args.steps) - base),
        ("kept-tokens hook, a decode result", per_step_ns(kept_hook, args.steps) - base),
    ]
    print(f"batch {batch}, {args.steps} steps, best of 5, loop overhead subtracted; step {args.step_ms} ms")
    for name, ns in rows:
        print(f"{name:32s} {ns:9.0f} ns/step  {100 * ns / step_ns:.4f} % of a decode step")
    added = rows[2][1] - rows[3][1]
    share = 100 * added / step_ns
    print(f"{'counting added to the hooks':32s} {added:9.0f} ns/step  {share:.4f} % of a decode step")


if __name__ == "__main__":
    main()
