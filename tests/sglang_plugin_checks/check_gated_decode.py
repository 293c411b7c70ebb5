"""The gated-decode plugin (spectower.plugin.gated_decode) through SGLang's real load_plugins():
a one-token TARGET_VERIFY on the 0-step backend is planned and run as DECODE; everything else passes.

Real: load_plugins() and entry-point discovery, HookRegistry, ``TritonAttnBackend`` (the class whose
methods are hooked), ``ForwardMode``, ``ForwardBatch``, ``EagleVerifyInput``. Constructed: the backend and
batch objects (``object.__new__`` plus the attributes the hooks read), and the four method BODIES, which
plan and launch GPU kernels: they are replaced by recorders before the plugin loads, so the hooks wrap them
exactly as they would wrap SGLang's. Run with ``SPECTOWER_GATED_DECODE=0`` it shows the off switch.

Also the draft-extend width per adaptive state: SGLang's own ``resolve_num_tokens_per_req``, as bound in
its real draft-extend CUDA-graph runner module, asked for the draft-extend width with the launch arguments
(4 draft tokens) published and then with the 0-step state's width (1) overridden in the runtime context
the way ``EAGLEWorkerV2._override_worker_state`` does while it captures that state's graphs.
Prints one JSON object.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import _harness

CALLS: list[dict[str, Any]] = []


def _seen(name: str, forward_batch: Any, **extra: Any) -> dict[str, Any]:
    return {
        "method": name,
        "mode": forward_batch.forward_mode.name,
        "seq_lens": forward_batch.seq_lens.tolist(),
        "seq_lens_sum": forward_batch.seq_lens_sum,
        "seq_lens_cpu": forward_batch.seq_lens_cpu.tolist(),
        "spec_info": type(forward_batch.spec_info).__name__ if forward_batch.spec_info is not None else None,
        **extra,
    }


def install_recorders(cls: Any) -> None:
    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        CALLS.append(_seen("init_forward_metadata", forward_batch))

    def init_forward_metadata_out_graph(self: Any, forward_batch: Any, in_capture: bool = False) -> None:
        CALLS.append(_seen("init_forward_metadata_out_graph", forward_batch, in_capture=in_capture))

    def forward_extend(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                       save_kv_cache: bool = True, **kwargs: Any) -> str:  # fmt: skip
        CALLS.append(_seen("forward_extend", forward_batch, save_kv_cache=save_kv_cache))
        return "extend"

    def forward_decode(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                       save_kv_cache: bool = True, **kwargs: Any) -> str:  # fmt: skip
        CALLS.append(_seen("forward_decode", forward_batch, save_kv_cache=save_kv_cache))
        return "decode"

    for fn in (init_forward_metadata, init_forward_metadata_out_graph, forward_extend, forward_decode):
        setattr(cls, fn.__name__, fn)


def main() -> None:
    import torch
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    install_recorders(TritonAttnBackend)
    install_worker_recorders()
    knob = _harness.load_plugin()
    targets = {
        name: [src.plugin_name if src else None for _ht, _h, src in
               HookRegistry._hooks.get(f"{TritonAttnBackend.__module__}.TritonAttnBackend.{name}", [])]
        for name in ("init_forward_metadata", "init_forward_metadata_out_graph", "forward_extend")
    }  # fmt: skip

    def backend(draft_tokens: int) -> Any:
        b = object.__new__(TritonAttnBackend)
        b.num_draft_tokens = draft_tokens
        return b

    def batch(mode: Any, draft_tokens: int = 1) -> Any:
        fb = object.__new__(ForwardBatch)
        fb.forward_mode = mode
        fb.seq_lens = torch.tensor([5, 9])
        fb.seq_lens_sum = 14
        fb.seq_lens_cpu = torch.tensor([5, 9])
        verify = object.__new__(EagleVerifyInput)
        verify.draft_token_num = draft_tokens
        fb.spec_info = verify if mode == ForwardMode.TARGET_VERIFY else None
        return fb

    def run(b: Any, fb: Any) -> dict[str, Any]:
        CALLS.clear()
        b.init_forward_metadata(fb)
        b.init_forward_metadata_out_graph(fb, in_capture=True)
        out = b.forward_extend("q", "k", "v", "layer", fb, False)
        return {"calls": list(CALLS), "returned": out, "batch_after": _seen("caller", fb)}

    cases = {
        "gated_verify": run(backend(1), batch(ForwardMode.TARGET_VERIFY, 1)),
        "drafting_verify": run(backend(4), batch(ForwardMode.TARGET_VERIFY, 4)),
        "draft_extend_on_gated_backend": run(backend(1), batch(ForwardMode.DRAFT_EXTEND_V2)),
        "prefill_on_gated_backend": run(backend(1), batch(ForwardMode.EXTEND)),
    }
    result: dict[str, Any] = {"targets": targets, "cases": cases, "draft_extend_width": draft_extend_width()}
    if len(sys.argv) > 1 and "spectower.plugin.gated_decode" in sys.modules:
        result["extend_skip"] = extend_skip(sys.argv[1], knob)
    _harness.emit(result)


def draft_extend_width() -> dict[str, Any]:
    import inspect

    from sglang.srt.runtime_context import get_context
    from sglang.srt.speculative import eagle_draft_extend_cuda_graph_runner as runner_module

    server_args = _harness.publish_context(None)  # launch: 3 steps, 4 draft tokens
    resolve = runner_module.resolve_num_tokens_per_req
    kwargs: dict[str, Any] = {"phase": "draft_extend"}
    if "server_args" in inspect.signature(resolve).parameters:
        kwargs["server_args"] = server_args
    launch = resolve(**kwargs)
    context = get_context()
    zero = {"speculative_num_steps": 0, "speculative_num_draft_tokens": 1}
    context.override("adaptive_spec.capture_override", **zero)
    try:
        zero_step = resolve(**kwargs)
    finally:
        launch_state = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
        context.override("adaptive_spec.capture_restore", **launch_state)
    return {"launch": launch, "zero_step_state": zero_step, "reads_server_args": "server_args" in kwargs}


def install_worker_recorders() -> None:
    """Replace the GPU-bound bodies of a decode step with recorders before the plugins load: the hooks wrap
    them as they wrap SGLang's. ``forward_batch_generation`` keeps SGLang's decode order (activate the
    steps, verify, then the draft extend or, where SGLang's own flag says so, its stub)."""
    import torch
    from sglang.srt.environ import envs
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    def forward_batch_generation(self: Any, batch: Any, on_publish: Any = None, grammar_barrier: Any = None,
                                 **kwargs: Any) -> Any:  # fmt: skip
        if batch.forward_mode.is_extend():  # the target's prefill, then the draft's over the same prompts
            next_tokens = torch.arange(len(batch.reqs))
            drafted = self.draft_worker._draft_extend_for_prefill(batch, "hidden states", next_tokens, None)
            return types.SimpleNamespace(next_draft_input=drafted, next_token_ids=next_tokens)
        self.activate_step_by_batch(batch.seq_lens.shape[0])
        result = types.SimpleNamespace(steps=self.speculative_num_steps)
        if self.speculative_num_steps == 0 and envs.SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND.get():
            self._stub_skipped_draft_extend(batch, result)
        else:
            self.draft_worker._draft_extend_for_decode(batch, result)
        return result

    def stub(self: Any, batch: Any, batch_output: Any) -> None:
        batch_output.extend = "stub"
        if hasattr(batch_output, "next_draft_input"):  # a prefill's: SGLang's stub fills its draft outputs
            batch_output.next_draft_input.topk_p = "zeros"

    def draft_extend(self: Any, batch: Any, batch_result: Any, **kwargs: Any) -> None:
        batch_result.extend = "ran"

    def draft_prefill(self: Any, batch: Any, hidden_states: Any, next_token_ids: Any, *args: Any,
                      **kwargs: Any) -> Any:  # fmt: skip
        return types.SimpleNamespace(extend="ran")

    def next_batch(self: Any, running_batch: Any = None, last_batch: Any = None, **kwargs: Any) -> Any:
        # the scheduler's choice, made by the check (``_next_batch``), in SGLang's own NextBatchPlan
        from sglang.srt.managers.schedule_batch import NextBatchPlan

        return NextBatchPlan(batch_to_run=self._next_batch, running_batch=running_batch)

    from sglang.srt.managers.scheduler import Scheduler

    Scheduler.get_next_batch_to_run = next_batch  # type: ignore[method-assign]
    EAGLEWorkerV2.forward_batch_generation = forward_batch_generation  # type: ignore[method-assign]
    EAGLEWorkerV2._stub_skipped_draft_extend = stub  # type: ignore[method-assign]
    EagleDraftWorker._draft_extend_for_decode = draft_extend  # type: ignore[method-assign]
    EagleDraftWorker._draft_extend_for_prefill = draft_prefill  # type: ignore[method-assign]
    EagleDraftWorker._rebuild_topk1_chain_buffers = lambda self: None  # type: ignore[method-assign]


def extend_skip(config_path: str, knob: Any) -> dict[str, Any]:
    """Knob at 0 skips the draft extend; raised again, the requests that missed extends drain at 0 steps
    (with the extend) before the batch drafts; a partial ceiling's gated batches skip too, exploring ones
    only in a window's cold part (SPECTOWER_EXPLORE_CYCLE), an operator's lock always. The real
    AdaptiveController, AdaptiveSpeculativeParams (hooked by the knob plugin's gate) and
    EAGLEWorkerV2.apply_runtime_state."""
    import torch
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    scheduler, worker = _harness.make_decode_worker(config_path)

    def batch(rids: list[str]) -> Any:
        b = object.__new__(ScheduleBatch)
        b.forward_mode = ForwardMode.DECODE
        b.is_extend_in_batch = False
        b.seq_lens = torch.full((len(rids),), 10)
        b.reqs = [types.SimpleNamespace(rid=rid) for rid in rids]
        return b

    trace = []
    gated_decode = sys.modules["spectower.plugin.gated_decode"]

    def window_part() -> str | None:
        """The exploration window's part the last batch ran in (the knob plugin's gate; None: no window)."""
        return knob.gate_state().explorer.phase_now  # type: ignore[no-any-return]

    def prefill(phase: str, rids: list[str], running: tuple[str, ...] = ()) -> dict[str, Any]:
        """A prefill batch the scheduler chose beside ``running`` decoding requests (its hooked
        get_next_batch_to_run, a finished one among them): the draft's extend over its prompts ran, or
        SGLang's stub filled its outputs."""
        from sglang.srt.speculative.eagle_info import EagleDraftInput

        b = batch(rids)
        b.forward_mode = ForwardMode.EXTEND
        beside = batch([*running, "finished"])
        beside.reqs[-1].finished = lambda: True
        scheduler._next_batch = b
        scheduler.get_next_batch_to_run(running_batch=beside, last_batch=None)
        out = worker.forward_batch_generation(b)
        drafted = out.next_draft_input
        stubbed = isinstance(drafted, EagleDraftInput)
        return {"phase": phase, "extend": "stub" if stubbed else drafted.extend,
                "bonus_is_next_tokens": stubbed and drafted.bonus_tokens is out.next_token_ids,
                "per_req": [drafted.num_tokens_per_req, drafted.topk_p] if stubbed else None,
                "holed": sorted(gated_decode.extend_skip().holed)}  # fmt: skip

    # the gate's clock moves 10 ms a decode batch (the windows' parts are in seconds too): the same batches
    # every run, whatever this machine's speed
    clock = {"now": 1000.0}
    knob.gate_state().clock = lambda: clock["now"]

    def run(phase: str, rids: list[str]) -> None:
        clock["now"] += 0.010
        out = worker.forward_batch_generation(batch(rids))
        # the verify result, as SGLang's batch-result processor reports it (drafts all right, or none)
        worker.on_verify_complete_cpu([3 if out.steps > 0 else 0] * len(rids), batch_size=len(rids))
        trace.append({"phase": phase, "rids": rids, "steps": out.steps, "extend": out.extend,
                      "holed": sorted(gated_decode.extend_skip().holed)})  # fmt: skip

    def run_in_window(rids: list[str]) -> None:
        run("policy's off after the release", rids)
        trace[-1]["phase"] += f", {window_part()}"

    _harness.set_state(scheduler, {"spectower_spec_max_bs": 48})
    run("on", ["a", "b"])
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    run("off", ["a", "b"])
    run("off", ["a", "b", "c"])
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 48})
    ema_before = _slots(worker)
    run("drain", ["a", "b", "c", "d"])
    run("drain", ["b", "c", "d"])
    ema_after = _slots(worker)
    run("drafting again", ["d", "e"])
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 1})
    run("partial ceiling", ["d", "e", "f"])
    # a policy's 0 (free knob, a share > 0) explores in windows (SPECTOWER_EXPLORE_CYCLE=16: 15 cold batches
    # skip the extend; the warm part runs it until the holed requests have finished; one exploring batch,
    # drafting)
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    _harness.set_state(scheduler, {"spectower_explore_share": 0.02})
    for _ in range(15):
        run("policy's off, cold", ["g", "h"])
    run("policy's off, warm", ["g", "h"])
    run("policy's off, window", ["i", "j"])
    run("policy's off, cold again", ["i", "j"])
    # an operator's off (a manual write locks the knob) pauses exploration: the extend is skipped again
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0, "spectower_writer": 1})
    run("off, held by an operator", ["g", "h"])
    prefills = [prefill("operator's off", ["p", "q"])]
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 48, "spectower_writer": 1})
    prefills.append(prefill("operator's on", ["r"]))
    # released at 0: a policy's 0 set just now keeps the draft's prefill (no batch gated by it yet); after a
    # gated batch in its window's cold part a prefill skips it (plugin 0.4.10), in the warm part it runs
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0, "spectower_writer": 1, "spectower_release": 1})
    prefills.append(prefill("policy's off", ["s"]))
    run_in_window(["s", "t"])
    prefills.append(prefill(f"policy's off, {window_part()}", ["u"]))
    while window_part() == "cold":
        run_in_window(["s", "t", "u"])
    prefills.append(prefill(f"policy's off, {window_part()}", ["v"]))
    # a policy's ceiling of 4 with nothing exploring, 3 requests drafting: a prompt that keeps the next batch
    # at 4 runs the draft's prefill, two that take it to 5 (gated) skip it
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 4, "spectower_explore_share": 0})
    run("policy's 4, drafting", ["w", "x", "y"])
    prefills.append(prefill("policy's 4, the next batch drafts", ["z"], ("w", "x", "y")))
    prefills.append(prefill("policy's 4, the next batch gated", ["z1", "z2"], ("w", "x", "y")))
    counters = knob.engine_counters_state().snapshot()
    published = _harness.get_state(scheduler).get("spectower", {}).get("gated_decode")
    return {"trace": trace, "report": gated_decode.extend_skip().report(), "counters": counters,
            "published": published, "ema_around_drain": [ema_before, ema_after],
            "prefills": prefills}  # fmt: skip


def _slots(worker: Any) -> dict[str, list[float]]:
    """SGLang's own adaptive slots per batch size: [current steps, acceptance EMA, verifies counted]."""
    params = worker.adaptive_controller.params
    return {str(bs): [slot.current_steps, slot.ema_accept_len, slot._batch_count]
            for bs, slot in params._slots.items()}  # fmt: skip


if __name__ == "__main__":
    main()
