"""The loop-stall recorder (plugin/loop_stalls.py) through SGLang's real classes: SGLang's load_plugins()
discovers its entry point and its HookRegistry wraps the scheduler's four loop methods; the loop below calls
them as ``Scheduler.event_loop_overlap`` does (positional and keyword arguments alike) with SGLang's own
``ScheduleBatch`` (its ``copy()`` for the result, as the loop queues it), ``NextBatchPlan`` and
``ForwardMode``; the real ``get_internal_state`` publishes the recorder's block. Then SGLang's own launcher
gather (``TokenizerControlMixin.get_internal_state``, wrapped by the same registry) carries that state out
with the launcher's block added (plugin/launcher_state.py).

CONSTRUCTED: the four methods' bodies. Theirs need a GPU and a model, so before load_plugins() each is
replaced by a stand-in that only advances a fake clock by the time the call is to take; the hooks wrap the
stand-ins as they would wrap SGLang's own. The launcher's tokenizer manager: its gather's body is SGLang's,
the object it runs on a stand-in whose communicator answers with the scheduler's real state (a
TokenizerManager needs a tokenizer and ZMQ sockets).

Argument: the adaptive config path. Prints one JSON object.
"""

from __future__ import annotations

import sys

import _harness


def main() -> None:
    from sglang.srt.managers.io_struct import GetInternalStateReq
    from sglang.srt.managers.schedule_batch import NextBatchPlan, ScheduleBatch
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    clock = _harness.FakeClock()
    takes = {"input": 0.0002, "schedule": 0.0005, "run": 0.001, "result": 0.008}

    def stand_in(phase: str):  # type: ignore[no-untyped-def]
        def method(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            clock.now += takes[phase]
            if phase == "schedule":
                return NextBatchPlan(batch_to_run=self._next_batch, running_batch=kwargs["running_batch"])
            return None

        return method

    for phase, method_name in (("input", "process_input_requests"), ("schedule", "get_next_batch_to_run"),
                               ("run", "run_batch"), ("result", "process_batch_result")):  # fmt: skip
        setattr(Scheduler, method_name, stand_in(phase))
    plugin, scheduler = _harness.start_scheduler(sys.argv[1])
    loop_stalls = sys.modules.get("spectower.plugin.loop_stalls")
    out: dict = {"plugin_loaded": plugin is not None, "loop_plugin_loaded": loop_stalls is not None}
    if loop_stalls is None:
        _harness.emit(out)
        return
    out["hooked"] = loop_stalls.hooked()
    out["wrapped"] = {name: getattr(getattr(Scheduler, name), "__wrapped__", None) is not None
                      for name in loop_stalls.PHASES.values()}  # fmt: skip
    loop_stalls.stalls()._clock = clock
    decode = ScheduleBatch(reqs=[object()] * 24, forward_mode=ForwardMode.DECODE)
    extend = ScheduleBatch(reqs=[object()] * 3, forward_mode=ForwardMode.EXTEND,
                           extend_lens=[1000, 2000, 3000], extend_num_tokens=6000)  # fmt: skip
    scheduler.running_batch = ScheduleBatch(reqs=[])
    scheduler.waiting_queue = []
    queue: list = []
    # Ten decode iterations, an extend whose GPU time (1.5 s) is waited for in its result, five decodes.
    for batch, result_s in [(decode, 0.008)] * 10 + [(extend, 1.5)] + [(decode, 0.008)] * 5:
        scheduler._next_batch = batch
        # the extend's turn takes in SGLang's own control request (its class names the input's kind)
        scheduler.process_input_requests([GetInternalStateReq()] * (3 if batch is extend else 0))
        plan = scheduler.get_next_batch_to_run(running_batch=scheduler.running_batch, last_batch=None)
        scheduler.run_batch(plan.batch_to_run)
        queue.append((plan.batch_to_run.copy(), object(), result_s))
        if len(queue) > 1:
            done, result, wait = queue.pop(0)
            takes["result"] = wait
            scheduler.process_batch_result(done, result)
    state = _harness.get_state(scheduler)
    out["loop"] = state["spectower"].get("loop")
    out["freeze"] = _through_the_freeze(scheduler)
    out["launcher"] = _through_the_launcher(state)
    _harness.emit(out)


def _through_the_freeze(scheduler: object) -> dict:
    """SGLang's own ``Scheduler.handle_freeze_gc`` (wrapped by the registry) freezes this process; the gc
    block's ``frozen`` is counted again after it, not on every read (a count walks every frozen object)."""
    import gc
    import types

    from sglang.srt.managers.io_struct import FreezeGCReq
    from sglang.srt.managers.scheduler import Scheduler

    # where SGLang forwards the freeze to its detokenizer: a socket in a server, nothing here
    scheduler.ipc_channels = types.SimpleNamespace(  # type: ignore[attr-defined]
        send_to_detokenizer=types.SimpleNamespace(send_output=lambda *args: None))
    def frozen() -> int:
        return _harness.get_state(scheduler)["spectower"]["gc"]["frozen"]

    wrapped = getattr(Scheduler.handle_freeze_gc, "__wrapped__", None) is not None
    out = {"wrapped": wrapped, "before": frozen()}
    scheduler.handle_freeze_gc(FreezeGCReq())  # type: ignore[attr-defined]
    out["after"] = frozen()
    kept = [[i] for i in range(50_000)]  # new objects, frozen past the hook: the count stands
    gc.freeze()
    out["unhooked"] = frozen()
    scheduler.handle_freeze_gc(FreezeGCReq())  # type: ignore[attr-defined]
    out["again"] = frozen()
    out["actual"] = gc.get_freeze_count()
    gc.unfreeze()
    del kept
    return out


def _through_the_launcher(state: dict) -> dict:
    """The scheduler's state as SGLang's launcher gathers it for /server_info, the plugin's hook included."""
    import asyncio
    import gc
    import types

    from sglang.srt.managers.io_struct import GetInternalStateReqOutput
    from sglang.srt.managers.tokenizer_control_mixin import TokenizerControlMixin
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    async def communicator(req):  # type: ignore[no-untyped-def]
        return [GetInternalStateReqOutput(internal_state=state)]

    sent: list = []  # the freeze SGLang's launcher sends its scheduler first
    manager = types.SimpleNamespace(auto_create_handle_loop=lambda: None,
                                    get_internal_state_communicator=communicator,
                                    _dispatch_to_scheduler=sent.append)  # fmt: skip
    gather = TokenizerControlMixin.get_internal_state
    asyncio.run(gather(manager))  # the first gather installs the launcher's collection timer
    gc.collect()
    # SGLang's own /freeze_gc in the launcher (wrapped: the frozen objects are counted again after it)
    asyncio.run(TokenizerManager.freeze_gc(manager))
    (gathered,) = asyncio.run(gather(manager))
    frozen_now = gc.get_freeze_count()
    gc.unfreeze()
    return {"wrapped": getattr(gather, "__wrapped__", None) is not None,
            "freeze_wrapped": getattr(TokenizerManager.freeze_gc, "__wrapped__", None) is not None,
            "sent": [type(req).__name__ for req in sent], "frozen_now": frozen_now,
            "block": gathered.get("spectower", {}).get("launcher")}  # fmt: skip


if __name__ == "__main__":
    main()
