"""Off means off: a gated batch's one-token verify runs SGLang's decode attention, as a plain server's does.

Runs INSIDE SGLang (its own entry point in the ``sglang.srt.plugins`` group, beside the knob plugin), so it
imports only the standard library and, lazily, sglang.

Why. When the knob gates a batch (``spectower_spec_max_bs`` below the batch size), SGLang's EAGLE v2 worker
runs it at 0 draft steps: ``EAGLEWorkerV2._build_trivial_verify_input`` makes a TARGET_VERIFY of ONE token
per request with an all-visible mask, which is a decode step in all but name. The triton backend serves
every TARGET_VERIFY with its extend/verify kernel (``_fwd_kernel``), built for several query tokens per
request: measured on an H200 with the 8B-shaped pair, 15.4 ms of a 20.7 ms gated step at batch 64 against
0.7 ms of attention in a plain server's 5.6 ms decode step (data/gpu-runs/NOTEBOOK.md, "Where a gated step's
time goes"). So under load "off" served 0.51-0.67 of a plain server. The flashinfer backend plans and runs
every TARGET_VERIFY with its prefill wrappers (``indices_updater_prefill``,
``BatchPrefillWithPagedKVCacheWrapper``, eager and in CUDA graphs): 0.51 of a plain server at 64 concurrent
requests.

What. For the attention backend SGLang builds for the adaptive 0-step state, a TARGET_VERIFY batch whose
verify is one token per request is presented to the backend as DECODE (triton's and flashinfer's, in 0.5.17
and 0.5.23, whose decode CUDA-graph runner plans attention only through ``init_forward_metadata_out_graph``:
at capture with ``in_capture=True``, then before every replay):

- ``init_forward_metadata`` / ``init_forward_metadata_out_graph`` (eager, CUDA-graph capture and replay)
  get a view of the batch with ``forward_mode`` DECODE, no spec info, and ``seq_lens + 1``: the verify
  token's KV slot is already in ``req_to_token`` at position ``seq_len`` (``eagle_prepare_for_verify``
  assigned it), and a decode batch's lengths count its new token. Flashinfer then plans
  ``indices_updater_decode`` over its ``decode_wrappers`` (eager), or at capture creates that batch size's
  CUDA-graph decode wrappers (``_prepare_cuda_graph_metadata``, over the buffers ``init_cuda_graph_state``
  gave every capturing backend) and replans them before each replay (``fast_decode_plan``), as a plain
  server's decode graphs do;
- ``forward_extend`` on such a batch runs ``forward_decode`` (same KV write to ``out_cache_loc``, then
  the decode kernel over ``seq_len + 1`` entries).

Which backend: triton's keeps its state's width (``num_draft_tokens``) and only the one built at 1 acts.
Flashinfer's keeps none, so the verify's own width decides: ``spec_info.draft_token_num == 1``, what the
0-step state's batches carry (``_build_trivial_verify_input``) and its graph runner captures with; a drafting
state's verify is wider. Flashinfer reading an FP4 KV cache through a dequant workspace is left alone (its
decode would size that workspace from the caller's ``seq_lens``, short of the verify token).

The rest of the verify path (logits, the one-node acceptance, the bonus token, the draft's KV extend) is
SGLang's own, unchanged; the CUDA graphs captured for the 0-step state hold decode kernels. Drafting verifies,
the draft model's backends (other forward modes) and every other attention backend (trtllm_mha, flashinfer's
subclass, overrides the hooked methods) are untouched. ``SPECTOWER_GATED_DECODE=0`` in SGLang's environment
turns it off.

The draft's KV extend in the 0-step state, SGLang 0.5.17 only. A gated batch still runs the draft model's
extend over its one new token per request, and in 0.5.17 that extend never replays a CUDA graph: the
draft-extend graph runner of every adaptive state takes its width from
``resolve_num_tokens_per_req(phase="draft_extend", server_args=...)``, which reads the LAUNCH arguments
(``server_args`` is SGLang's pristine startup record; the adaptive state being captured is only in the
runtime context, ``get_spec()``). So the 0-step state's graph is captured four tokens wide, a gated batch's
extend is one token wide, ``can_run_graph`` refuses it, and the draft runs eagerly: measured on the H200
with the 8B pair, the eager extend left the GPU idle about 40 % of a gated step at batch 1
(data/gpu-runs/NOTEBOOK.md, "Where the rest went"). 0.5.23 reads ``get_spec()`` there. On a 0.5.17 signature
(one with ``server_args``) an AROUND hook answers the draft-extend width from ``get_spec()`` as 0.5.23 does,
so each state's graph is captured at that state's width; the launch state's answer is unchanged.

The draft's KV extend while off, then a drain before drafting again (both versions). With the attention
fixed and the extend replaying its graph, a gated step still ran the draft model (about 14 % of a gated
step's GPU time at batch 64 on the H200) and served 0.85-0.94 of a plain server. SGLang can skip that
extend at 0 steps (``EAGLEWorkerV2._stub_skipped_draft_extend``, its experimental
``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND``), measured at 0.94-0.99 of the plain server, but a request
that lived through skipped extends has holes in its draft KV and a stale draft input: drafting it again
starts cold. So spectower skips the extend for a batch the knob gates while nothing needs the draft warm
(``knob_contract.extend_skippable``: an operator's off locks the knob, which pauses exploration; while a
policy explores, only in the cold part of an exploration window, plugin/explore.py; a batch gated by
exploration inside a drafting bin keeps it, so explored batches and re-entry measure truly), remembers
which running requests have holes (``draft_holes.ExtendSkip``), and when drafting would resume while any of
them is still in the batch it holds the batch at 0 steps WITH the extend (the drain: no new holes, fresh
requests are clean) until the holed ones have finished, at most ``SPECTOWER_DRAIN_MAX_STEPS`` batches
(default 4096; then it drafts anyway and the rest recover cold). Drafting therefore resumes at its full
accept length, a request lifetime after the knob went up. A drained batch is counted as gated in the decode
counters, and its verify result is kept from SGLang's acceptance EMA (``knob_gate.mark_drained``).
``SPECTOWER_GATED_SKIP_EXTEND=0`` keeps SGLang's behaviour (the extend always runs).

The draft's prefill while nothing needs it. Every prefill runs the draft model over the whole prompt after
the target (``EagleDraftWorker._draft_extend_for_prefill``), at 0 steps too. Closed-loop checks with 64-token
prompts never saw it; Azure's conversation trace sends about 4 prompt tokens for every output token (2.17 M
against 0.51 M in a 180-s replay, data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05c), and the draft's
one layer is about 4 % of the 8B-shaped target's prefill. So a prefill batch skips it (plugin 0.4.9 under a
lock at 0; 0.4.10 also where the decode batch its requests join next will be gated with nothing needing the
draft warm, ``knob_contract.prefill_skippable``): SGLang's own stub (``_stub_skipped_draft_extend``) fills
the next draft input's fields with zeros, as for a skipped decode extend, and the batch's requests are
remembered as holed, so the drain covers them once their batch drafts again. Under a policy that adds no
drain of its own: that next step would skip the extend and hole them anyway. Which batch comes next is
counted before the prefill runs: an AROUND hook on ``Scheduler.get_next_batch_to_run`` counts the running
batch's requests that go on decoding beside the prefill (``running_beside``: not finished, not in it; the
step in flight may still finish a few), and the knob plugin's gate judges them with the prefill's own,
hysteresis included. Where that batch may draft (a drafting bin, the load falling under the ceiling, a lone
request after an idle spell), in a drain, and in a window's warm and exploring parts, the prompts go through
the draft. A chunked prompt whose last chunk runs after the gate opens is not remembered (it left the decode
batches' reckoning between its chunks): it drafts cold, which costs acceptance, never correctness.
``SPECTOWER_SKIP_DRAFT_PREFILL=0`` keeps the draft's prefill.

Flashinfer's host wait. With the extend skipped, a flashinfer server's gated step still waited about 1 ms
on the host for the previous step's lengths (``seq_lens_mirror``: why, and the mirror that removes the
wait; registered with the skip hooks, whose ``forward_batch_generation`` hook tells it what ran).
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from . import seq_lens_mirror, sglang_targets
from .draft_holes import PREFILL_SKIP_ENV, extend_skip

logger = logging.getLogger(__name__)

DISABLE_ENV = "SPECTOWER_GATED_DECODE"
TRITON_BACKEND = ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend")
FLASHINFER_BACKEND = ("sglang.srt.layers.attention.flashinfer_backend", "FlashInferAttnBackend")
ATTENTION_BACKENDS = (TRITON_BACKEND, FLASHINFER_BACKEND)
WIDTH_FUNCTION = "sglang.srt.speculative.spec_utils.resolve_num_tokens_per_req"


def is_one_token_verify(backend: Any, forward_batch: Any) -> bool:
    """A TARGET_VERIFY of one token per request, on the backend of the 0-step runtime state: triton's says
    so by its ``num_draft_tokens``; flashinfer's keeps no width, so the verify's ``draft_token_num`` does."""
    width = getattr(backend, "num_draft_tokens", None)
    if width is not None and width != 1:
        return False
    mode = getattr(forward_batch, "forward_mode", None)
    if mode is None or not mode.is_target_verify():
        return False
    tokens = getattr(getattr(forward_batch, "spec_info", None), "draft_token_num", None)
    if width is None:  # flashinfer: its FP4 dequant-workspace decode would read the caller's seq_lens
        return tokens == 1 and not getattr(backend, "decode_uses_dequant_workspace", False)
    return tokens is None or tokens == 1


def as_decode(forward_batch: Any) -> Any:
    """A shallow view of the verify batch that the backend plans as a decode batch (see the module doc)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    view = copy.copy(forward_batch)
    view.forward_mode = ForwardMode.DECODE
    view.spec_info = None
    view.seq_lens = forward_batch.seq_lens + 1
    batch_size = int(forward_batch.seq_lens.shape[0])
    if getattr(forward_batch, "seq_lens_sum", None) is not None:
        view.seq_lens_sum = forward_batch.seq_lens_sum + batch_size
    if getattr(forward_batch, "seq_lens_cpu", None) is not None:
        view.seq_lens_cpu = forward_batch.seq_lens_cpu + 1
    return view


