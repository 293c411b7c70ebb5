"""The simulator's side of the knob contract: who holds the knob, beside the engine's per-rank ceiling and
exploration share.

Ownership is ``plugin.knob_contract.KnobOwner``, the same logic the SGLang plugin runs, so the simulator
refuses, locks, expires and reports exactly as a real server with the plugin does. One owner per engine
(every rank of the simulated server sees the same requests, as every scheduler of a DP server does); it
lives on the engine, whose exploration pauses while a lock holds.
"""

from __future__ import annotations

from typing import Any

from ..plugin import knob_contract
from ..plugin.explore import RUN_LENGTH
from .engine import Engine, RankScheduler


def owner_of(engine: Engine) -> knob_contract.KnobOwner:
    return engine.owner


def report(engine: Engine) -> dict[str, Any]:
    """The contract's ownership block for ``internal_states[i]["spectower"]``."""
    return owner_of(engine).report()


def explore_report(engine: Engine, rank: RankScheduler) -> dict[str, Any]:
    """The ``explore`` block, shaped as the plugin's (``Gate.explore_report``)."""
    return {
        "share": engine.explore_share,
        "period": engine.explore_period,
        "run": RUN_LENGTH,
        "batches": rank.batches_explored,
        "active": engine.explore_period > 0 and engine.explore_allowed(),
        "window": rank.explorer.window_report(),
    }


def apply(engine: Engine, request: knob_contract.KnobRequest) -> None:
    """Apply an accepted request's settings (the ceiling, the exploration share) to every rank."""
    if request.value is not None:
        engine.set_spec_max_bs(request.value)
    if request.explore_share is not None:
        engine.set_explore_share(request.explore_share)


def current_value(engine: Engine) -> int | None:
    values = {r.spec_max_bs for r in engine.ranks}
    return next(iter(values)) if len(values) == 1 else None
