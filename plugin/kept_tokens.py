"""The tokens a decode step's requests keep, for the decode counters (plugin 0.4.13).

Why: the counters (plugin/engine_counters.py) count each verify's accepted drafts + 1 per request, from the
verify hook, which sees counts, not requests. SGLang keeps fewer: in the overlap loop a request that finished
in the step before is still in the next batch (it was launched before the finish was known) and SGLang drops
that whole step of it, and a request's last step is cut at ``max_new_tokens`` (``Req.finished_len``). A gated
step drops one token a finished request, a drafted one its accept length plus the overshoot: on an H100 the
clients received 0.989 of a drafting run's counted tokens and 1.000 of always off's
(data/gpu-runs/h100-8b-pair-triton-counters-vs-clients-2026-12-06), so learn read drafting's rate 1.1 % high.

How: an AROUND hook on ``SchedulerBatchResultProcessor.process_batch_result_decode`` (SGLang 0.5.17 and
0.5.23), where the verify counts reach the counters (``_resolve_spec_v2_tokens`` calls the worker's
``on_verify_complete_cpu``) and the requests get their tokens: each request's output length before the call,
and whether SGLang will skip it (finished or retracted), against its length after (cut at ``finished_len``)
is what it kept; the step the counters recorded inside the call is counted at that (``EngineCounters.
keep_tokens``). The prefill's first token of each request is kept too and was never in a decode step: the
counters leave it out in every mode alike.

Standard library only (it runs inside SGLang); the hook never raises into SGLang's loop.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import knob_gate, sglang_targets

logger = logging.getLogger(__name__)

PROCESSOR = (
    "sglang.srt.managers.scheduler_components.batch_result_processor",
    "SchedulerBatchResultProcessor",
)
METHOD = "process_batch_result_decode"
# SPECTOWER_KEPT_TOKENS=0 counts every verified token again (plugin 0.4.12's counting)
DISABLE_ENV = "SPECTOWER_KEPT_TOKENS"
_warned: set[str] = set()


def lengths_before(reqs: Sequence[Any]) -> list[tuple[int, bool]]:
    """Per request: its output length, and whether SGLang skips it in this result (finished or retracted:
    the overlap loop's step after its finish)."""
    return [(len(req.output_ids), bool(req.finished() or getattr(req, "is_retracted", False)))
            for req in reqs]  # fmt: skip


def kept_since(reqs: Sequence[Any], before: Sequence[tuple[int, bool]]) -> int:
    """The output tokens the requests kept since ``before``: nothing of a skipped one; of the rest, what
    their output grew by, cut at ``finished_len`` where SGLang set it."""
    kept = 0
    for req, (length, skipped) in zip(reqs, before, strict=True):
        if skipped:
            continue
        now = len(req.output_ids)
        cut = getattr(req, "finished_len", None)
        kept += max(0, min(now, cut if cut is not None else now) - length)
    return kept


def hook_process_batch_result_decode(
    original: Callable[..., Any], processor: Any, batch: Any, result: Any, *args: Any, **kwargs: Any
) -> Any:
    counters, recorded, before = None, 0, None
    try:
        counters = knob_gate.engine_counters_state()
        recorded, before = counters.recorded, lengths_before(batch.reqs)
    except Exception:
        _warn_once("before")
    out = original(processor, batch, result, *args, **kwargs)
    try:
        # the verify of this result was counted inside the call: exactly one step recorded
        if counters is not None and before is not None and counters.recorded == recorded + 1:
            counters.keep_tokens(kept_since(batch.reqs, before))
    except Exception:
        _warn_once("after")
    return out


def _warn_once(key: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning("spectower kept tokens: could not read a decode result's requests (%s)", key,
                       exc_info=True)  # fmt: skip


def missing_targets() -> list[str]:
    return sglang_targets.missing_methods(*PROCESSOR, [METHOD])


def register() -> None:
    """Entry point (``sglang.srt.plugins``): SGLang's ``load_plugins()`` calls it in each of its processes."""
    registry = sglang_targets.hook_registry("spectower kept tokens", DISABLE_ENV, logger, missing_targets)
    if registry is None:
        return
    HookRegistry, HookType = registry
    module_name, class_name = PROCESSOR
    HookRegistry.register(f"{module_name}.{class_name}.{METHOD}", hook_process_batch_result_decode,
                          HookType.AROUND)  # fmt: skip
    # SGLang configures logging after the plugins load: print the one line that says what was hooked.
    print(f"spectower kept tokens: AROUND hook on {class_name}.{METHOD} (pid {os.getpid()})", file=sys.stderr,
          flush=True)  # fmt: skip
