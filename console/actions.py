"""The Control page's only way to touch a server: the knob client and the audited apply, from control/.

Kept apart from the views so the page code never builds HTTP requests or audit rows itself.
"""

from __future__ import annotations

import dataclasses
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
    outcome: str = "unknown"  # confirmed / not applied / unknown
    action: str = "set"  # set / release
    owner: str | None = None  # who holds the knob after it, as the server reports


def read_live(
    server_url: str, operator: settings.Operator | None, timeout_s: float = DEFAULT_ACTION_TIMEOUT_S
) -> dict[str, Any]:
    """The knob as the server reports it now: value per rank, owner, lock, last writer, policy's last."""
    from spectower.control.credentials import load_api_key
    from spectower.control.knob import KnobClient

    with KnobClient(
        server_url, admin_key=operator.admin_key if operator else None, api_key=load_api_key(),
        timeout=timeout_s,
    ) as client:  # fmt: skip
        return client.read().to_dict()


def apply_knob(
    db_url: str,
    server_url: str,
    new_max_bs: int,
    reason: str,
    operator: settings.Operator,
    hold_s: float | None = None,
) -> ActionResult:
    """Set, read back and audit through control.audit.apply_knob; errors come back as a result, not raised."""
    from spectower.control.audit import apply_knob as audited_apply
    from spectower.control.knob import KnobClient, KnobError
    from spectower.storage import open_database

    db = open_database(db_url)
    try:
        with KnobClient(server_url, admin_key=operator.admin_key, timeout=DEFAULT_ACTION_TIMEOUT_S) as client:
            try:
                outcome = audited_apply(db, client, new_max_bs, reason, operator.actor, hold_s=hold_s)
            except (KnobError, ValueError, ConnectionError, PermissionError, LookupError) as exc:
                return ActionResult(
                    server_url, new_max_bs, None, False, None, [], str(exc), outcome="not applied"
                )
    finally:
        close = getattr(db, "close", None) or getattr(db, "dispose", None)
        if callable(close):
            close()
    return _result(server_url, new_max_bs, outcome)


def _result(server_url: str, requested: int | None, outcome: Any) -> ActionResult:
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
        outcome=str(getattr(outcome, "outcome", "unknown")),
        owner=getattr(after, "owner", None) if after is not None else None,
    )


def release_lock(db_url: str, server_url: str, reason: str, operator: settings.Operator) -> ActionResult:
    """Clear the server's lock (manual or sweep) so a policy acts again; read back and audited."""
    from spectower.control.audit import release
    from spectower.control.knob import KnobClient, KnobError
    from spectower.storage import open_database

    db = open_database(db_url)
    try:
        with KnobClient(server_url, admin_key=operator.admin_key, timeout=DEFAULT_ACTION_TIMEOUT_S) as client:
            try:
                outcome = release(db, client, operator.actor, reason)
            except (KnobError, ValueError, ConnectionError, PermissionError, LookupError) as exc:
                return ActionResult(server_url, None, None, False, None, [], str(exc), outcome="not applied",
                                    action="release")  # fmt: skip
    finally:
        db.close()
    result = _result(server_url, None, outcome.result)
    return dataclasses.replace(result, action="release")
