"""SGLang's launcher process (its HTTP server and tokenizer manager) in ``/server_info``: its own long garbage
collections, when its Python was held, and whether its collector was frozen.

Why: under Azure's replay on the H200 (2026-12-05, data/gpu-runs/h200-8b-pair-triton-replay-2026-12-05) every
stretch of always off's p99 TTFT tail lay within 0.3 s of a full collection in the launcher: the tokenizer
manager's generation 2, about 790 000 objects, 0.33-0.44 s, about once a minute. The scheduler never stalled.
Every request's output passes through that process, so while it collects no one gets a token; after
SGLang's ``/freeze_gc`` (which freezes the objects that exist, in the launcher and the scheduler) no
collection reached 0.05 s. The scheduler's state (plugin/knob_gate.py) cannot see any of that: it is another
process. So this module wraps the launcher's own ``TokenizerControlMixin.get_internal_state`` (the call
``/server_info`` makes to gather every rank's state) and adds a ``launcher`` block to each rank's
``spectower`` block on its way out: the launcher's collections (plugin/gc_pauses.py, installed in this
process at its first call), its watch thread's late wakes (plugin/stall_watch.py) and ``frozen``
(``gc.get_freeze_count()``).

Standard library only (it runs inside SGLang); the hook never raises into SGLang: a failure leaves the states
as they were and warns once.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from . import gc_pauses, sglang_targets

logger = logging.getLogger(__name__)

# Where SGLang 0.5.17 and 0.5.23 define the launcher's gather of every rank's internal state.
TARGET = ("sglang.srt.managers.tokenizer_control_mixin", "TokenizerControlMixin", "get_internal_state")
# ...and its freeze (``/freeze_gc``), after which its frozen objects are counted again (gc_pauses.FrozenCount)
FREEZE_TARGET = ("sglang.srt.managers.tokenizer_manager", "TokenizerManager", "freeze_gc")

_PAUSES: gc_pauses.GcPauses | None = None  # this process's collections, from its first hooked call on
_WARNED = False


def pauses() -> gc_pauses.GcPauses:
    """The launcher's collection timer, made and installed at the first call (only the launcher makes it)."""
    global _PAUSES
    if _PAUSES is None:
        _PAUSES = gc_pauses.GcPauses.from_environment()
        gc_pauses.install(_PAUSES)
    return _PAUSES


def report() -> dict[str, Any]:
    """The ``launcher`` block: the process, its collections, and its watch thread's late wakes (None without
    a watch thread: ``SPECTOWER_STALL_STACKS=0``)."""
    loop_stalls = sys.modules.get("spectower.plugin.loop_stalls")
    watch = getattr(loop_stalls, "_WATCH", None) if loop_stalls is not None else None
    held = watch.report() if watch is not None else None
    return {"pid": os.getpid(), "gc": pauses().report(), "watch": held}


def add_to(states: Any) -> Any:
    """Each rank's state with the launcher's block in its ``spectower`` block (a rank without the plugin's
    block is left alone); ``states`` as SGLang returned it."""
    if isinstance(states, list):
        block = report()
        for state in states:
            plugin = state.get("spectower") if isinstance(state, dict) else None
            if isinstance(plugin, dict):
                plugin["launcher"] = block
    return states


def hook_get_internal_state(original: Callable[..., Awaitable[Any]], manager: Any, *args: Any,
                            **kwargs: Any) -> Awaitable[Any]:  # fmt: skip
    """AROUND hook on the launcher's async ``get_internal_state``: HookRegistry's wrapper is synchronous, so
    this hands back a coroutine that awaits SGLang's and then adds the block."""

    async def gathered() -> Any:
        states = await original(manager, *args, **kwargs)
        try:
            return add_to(states)
        except Exception:  # never into SGLang's /server_info (the module's docstring)
            _warn_once()
            return states

    return gathered()


def _warn_once() -> None:
    global _WARNED
    if not _WARNED:
        _WARNED = True
        logger.warning("spectower launcher state: could not add the launcher's block; /server_info goes on",
                       exc_info=True)  # fmt: skip


def register(registry: Any, hook_type: Any) -> bool:
    """Wrap the launcher's gather through SGLang's ``HookRegistry`` (called by the loop-stall plugin's entry
    point); False, with a warning, where this SGLang lacks it."""
    module_name, class_name, method = TARGET
    missing = sglang_targets.missing_methods(module_name, class_name, [method])
    if missing:
        logger.warning("spectower launcher state: NOT hooking (missing %s)", ", ".join(missing))
        return False
    registry.register(f"{module_name}.{class_name}.{method}", hook_get_internal_state, hook_type)
    module_name, class_name, method = FREEZE_TARGET
    if not sglang_targets.missing_methods(module_name, class_name, [method]):
        registry.register(f"{module_name}.{class_name}.{method}", gc_pauses.hook_freeze_async, hook_type)
    return True
