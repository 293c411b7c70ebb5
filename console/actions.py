"""The Control page's only way to touch a server: the knob client and the audited apply, from control/.

Kept apart from the views so the page code never builds HTTP requests or audit rows itself.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from spectower.console import settings

DEFAULT_ACTION_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ActionResult:
    """What the page shows after Confirm: the requested value and what the server reads back."""

    server_url: str
    requested: int | None
    old_max_bs: int | None
    confirmed: bool
    read_back: int | None
    per_rank: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    ts: float = field(default_factory=time.time)


def read_live(server_url: str, operator: settings.Operator | None) -> dict[str, Any]:
    """Ask the server for its knob now (an explicit operator action, never on a refresh)."""
    from spectower.control.knob import KnobClient

    with KnobClient(
        server_url, admin_key=operator.admin_key if operator else None, timeout=DEFAULT_ACTION_TIMEOUT_S
    ) as client:
        return client.read().to_dict()


def apply_knob(
    db_url: str, server_url: str, new_max_bs: int, reason: str, operator: settings.Operator
) -> ActionResult:
    """Set, read back and audit through control.audit.apply_knob; errors come back as a result, not raised."""
    from spectower.control.audit import apply_knob as audited_apply
    from spectower.control.knob import KnobClient, KnobError
    from spectower.storage import open_database

    db = open_database(db_url)
    try:
        with KnobClient(server_url, admin_key=operator.admin_key, timeout=DEFAULT_ACTION_TIMEOUT_S) as client:
            try:
                outcome = audited_apply(db, client, new_max_bs, reason, operator.actor)
            except (KnobError, ValueError, ConnectionError, PermissionError, LookupError) as exc:
                return ActionResult(server_url, new_max_bs, None, False, None, [], str(exc))
    finally:
        close = getattr(db, "close", None) or getattr(db, "dispose", None)
        if callable(close):
            close()
    return _result(server_url, new_max_bs, outcome)


def _result(server_url: str, requested: int, outcome: Any) -> ActionResult:
    """Read the outcome of control.audit.apply_knob (a SetResult, or an object/ControlEvent like it)."""
    per_rank: list[dict[str, Any]] = []
    if callable(getattr(outcome, "per_rank", None)):
        per_rank = outcome.per_rank()
    elif getattr(outcome, "per_rank_json", None):
        per_rank = json.loads(outcome.per_rank_json)
    after = getattr(outcome, "after", None)
    read_back = getattr(after, "spec_max_bs", None) if after is not None else None
    if read_back is None and per_rank:
        values = {r.get("spec_max_bs") for r in per_rank}
        read_back = next(iter(values)) if len(values) == 1 else None
    return ActionResult(
        server_url=server_url,
        requested=requested,
        old_max_bs=getattr(outcome, "old_max_bs", None),
        confirmed=bool(getattr(outcome, "confirmed", False)),
        read_back=read_back,
        per_rank=per_rank,
        error=getattr(outcome, "error", None),
    )


def release_policy(db_url: str, server_url: str, reason: str, operator: settings.Operator) -> str:
    """Lift a manual pause so the learning policy acts again (audited by spectower.control.audit.release)."""
    from spectower.control.audit import release
    from spectower.storage import open_database

    with open_database(db_url) as db:
        result = release(db, server_url, operator.actor, reason)
    return "released: the policy acts again" if result.was_paused else "the policy was not paused"