def _batch_arg(args: tuple[Any, ...], kwargs: dict[str, Any], position: int) -> Any:
    return args[position] if len(args) > position else kwargs.get("forward_batch")


def hook_init_forward_metadata(original: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any) -> Any:
    """``init_forward_metadata(forward_batch)`` / ``init_forward_metadata_out_graph(forward_batch, ...)``."""
    forward_batch = _batch_arg(args, kwargs, 0)
    if is_one_token_verify(backend, forward_batch):
        view = as_decode(forward_batch)
        if args:
            args = (view, *args[1:])
        else:
            kwargs = {**kwargs, "forward_batch": view}
    return original(backend, *args, **kwargs)


def hook_forward_extend(original: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any) -> Any:
    """``forward_extend(q, k, v, layer, forward_batch, save_kv_cache, ...)``: same arguments as decode's."""
    if is_one_token_verify(backend, _batch_arg(args, kwargs, 4)):
        return backend.forward_decode(*args, **kwargs)
    return original(backend, *args, **kwargs)


HOOKS: dict[str, Callable[..., Any]] = {
    "init_forward_metadata": hook_init_forward_metadata,
    "init_forward_metadata_out_graph": hook_init_forward_metadata,
    "forward_extend": hook_forward_extend,
}


def hook_resolve_num_tokens_per_req(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """0.5.17's ``resolve_num_tokens_per_req``: the draft-extend width of the state in the runtime context."""
    width = original(*args, **kwargs)
    if kwargs.get("phase") != "draft_extend":
        return width
    try:
        from sglang.srt.runtime_context import get_spec

        active = int(get_spec().speculative_num_draft_tokens)
    except Exception:  # no published context (a unit test, a tool): SGLang's own answer
        return width
    return active if active >= 1 else width


def reads_launch_width() -> bool:
    """True where the draft-extend width is read from the launch arguments (0.5.17: a ``server_args``)."""
    import importlib
    import inspect

    module_name, _, name = WIDTH_FUNCTION.rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), name)
        return "server_args" in inspect.signature(function).parameters
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


