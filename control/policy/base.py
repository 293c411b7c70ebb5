"""The policy interface: what a policy sees (Observation), what it answers (Decision), and its protocol.

A policy is the slow loop of the control plane (seconds to minutes): every decision interval the runner
(live: ``spectower control auto``; offline: ``simulator.harness``) hands it one Observation built only from
what a real SGLang server exposes, and applies the Decision through the speculation knob
(``spectower_spec_max_bs``: draft while the running batch is <= N; 0 = off; >= max_running_requests = on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Observation:
    """Server-visible signals over the last decision interval, aggregated over DP ranks."""

    ts: float  # Unix seconds (virtual seconds in the harness)
    num_running_reqs: float  # mean over the interval
    num_queue_reqs: float  # mean over the interval
    output_tok_s: float | None  # measured aggregate output tok/s over the last interval
    accept_length: float | None  # spec accept length over the interval (1.0 = nothing drafted)
    spec_max_bs: int | None  # the knob's read-back (None: unknown / plugin not reporting)
    max_running_requests: int
    stale: bool  # metrics stale or server unreachable: never act on this observation
    # The engine's decode counters at ``ts`` (plugin/engine_counters.py's snapshot, summed over DP ranks
    # with plugin.engine_counters.sum_ranks); None when the server does not publish them (no plugin, an older
    # one, a failed read).
    counters: Mapping[str, Any] | None = None
    # The server's exploration share as it reports it (``spectower_explore_share``: every rank's ``explore``
    # block agreeing); None when unknown (no plugin, an older one, ranks that disagree, a failed read).
    explore_share: float | None = None


@dataclass(frozen=True)
class Decision:
    """``max_bs`` None = hold (leave the knob as it is); otherwise set the knob to it. ``explore_share`` None
    = leave the server's exploration share as it is; otherwise write it (``spectower_explore_share``, alone:
    it takes no lock)."""

    max_bs: int | None
    reason: str
    explore_share: float | None = None


@runtime_checkable
class Policy(Protocol):
    name: str

    def decide(self, obs: Observation) -> Decision: ...

    def state(self) -> dict[str, Any]:
        """JSON-serialisable state, persisted by the runner so a restart does not start from nothing."""
        ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class PolicyError(ValueError):
    """A bad policy spec or option; the message names it."""
