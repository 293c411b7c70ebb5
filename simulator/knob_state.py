"""The simulator's side of the knob contract: who holds the knob, beside the engine's per-rank ceiling.

Ownership is ``control.knob_contract.KnobOwner``, the same logic the SGLang plugin runs, so the simulator
refuses, locks, expires and reports exactly as a real server with the plugin does. One owner per engine
(every rank of the simulated server sees the same requests, as every scheduler of a DP server does).
"""

from __future__ import annotations

import weakref
from typing import Any

from spectower.control import knob_contract
from spectower.simulator.engine import Engine

_OWNERS: weakref.WeakKeyDictionary[Engine, knob_contract.KnobOwner] = weakref.WeakKeyDictionary()


def owner_of(engine: Engine) -> knob_contract.KnobOwner:
    owner = _OWNERS.get(engine)
    if owner is None:
        owner = _OWNERS[engine] = knob_contract.KnobOwner()
    return owner


def report(engine: Engine) -> dict[str, Any]:
    """The contract's ownership block for ``internal_states[i]["spectower"]``."""
    return owner_of(engine).report()


def current_value(engine: Engine) -> int | None:
    values = {r.spec_max_bs for r in engine.ranks}
    return next(iter(values)) if len(values) == 1 else None