WORKER_CLASS = ("sglang.srt.speculative.eagle_worker_v2", "EAGLEWorkerV2")
SCHEDULER_CLASS = ("sglang.srt.managers.scheduler", "Scheduler")
DRAFT_WORKER_CLASS = ("sglang.srt.speculative.eagle_worker_v2", "EagleDraftWorker")


def _tell_knob_plugin(what: str, tell: Callable[[Any], object]) -> None:
    """Call ``tell(knob_gate)`` where the knob plugin runs in this process; an error is logged (``what`` was
    not told), never raised into SGLang's decode step."""
    plugin = sys.modules.get("spectower.plugin.knob_gate")
    if plugin is not None:
        try:
            tell(plugin)
        except Exception:
            logger.debug("spectower gated decode: %s not told to the knob plugin", what, exc_info=True)


def _relabel_gated(batch_size: int) -> None:
    """A drained batch runs 0 steps where the knob's gate chose to draft it: the knob plugin counts it gated
    and keeps its verify result from SGLang's acceptance EMA (``knob_gate.mark_drained``)."""
    _tell_knob_plugin("the drained batch", lambda plugin: plugin.mark_drained(batch_size))


def _mark_extend(batch_size: int, kept: bool) -> None:
    """Tell the knob plugin's counters whether this gated batch runs the draft extend: their ``extend``
    block measures what it costs on this server's traffic (plugin/engine_counters.py)."""
    _tell_knob_plugin("the extend", lambda knob: knob.engine_counters_state().mark_extend(batch_size, kept))


