"""An exploring part's request mix (plugin 0.4.15), inside SGLang's own classes: the knob plugin's hook on the
real (HookRegistry-wrapped) ``Scheduler.get_next_batch_to_run`` keeps the batch the loop turn chose; the real
``AdaptiveController`` asks the real (hooked) ``AdaptiveSpeculativeParams`` for that batch's steps in the same
turn, where the part starts or ends (``PartMix.batch`` reads the batch's requests); and SGLang's own spec-v2
decode result processing (``SchedulerBatchResultProcessor._resolve_spec_v2_tokens``) feeds each result to the
controller through the real ``EAGLEWorkerV2.on_verify_complete_cpu`` (the hooked ``on_verify_complete``: a
reading due is taken there) and then adds one verify and its correct drafts to each of SGLang's own ``Req``
objects (``spec_verify_ct``, ``spec_num_correct_drafts``), which the plugin reads.

CONSTRUCTED (see _harness.py for the rest): ``get_next_batch_to_run``'s body, which needs a model and a KV
pool: it answers SGLang's own ``NextBatchPlan`` with the check's batch, a ``ScheduleBatch``
(``object.__new__`` plus ``forward_mode`` DECODE, ``reqs`` and ``has_grammar``, what the code reads); the
result processor (SGLang's own frozen dataclass, built with ``model_worker``, the harness's ``EAGLEWorkerV2``
with the controller attached, a metrics reporter that records nothing, and None for the fields decode results
do not read); each result, SGLang's own ``GenerationBatchResult`` with the fields the processor reads (token
ids and accept lengths as CPU tensors, one bonus token a verify, the batch's draft width). The ``Req`` objects
are SGLang's own, built by ``Req.__init__``.

The loop is the overlap scheduler's: each turn chooses and launches a batch, then processes the result of the
batch launched the turn before, which is how a reading at a part's first batch could miss the gated step
before it. Run with a 100-batch cycle at the default share (a part of 4 batches), the knob a policy's 4,
batches of 8 (gated by the ceiling, within the exploring part's stream limit of 8: they draft there). Of the
first batch's requests half accept 3 drafts a verify (a = 4), half 1 (a = 2); a gated verify commits the bonus
token alone. The first batch's request 0 finishes after the part's second batch and a newcomer that accepts 2
drafts (a = 3) takes its place.

Argument: the adaptive config path. Prints one JSON object: each turn's steps and window part, which requests
the part's first batch held, the published counters' ``mix`` and ``slots`` blocks, the window report, and each
request's two counts as SGLang's result processing left them.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from array import array
from typing import Any

import _harness

BATCH = 8
DRAFTS = (3, 1, 3, 1, 3, 1, 3, 1)  # the first batch's requests: correct drafts per drafted verify
NEWCOMER_DRAFTS = 2


def install_next_batch() -> None:
    """``Scheduler.get_next_batch_to_run``'s body, before load_plugins() wraps it: the check's batch."""
    from sglang.srt.managers.schedule_batch import NextBatchPlan
    from sglang.srt.managers.scheduler import Scheduler

    def next_batch(self: Any, running_batch: Any = None, last_batch: Any = None, **kwargs: Any) -> Any:
        return NextBatchPlan(batch_to_run=self._next_batch, running_batch=self._next_batch)

    Scheduler.get_next_batch_to_run = next_batch  # type: ignore[method-assign]


def request(rid: str) -> Any:
    """One of SGLang's own requests."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    return Req(rid, "", array("i", [1, 2, 3]), SamplingParams(max_new_tokens=1024))


def decode_batch(reqs: list[Any]) -> Any:
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    batch = object.__new__(ScheduleBatch)
    batch.forward_mode = ForwardMode.DECODE
    batch.reqs = list(reqs)
    batch.has_grammar = False
    return batch


def result_of(steps: int, drafts: list[int]) -> Any:
    """The batch's result as the worker leaves it on the CPU: per request its accept length (the correct
    drafts and the bonus token; the bonus alone at 0 steps) in rows as wide as the step's draft tokens."""
    import torch
    from sglang.srt.managers.utils import GenerationBatchResult

    width = steps + 1
    result = GenerationBatchResult()
    result.next_token_ids = torch.zeros(len(drafts) * width, dtype=torch.int64)
    result.accept_lens = torch.tensor([1 + (d if steps else 0) for d in drafts], dtype=torch.int32)
    result.speculative_num_draft_tokens = width
    result.num_non_draft_tokens_per_req = 1  # 0.5.23: the bonus token
    return result


def result_processor(worker: Any) -> Any:
    """SGLang's result processor (a frozen dataclass whose fields differ by version): the worker, a metrics
    reporter that records nothing, None for what decode result processing does not read."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    reporter = types.SimpleNamespace(snapshot_spec_decode_metrics=lambda *args: None)
    fields = {field.name: None for field in dataclasses.fields(SchedulerBatchResultProcessor)}
    return SchedulerBatchResultProcessor(**{**fields, "model_worker": worker, "metrics_reporter": reporter})


def main() -> None:
    config_path = sys.argv[1]
    install_next_batch()
    plugin, scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    worker.adaptive_controller = controller
    processor = result_processor(worker)
    plugin.gate_state().clock = _harness.FakeClock()
    scheduler.waiting_queue = []
    answers = {"policy_4": _harness.set_state(scheduler, {"spectower_writer": 2, "spectower_spec_max_bs": 4})}
    reqs = [request(f"r{i}") for i in range(BATCH)]
    first_reqs = list(reqs)
    drafts = {req.rid: d for req, d in zip(reqs, DRAFTS, strict=True)}
    in_flight: list[tuple[Any, Any]] = []  # the batch launched last turn and its result
    turns: list[dict[str, Any]] = []
    first: list[str] | None = None

    def turn() -> None:
        nonlocal first
        scheduler._next_batch = decode_batch(reqs)
        scheduler.get_next_batch_to_run(running_batch=None, last_batch=None)
        controller.activate_step_by_batch(BATCH)  # the batch launches: the gate decides its steps
        steps, part = worker.speculative_num_steps, plugin.gate_state().explorer.phase_now
        if part == "explore" and first is None:
            first = [req.rid for req in reqs]
        in_flight.append((scheduler._next_batch, result_of(steps, [drafts[req.rid] for req in reqs])))
        if len(in_flight) == 2:  # the overlap loop: last turn's result, after this batch launched
            processor._resolve_spec_v2_tokens(in_flight[0][1], in_flight[0][0])
            in_flight.pop(0)
        turns.append({"steps": steps, "part": part})

    # 94 cold batches bring the window, its warm part ends at once (no holed request), the part drafts 4
    # batches, then cold again: 3 more turns process the part's results and the first one's after it
    while len(turns) < 104:
        turn()
        if sum(t["part"] == "explore" for t in turns) == 2 and reqs[0].rid == "r0":
            newcomer = request("newcomer")  # r0 finished after the part's second batch: its slot refilled
            drafts[newcomer.rid] = NEWCOMER_DRAFTS
            reqs[0] = newcomer
    state = _harness.get_state(scheduler)["spectower"]
    counters = state["counters"]
    # each request's own counts, as SGLang's result processing left them
    counts = {req.rid: [req.spec_verify_ct, req.spec_num_correct_drafts] for req in [*first_reqs, *reqs]}
    _harness.emit({"answers": answers, "turns": turns, "first_batch": first, "mix": counters["mix"],
                   "slots": counters["slots"], "bins": counters["bins"], "window": state["explore"]["window"],
                   "counts": counts, "plugin_version": state["plugin_version"]})  # fmt: skip


if __name__ == "__main__":
    main()
