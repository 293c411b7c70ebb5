"""The seq-lens mirror (spectower.plugin.seq_lens_mirror) through SGLang's real load_plugins(): a flashinfer
server's gated batches resolve their host lengths without SGLang's host copy, and every length equals what
SGLang's own copy gives.

Real: load_plugins() and entry-point discovery, HookRegistry, SGLang's ``FutureMap`` (its ``publish`` and
``resolve_seq_lens_cpu``, on CPU tensors: the CPU build has no private copy stream, so SGLang's host path
there is its plain ``.cpu()``; the device-only branch the mirror takes is the same one CUDA runs), the knob
plugin's gate on the real ``AdaptiveSpeculativeParams``, ``AdaptiveController`` and
``EAGLEWorkerV2.apply_runtime_state`` (as in check_gated_decode.py). Constructed: the decode step's GPU body
(``forward_batch_generation`` in SGLang's order: activate the steps, verify, publish the new lengths), the
``ScheduleBatch`` objects, and the scheduler loop (resolve, then forward, as ``Scheduler.run_batch`` does).

argv: the adaptive config. Prints one JSON object: a trace of every resolve (who answered, the lengths and
what SGLang's own copy says), the mirror's report, and a triton-like map's (no host lengths) untouched run.
"""

from __future__ import annotations

import sys
import types
from functools import partial
from typing import Any

import _harness

ACCEPTED_WHILE_DRAFTING = 3  # each request's accepted tokens (drafts and bonus) in a drafting step


def install_worker_body() -> None:
    """The decode step without a GPU: activate the steps (hooked by the plugins), then a verify whose new
    lengths are the batch's plus one (0 steps: the bonus token) or plus ``ACCEPTED_WHILE_DRAFTING``,
    published the way SGLang's verify does (``on_publish(new_seq_lens)``); a prefill publishes its own
    lengths, SGLang's spec-v2 convention (``new_seq_lens = batch.seq_lens`` in 0.5.17 and 0.5.23)."""
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker, EAGLEWorkerV2

    def forward_batch_generation(self: Any, batch: Any, on_publish: Any = None, grammar_barrier: Any = None,
                                 **kwargs: Any) -> Any:  # fmt: skip
        if batch.forward_mode.is_extend():
            on_publish(batch.seq_lens.clone())
            return types.SimpleNamespace(steps=None)
        self.activate_step_by_batch(batch.seq_lens.shape[0])
        grown = 1 if self.speculative_num_steps == 0 else ACCEPTED_WHILE_DRAFTING
        on_publish(batch.seq_lens + grown)
        return types.SimpleNamespace(steps=self.speculative_num_steps)

    EAGLEWorkerV2.forward_batch_generation = forward_batch_generation  # type: ignore[method-assign]
    EagleDraftWorker._rebuild_topk1_chain_buffers = lambda self: None  # type: ignore[method-assign]