def _zero_step_controller(worker: Any) -> Any:
    """The worker's adaptive controller when it can run 0 steps (a registered 0-step state), else None."""
    controller = getattr(worker, "adaptive_controller", None)
    states = getattr(controller, "_states", None)
    if controller is None or not hasattr(controller, "params") or not isinstance(states, dict):
        return None
    return controller if 0 in states else None


_HOOKED = False


def hooked() -> bool:
    """Whether this process registered the skip-and-drain hooks (what the knob plugin's state block shows)."""
    return _HOOKED


def hook_forward_batch_generation(
    original: Callable[..., Any], worker: Any, batch: Any, *args: Any, **kwargs: Any
) -> Any:
    """``EAGLEWorkerV2.forward_batch_generation``: note a decode batch's requests for the hooks inside it,
    and tell the seq-lens mirror what ran (``seq_lens_mirror``: a gated batch's lengths are known)."""
    mode = getattr(batch, "forward_mode", None)
    decode, noted = False, None
    if mode is not None and not mode.is_idle():
        decode = not mode.is_extend() and not getattr(batch, "is_extend_in_batch", False)
        noted = seq_lens_mirror.before_forward(batch, decode)
    tracker = extend_skip()
    prefill = mode is not None and not mode.is_idle() and not decode
    if decode:
        tracker.begin_batch(worker, getattr(batch, "reqs", ()))
    elif prefill:
        tracker.prefill_worker = worker
    ran = False
    try:
        result = original(worker, batch, *args, **kwargs)
        ran = True
        return result
    finally:
        if decode:
            tracker.end_batch()
        tracker.prefill_worker = None
        tracker.running_beside_prefill = None  # counted afresh for the next prefill
        seq_lens_mirror.after_forward(noted, worker, ran)


def running_beside(plan: Any, scheduler: Any) -> int | None:
    """For a prefill batch the scheduler chose (``plan``: 0.5.17's and 0.5.23's ``NextBatchPlan``, or the
    batch itself), the requests of its running batch that go on decoding beside it: not finished (as of the
    last result processed: the step in flight may finish a few more) and not in the prefill batch. None for
    any other batch, or where the running batch cannot be read."""
    batch, running = sglang_targets.next_batch_plan(plan, scheduler)
    mode = getattr(batch, "forward_mode", None)
    if batch is None or mode is None or not mode.is_extend():
        return None
    reqs = getattr(running, "reqs", None)
    if reqs is None:
        return None
    new = {id(req) for req in getattr(batch, "reqs", None) or ()}
    return sum(1 for req in reqs if id(req) not in new and not _finished(req))


