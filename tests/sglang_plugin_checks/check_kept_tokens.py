"""The decode counters count what each step's requests kept (plugin 0.4.13, plugin/kept_tokens.py), inside
SGLang's own classes: the kept-tokens plugin's hook on the real (HookRegistry-wrapped)
``SchedulerBatchResultProcessor.process_batch_result_decode``, real ``Req`` objects (their ``output_ids``,
``update_finish_state`` and ``finished_len``), the real ``EAGLEWorkerV2.on_verify_complete_cpu`` feeding the
real ``AdaptiveController`` and the knob plugin's hooked ``AdaptiveSpeculativeParams`` (the counters).

CONSTRUCTED (see _harness.py for the rest): the processor object (``object.__new__`` of SGLang's frozen
dataclass, with its ``model_worker``), and ``process_batch_result_decode``'s body, which needs a model's
output: it does what SGLang's does with a verify's accept lengths (hands them to ``on_verify_complete_cpu``,
then, skipping a request that has finished or was retracted, as the overlap loop does, extends each
request's output and updates its finish state).

Argument: the adaptive config path. Prints one JSON object: the counters' drafted tokens in bin 4 and their
tokens not kept after each step, and each request's output length.
"""

from __future__ import annotations

import sys
from typing import Any

import _harness

MAX_NEW_TOKENS = (4, 100, 100, 100)
ACCEPTED = [2, 2, 2, 2]  # drafts accepted per request in every step: 3 tokens each


def install_decode_result() -> None:
    """``process_batch_result_decode``'s body, before load_plugins() wraps it (module docstring)."""
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    def body(self: Any, batch: Any, result: Any) -> None:
        self.model_worker.on_verify_complete_cpu(list(result), batch_size=len(batch.reqs))
        for req, accepted in zip(batch.reqs, result, strict=True):
            if req.finished() or req.is_retracted:
                continue  # the overlap loop's step after a finish: SGLang drops it
            req.output_ids.extend([7] * (accepted + 1))
            req.update_finish_state(accepted + 1)

    SchedulerBatchResultProcessor.process_batch_result_decode = body  # type: ignore[method-assign]


def make_reqs() -> list[Any]:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    reqs = []
    for i, max_new in enumerate(MAX_NEW_TOKENS):
        params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
        params.normalize(None)
        reqs.append(Req(rid=f"r{i}", origin_input_text="x", origin_input_ids=[1, 2], sampling_params=params,
                        vocab_size=100))  # fmt: skip
    return reqs


def main() -> None:
    config_path = sys.argv[1]
    install_decode_result()
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

    plugin, _scheduler, controller, _params, worker = _harness.start_decoding(config_path)
    counters = plugin.engine_counters_state()
    processor = object.__new__(SchedulerBatchResultProcessor)
    object.__setattr__(processor, "model_worker", worker)  # a frozen dataclass in SGLang
    worker.adaptive_controller = controller
    batch = ScheduleBatch(reqs=make_reqs())
    steps = []
    for _ in range(3):
        controller.activate_step_by_batch(len(batch.reqs))
        processor.process_batch_result_decode(batch, ACCEPTED)
        i = counters.bins.index(4)
        steps.append({"drafted_tokens": counters.tokens["drafted"][i], "not_kept": counters.tokens_not_kept,
                      "steps": counters.steps["drafted"][i]})  # fmt: skip
    _harness.emit({"steps": steps, "lengths": [len(r.output_ids) for r in batch.reqs],
                   "finished_len": batch.reqs[0].finished_len})  # fmt: skip


if __name__ == "__main__":
    main()
