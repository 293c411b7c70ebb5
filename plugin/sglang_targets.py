"""Whether this SGLang has the methods a plugin module hooks: the one check every entry point makes before
it registers a hook, so a missing or renamed method is one warning naming it, not a failed hook at launch.

Standard library only (it runs inside SGLang).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeGuard


def missing_methods(module_name: str, class_name: str, methods: Iterable[str]) -> list[str]:
    """``Class.method`` for each of ``methods`` the class lacks (empty when all exist); the one entry
    ``module.Class (why)`` when the class itself cannot be imported."""
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        return [f"{module_name}.{class_name} ({exc})"]
    return [f"{class_name}.{name}" for name in methods if not callable(getattr(cls, name, None))]


def next_batch_plan(plan: Any, scheduler: Any) -> tuple[Any, Any]:
    """What ``Scheduler.get_next_batch_to_run`` answered: (the batch to run, the running batch). 0.5.17 and
    0.5.23 answer a ``NextBatchPlan``; an older SGLang the batch itself, its running batch on the
    scheduler."""
    batch = getattr(plan, "batch_to_run", plan)
    running = getattr(plan, "running_batch", None) or getattr(scheduler, "running_batch", None)
    return batch, running


def size(value: Any) -> int:
    """``len(value)``; 0 for None or what cannot be measured (never raises: it runs in SGLang's loop)."""
    try:
        return len(value) if value is not None else 0
    except Exception:
        return 0


def loop_turn(plan: Any, scheduler: Any) -> tuple[bool, int, int]:
    """What a ``Scheduler.get_next_batch_to_run`` turn left: (a batch to run, the requests waiting in the
    scheduler's queue, the requests running), what ``idle_turn`` reads; 0 where a queue cannot be read."""
    batch, running = next_batch_plan(plan, scheduler)
    waiting = size(getattr(scheduler, "waiting_queue", None))
    return batch is not None, waiting, size(getattr(running, "reqs", None))


def idle_turn(has_batch: bool, waiting: int, running: int) -> bool:
    """A loop turn with nothing to run, nothing waiting and nothing running: no output is owed (the loop
    stalls' next gap starts when a batch next runs) and no mode spends the time until the next decode step
    (the decode counters' ``note_idle``)."""
    return not has_batch and waiting == 0 and running == 0


def prefill_turn(plan: Any, scheduler: Any) -> bool:
    """Whether a ``Scheduler.get_next_batch_to_run`` turn chose a prefill batch: its ``forward_mode``
    (SGLang's ``ForwardMode``, the same in 0.5.17 and 0.5.23) is EXTEND or MIXED (a prefill chunk beside the
    running requests' decode), or one of SGLang's other extends over prompts (SPLIT_PREFILL, DLLM_EXTEND):
    what the decode counters' ``note_prefill`` hears. ``is_extend()`` is also true of TARGET_VERIFY, a mode
    the worker gives its own forward batch, never the scheduler's: left out all the same. No batch, a decode
    or an idle batch, or a batch without a mode: False."""
    batch, _running = next_batch_plan(plan, scheduler)
    mode = getattr(batch, "forward_mode", None)
    if batch is None or mode is None or _mode_is(mode, "is_target_verify"):
        return False
    return _mode_is(mode, "is_extend") or _mode_is(mode, "is_mixed")


def _mode_is(mode: Any, method: str) -> bool:
    """``mode.<method>()``; False where the mode lacks the method (a stand-in, or a ForwardMode of another
    SGLang): not knowing a batch is a prefill leaves it uncounted, never a broken scheduler turn."""
    check = getattr(mode, method, None)
    return callable(check) and bool(check())


def batch_requests(batch: Any) -> list[Any] | None:
    """The requests of a ``ScheduleBatch`` (its ``reqs``, the same list attribute in 0.5.17 and 0.5.23) as a
    new list, or None where the batch has none to read (never raises: it runs in SGLang's loop)."""
    reqs = getattr(batch, "reqs", None)
    if not isinstance(reqs, list):
        return None
    return list(reqs)


def spec_counts(req: Any) -> tuple[int, int] | None:
    """A request's cumulative (verify passes, correct drafts): SGLang's ``Req.spec_verify_ct`` and
    ``Req.spec_num_correct_drafts`` (0.5.17 and 0.5.23; the result processor adds one verify and its correct
    drafts, 0 for a 0-step verify, each time it applies a decode result to the request; the simulator's
    requests keep the same two). None where either is missing or not a whole number."""
    verifies = getattr(req, "spec_verify_ct", None)
    correct = getattr(req, "spec_num_correct_drafts", None)
    if not _whole(verifies) or not _whole(correct):
        return None
    return int(verifies), int(correct)


def _whole(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def hook_registry(label: str, disable_env: str, log: logging.Logger,
                  missing: Callable[[], list[str]] | None = None) -> tuple[Any, Any] | None:  # fmt: skip
    """(SGLang's ``HookRegistry``, ``HookType``) for a plugin module's ``register()``, or None where it must
    not hook: switched off by ``disable_env=0`` (one line on stderr, where SGLang's logging is not yet set
    up), no HookRegistry in this SGLang, or targets this SGLang lacks (``missing()``: a warning naming
    ``label`` and them)."""
    if os.environ.get(disable_env, "1") == "0":
        print(f"{label}: off ({disable_env}=0)", file=sys.stderr, flush=True)
        return None
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError as exc:
        log.warning("%s: NOT hooking: no SGLang HookRegistry (%s)", label, exc)
        return None
    lacking = missing() if missing is not None else []
    if lacking:
        log.warning("%s: NOT hooking (missing %s)", label, ", ".join(lacking))
        return None
    return HookRegistry, HookType