def _finished(req: Any) -> bool:
    finished = getattr(req, "finished", None)
    return bool(finished()) if callable(finished) else False


def hook_get_next_batch_to_run(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    """``Scheduler.get_next_batch_to_run``: before a prefill runs, count the requests decoding beside it
    (``running_beside``), so its draft prefill is judged by the decode batch its requests join next."""
    plan = original(scheduler, *args, **kwargs)
    tracker = extend_skip()
    try:
        tracker.running_beside_prefill = running_beside(plan, scheduler)
    except Exception:  # never into SGLang's loop: not known, so the draft's prefill runs
        tracker.running_beside_prefill = None
    return plan


def hook_activate_step_by_batch(
    original: Callable[..., Any], worker: Any, batch_size: int, *args: Any, **kwargs: Any
) -> Any:
    """``EAGLEWorkerV2.activate_step_by_batch`` for a decode batch: SGLang's own two steps (ask
    ``params.get_steps_for_batch``, where the knob's gate answers, then switch the runtime state when it
    differs: ``AdaptiveController.activate_step_by_batch`` in 0.5.17 and 0.5.23) with the drain between
    them, so a drained batch never switches to drafting and back."""
    tracker = extend_skip()
    controller = _zero_step_controller(worker) if worker is tracker.worker else None
    if controller is None:
        return original(worker, batch_size, *args, **kwargs)
    steps = tracker.steps_for(int(controller.params.get_steps_for_batch(batch_size)))
    if steps != worker.speculative_num_steps:
        controller._activate(steps)
    if tracker.draining_now:
        _relabel_gated(int(batch_size))
    tracker.mark(int(worker.speculative_num_steps))
    if worker.speculative_num_steps == 0:
        _mark_extend(int(batch_size), kept=not tracker.skip_now)
    return None


def hook_draft_extend_for_decode(
    original: Callable[..., Any], draft_worker: Any, batch: Any, batch_result: Any, *args: Any, **kwargs: Any
) -> Any:
    """``EagleDraftWorker._draft_extend_for_decode``: SGLang's own stub instead, when this batch skips."""
    tracker = extend_skip()
    if tracker.skip_now and tracker.worker is not None:
        tracker.worker._stub_skipped_draft_extend(batch, batch_result)
        return None
    return original(draft_worker, batch, batch_result, *args, **kwargs)


def hook_draft_extend_for_prefill(
    original: Callable[..., Any], draft_worker: Any, batch: Any, target_hidden_states: Any,
    next_token_ids: Any, *args: Any, **kwargs: Any,
) -> Any:
    """``EagleDraftWorker._draft_extend_for_prefill``: where the knob plugin allows it (a lock at 0, or gated
    load with nothing exploring), the next draft input SGLang's own stub fills (zeros where the draft's
    outputs go, the target's next tokens as the bonus tokens) in place of the draft model's pass over the
    prompts."""
    tracker = extend_skip()
    if tracker.may_skip_prefill(len(getattr(batch, "reqs", None) or ())):
        try:
            from sglang.srt.speculative.eagle_info import EagleDraftInput

            draft_input = EagleDraftInput(bonus_tokens=next_token_ids, num_tokens_per_req=1,
                                          num_tokens_for_logprob_per_req=1)  # fmt: skip
            tracker.prefill_worker._stub_skipped_draft_extend(batch, _NextDraftInput(draft_input))
        except Exception:  # never into SGLang's prefill: the draft's own pass instead, from now on
            tracker.prefill_enabled = False
            logger.exception("spectower gated decode: cannot skip the draft's prefill; it runs from now on")
        else:
            tracker.prefill_skipped(getattr(batch, "reqs", ()))
            return draft_input
    return original(draft_worker, batch, target_hidden_states, next_token_ids, *args, **kwargs)


class _NextDraftInput:
    """What ``_stub_skipped_draft_extend`` fills: a batch result's ``next_draft_input``."""

    def __init__(self, next_draft_input: Any) -> None:
        self.next_draft_input = next_draft_input


SKIP_HOOKS: dict[tuple[tuple[str, str], str], Callable[..., Any]] = {
    (WORKER_CLASS, "forward_batch_generation"): hook_forward_batch_generation,
    (WORKER_CLASS, "activate_step_by_batch"): hook_activate_step_by_batch,
    (DRAFT_WORKER_CLASS, "_draft_extend_for_decode"): hook_draft_extend_for_decode,
    (DRAFT_WORKER_CLASS, "_draft_extend_for_prefill"): hook_draft_extend_for_prefill,
    (SCHEDULER_CLASS, "get_next_batch_to_run"): hook_get_next_batch_to_run,
}


def missing_skip_targets() -> list[str]:
    """What the skip-and-drain hooks need that this SGLang lacks (0.5.17 and 0.5.23 have all of it)."""
    import importlib

    wanted = [*SKIP_HOOKS, (WORKER_CLASS, "_stub_skipped_draft_extend")]
    missing = []
    for (module_name, class_name), name in wanted:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as exc:
            return [f"{module_name}.{class_name} ({exc})"]
        if not callable(getattr(cls, name, None)):
            missing.append(f"{class_name}.{name}")
    return missing


def missing_targets(backend: tuple[str, str] = TRITON_BACKEND) -> list[str]:
    """The hooked methods of one attention backend (triton's, flashinfer's) this SGLang lacks, empty when
    all exist (0.5.17 and 0.5.23 have them, and ``forward_decode``, which ``forward_extend``'s hook calls)."""
    return sglang_targets.missing_methods(*backend, [*HOOKS, "forward_decode"])


def register() -> None:
    """Entry point (``sglang.srt.plugins``): SGLang's ``load_plugins()`` calls it in each of its processes."""
    registry = sglang_targets.hook_registry("spectower gated decode", DISABLE_ENV, logger)
    if registry is None:
        return
    HookRegistry, HookType = registry
    backends = []
    for module_name, class_name in ATTENTION_BACKENDS:
        missing = missing_targets((module_name, class_name))
        if missing:
            logger.warning("spectower gated decode: NOT hooking %s (missing %s); its gated batches run "
                           "SGLang's own one-token verify", class_name, ", ".join(missing))  # fmt: skip
            continue
        for name, hook in HOOKS.items():
            HookRegistry.register(f"{module_name}.{class_name}.{name}", hook, HookType.AROUND)
        backends.append(f"{class_name}.{', '.join(HOOKS)}")
    if not backends:
        return
    hooked = "; ".join(backends)
    if extend_skip().enabled:
        skip_missing = missing_skip_targets()
        if skip_missing:
            logger.warning("spectower gated decode: the draft extend is not skipped (missing %s)",
                           ", ".join(skip_missing))  # fmt: skip
        else:
            for ((module, cls), name), hook in SKIP_HOOKS.items():
                HookRegistry.register(f"{module}.{cls}.{name}", hook, HookType.AROUND)
            global _HOOKED
            _HOOKED = True
            prefill = ("skipped where the knob gates and nothing explores" if extend_skip().prefill_enabled
                       else f"kept: {PREFILL_SKIP_ENV}=0")  # fmt: skip
            hooked += (
                "; EAGLEWorkerV2.forward_batch_generation, activate_step_by_batch, "
                "EagleDraftWorker._draft_extend_for_decode (extend skipped while gated, then drained), "
                f"_draft_extend_for_prefill ({prefill}), Scheduler.get_next_batch_to_run (who runs beside a "
                "prefill)"
            )
            # The mirror learns what ran from forward_batch_generation's hook, registered just above.
            mirrored = seq_lens_mirror.register()
            if mirrored:
                hooked += f"; {mirrored}"
    if reads_launch_width():
        HookRegistry.register(WIDTH_FUNCTION, hook_resolve_num_tokens_per_req, HookType.AROUND)
        hooked += ", resolve_num_tokens_per_req (draft-extend width per adaptive state)"
    # SGLang configures logging after the plugins load: print the one line that says what was hooked.
    print(f"spectower gated decode: AROUND hooks on {hooked} (pid {os.getpid()})", file=sys.stderr,
          flush=True)  # fmt: skip
