"""``learn``'s persisted state (``LearnPolicy.state()``), checked whole before any of it is used: a state that
fails a check is refused naming the field, and the policy keeps what it had (nothing half-loaded).

Besides the counters snapshots of its window and its change history it keeps when the server's counters
started (their ``started_at``) and when it saw them start anew: a restarted server is back at its launch
ceiling, and the moves made before the restart went to a process that is gone (``LearnPolicy._may_flip``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...plugin import engine_counters, knob_contract
from .base import PolicyError

STATE_VERSION = 2


@dataclass(frozen=True)
class LearnState:
    flip_times: list[float]  # oldest first
    snapshots: list[tuple[float, dict[str, Any]]]  # oldest first
    share_asked: float | None  # the exploration share last asked for (None: none asked)
    share_confirmed: bool
    decided_since: float | None
    server_started_at: float | None  # the counters' ``started_at`` last seen (absent: the newest snapshot's)
    restart_seen_at: float | None  # when the policy saw them start anew (None: not since it ran)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _optional_number(state: dict[str, Any], key: str) -> float | None:
    value = state.get(key)
    if value is not None and not _number(value):
        raise PolicyError(f"learn state: {key!r} must be a number or null")
    return None if value is None else float(value)


def _snapshots(raw: Any) -> list[tuple[float, dict[str, Any]]]:
    if not isinstance(raw, list):
        raise PolicyError("learn state: 'snapshots' must be a list of [ts, counters] pairs")
    snapshots: list[tuple[float, dict[str, Any]]] = []
    for i, item in enumerate(raw):
        if not isinstance(item, list) or len(item) != 2 or not _number(item[0]):
            raise PolicyError(f"learn state: 'snapshots[{i}]' must be a [ts, counters] pair")
        problem = engine_counters.validate(item[1])
        if problem is not None:
            raise PolicyError(f"learn state: 'snapshots[{i}]': {problem}")
        snapshots.append((float(item[0]), dict(item[1])))
    return sorted(snapshots, key=lambda pair: pair[0])


def parsed(state: Any, name: str) -> LearnState:
    """``state`` checked: a version-``STATE_VERSION`` state of the policy called ``name``."""
    if not isinstance(state, dict):
        raise PolicyError("learn state must be an object")
    if state.get("policy") != name or state.get("version") != STATE_VERSION:
        raise PolicyError(
            f"learn state: not a version-{STATE_VERSION} learn state "
            f"(policy={state.get('policy')!r}, version={state.get('version')!r})"
        )
    flips = state.get("flip_times", [])
    if not isinstance(flips, list) or not all(_number(t) for t in flips):
        raise PolicyError("learn state: 'flip_times' must be a list of numbers")
    snapshots = _snapshots(state.get("snapshots", []))
    asked = state.get("explore_share_asked")
    if asked is not None:
        try:
            asked = knob_contract.explore_share_of(asked, "learn state: 'explore_share_asked'")
        except knob_contract.ContractError as exc:
            raise PolicyError(str(exc)) from None
    confirmed = state.get("explore_share_confirmed", False)
    if not isinstance(confirmed, bool):
        raise PolicyError("learn state: 'explore_share_confirmed' must be true or false")
    started = _optional_number(state, "server_started_at")
    if started is None and snapshots:
        started = _optional_number(snapshots[-1][1], "started_at")
    return LearnState(
        flip_times=sorted(float(t) for t in flips),
        snapshots=snapshots,
        share_asked=asked,
        share_confirmed=confirmed,
        decided_since=_optional_number(state, "decided_since"),
        server_started_at=started,
        restart_seen_at=_optional_number(state, "restart_seen_at"),
    )
