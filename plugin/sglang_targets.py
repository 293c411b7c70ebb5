"""Whether this SGLang has the methods a plugin module hooks: the one check every entry point makes before
it registers a hook, so a missing or renamed method is one warning naming it, not a failed hook at launch.

Standard library only (it runs inside SGLang).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any


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
