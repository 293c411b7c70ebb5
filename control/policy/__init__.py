"""Load-aware speculation policies: ``make_policy(spec, max_running_requests, **options) -> Policy``.

Specs: ``learn``, ``threshold:N``, ``always-on``, ``always-off``, ``sglang-default``.
Of ours, this package imports only the engine counters and the speedup estimator (``plugin.engine_counters``,
``control.speedup``; no server, storage or simulator code): the simulator's harness imports it, never the
other way round.
"""

from __future__ import annotations

from typing import Any

from .base import Decision, Observation, Policy, PolicyError
from .static import SglangDefaultPolicy, ThresholdPolicy

POLICY_SPECS = ("learn", "threshold:N", "always-on", "always-off", "sglang-default")

__all__ = [
    "POLICY_SPECS",
    "Decision",
    "Observation",
    "Policy",
    "PolicyError",
    "make_policy",
]


def make_policy(spec: str, max_running_requests: int, **options: Any) -> Policy:
    """Build the policy named by ``spec``.

    A bad spec or option raises PolicyError (a ValueError) naming it.
    """
    if not isinstance(max_running_requests, int) or isinstance(max_running_requests, bool) \
            or max_running_requests < 1:
        raise PolicyError(f"max_running_requests must be an integer >= 1, got {max_running_requests!r}")
    text = spec.strip() if isinstance(spec, str) else spec
    if text == "learn":
        from .learn import LearnPolicy

        return LearnPolicy(max_running_requests, **options)
    if options:
        raise PolicyError(f"policy {spec!r} takes no options, got {sorted(options)}")
    if text == "always-on":
        return ThresholdPolicy(max_running_requests, max_running_requests, name="always-on")
    if text == "always-off":
        return ThresholdPolicy(0, max_running_requests, name="always-off")
    if text == "sglang-default":
        return SglangDefaultPolicy(max_running_requests)
    if isinstance(text, str) and text.startswith("threshold:"):
        raw = text.removeprefix("threshold:")
        if not raw.isdigit():
            raise PolicyError(f"policy {spec!r}: threshold:N needs a non-negative integer N, got {raw!r}")
        return ThresholdPolicy(int(raw), max_running_requests, name=f"threshold:{int(raw)}")
    raise PolicyError(f"unknown policy {spec!r}; expected one of {', '.join(POLICY_SPECS)}")