def main() -> None:
    import torch
    from sglang.srt.managers.overlap_utils import FutureMap
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    install_worker_body()
    _harness.load_plugin()
    mirror_module = sys.modules["spectower.plugin.seq_lens_mirror"]
    scheduler, worker = _harness.make_decode_worker(sys.argv[1])

    pool = types.SimpleNamespace(req_to_token=torch.zeros((16, 64), dtype=torch.int32))
    eagle = SpeculativeAlgorithm.from_string("EAGLE3")
    slots: dict[str, int] = {}
    truth: dict[str, int] = {}  # every request's length, as the steps above grow it
    requests: dict[str, Any] = {}  # one object per request, as SGLang keeps its Req through the batches

    class Request:  # SGLang's Req defines no __eq__ / __hash__: identity, like this
        def __init__(self, rid: str) -> None:
            self.rid = rid

    def batch(rids: list[str], mode: Any) -> Any:
        for rid in rids:
            slots.setdefault(rid, len(slots) + 1)
        b = object.__new__(ScheduleBatch)
        b.forward_mode = mode
        b.is_extend_in_batch = False
        b.reqs = [requests.setdefault(rid, Request(rid)) for rid in rids]
        b.req_pool_indices_cpu = torch.tensor([slots[rid] for rid in rids], dtype=torch.int64)
        b.req_pool_indices = b.req_pool_indices_cpu.clone()
        decode = not mode.is_extend()
        b.spec_info = types.SimpleNamespace(future_indices=b.req_pool_indices) if decode else None
        b.seq_lens = torch.tensor([truth[rid] for rid in rids]) if mode.is_extend() else None
        b.seq_lens_cpu = b.seq_lens.clone() if mode.is_extend() else None  # prepare_for_extend's host copy
        return b

    def step(future_map: Any, phase: str, rids: list[str], prompts: dict[str, int] | None = None
             ) -> dict[str, Any]:  # fmt: skip
        """One iteration of the scheduler's loop: resolve the batch's lengths, then run it."""
        state = mirror_module.mirror()
        before = (state.hits, state.syncs)
        if prompts:
            truth.update(prompts)
        b = batch(rids, ForwardMode.EXTEND if prompts else ForwardMode.DECODE)
        future_map.resolve_seq_lens_cpu(b)
        row: dict[str, Any] = {"phase": phase, "rids": rids}
        if not prompts:
            answered = "mirror" if state.hits > before[0] else "sglang" if state.syncs > before[1] else "none"
            host = None if b.seq_lens_cpu is None else b.seq_lens_cpu.tolist()
            row.update(answered=answered, seq_lens_cpu=host, seq_lens_sum=b.seq_lens_sum,
                       seq_lens=b.seq_lens.tolist(), truth=[truth[rid] for rid in rids])  # fmt: skip
        out = worker.forward_batch_generation(b, on_publish=partial(future_map.publish, b.req_pool_indices))
        if not prompts:
            grown = 1 if out.steps == 0 else ACCEPTED_WHILE_DRAFTING
            for rid in rids:
                truth[rid] += grown
            row["steps"] = out.steps
        return row

    # A backend that plans on device lengths (triton): the mirror stays idle, SGLang resolves as it would.
    triton_map = FutureMap(torch.device("cpu"), eagle, pool, needs_cpu_seq_lens=False)
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    device_only = [step(triton_map, "prefill", ["t1"], {"t1": 4}), step(triton_map, "off", ["t1"]),
                   step(triton_map, "off", ["t1"])]  # fmt: skip
    idle_after_triton = mirror_module.mirror().report()

    # Flashinfer plans on host lengths (needs_cpu_seq_lens).
    flash = FutureMap(torch.device("cpu"), eagle, pool, needs_cpu_seq_lens=True)
    trace = [step(flash, "prefill", ["a", "b"], {"a": 5, "b": 9})]
    trace += [step(flash, "off", ["a", "b"]) for _ in range(3)]
    trace.append(step(flash, "prefill", ["c"], {"c": 7}))
    trace += [step(flash, "off", ["a", "b", "c"]) for _ in range(2)]
    trace.append(step(flash, "off, a finished", ["b", "c"]))
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 48})
    trace.append(step(flash, "on: the holed requests drain at 0 steps", ["b", "c"]))
    trace.append(step(flash, "prefill", ["d", "e"], {"d": 3, "e": 11}))
    trace += [step(flash, "on, drafting", ["d", "e"]) for _ in range(2)]
    _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    trace += [step(flash, "off again", ["d", "e"]) for _ in range(4)]
    # A request id used again once its request finished, joining without a prefill through the worker (a
    # PD decode server's prebuilt batch publishes its length itself): a new request, unknown to the mirror.
    requests.pop("e")
    truth["e"] = 20
    flash.publish(torch.tensor([slots["e"]]), torch.tensor([truth["e"]]))
    trace.append(step(flash, "e again, prebuilt", ["d", "e"]))
    trace.append(step(flash, "off again", ["d", "e"]))
    report_before_fault = mirror_module.mirror().report()

    # A length changed behind the mirror's back (no SGLang path does this today): the sampled check finds
    # it, the mirror turns itself off, SGLang's own copy resolves from then on.
    flash.publish(torch.tensor([slots["d"]]), torch.tensor([truth["d"] + 5]))
    truth["d"] += 5
    fault = [step(flash, "after a length changed elsewhere", ["d", "e"]) for _ in range(4)]
    report = mirror_module.mirror().report()
    published = _harness.get_state(scheduler).get("spectower", {}).get("seq_lens_mirror")
    _harness.emit({"device_only": device_only, "idle_after_triton": idle_after_triton, "trace": trace,
                   "report_before_fault": report_before_fault, "fault": fault, "report": report,
                   "published": published})  # fmt: skip


if __name__ == "__main__":
    main()
