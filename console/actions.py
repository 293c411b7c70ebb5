"""The Control page's only way to touch a server: the knob client and the audited apply, from control/.

Kept apart from the views so the page code never builds HTTP requests or audit rows itself. A change goes
through ``control.audit.apply_knob`` (checked, resolved and audited once there); what comes back is the
typed ``SetResult``, turned into the ``ActionResult`` the page keeps in its session.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import settings

if TYPE_CHECKING:
    from ..control.knob import KnobClient
    from ..control.knob_state import KnobState, SetResult, Target

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
    action: str = "set"  # set / release / freeze-gc
    owner: str | None = None  # who holds the knob after it, as the server reports

    @classmethod
    def of(cls, result: SetResult, action: str = "set") -> ActionResult:
        """A write's outcome as the server read it back."""
        after = result.after
        return cls(
            server_url=result.server_url,
            requested=result.requested,
            old_max_bs=result.old_max_bs,
            confirmed=result.confirmed,
            read_back=after.spec_max_bs if after is not None else None,
            per_rank=result.per_rank(),
            error=result.error,
            outcome=result.outcome,
            action=action,
            owner=after.owner if after is not None else None,
        )

    @classmethod
    def refused(cls, server_url: str, requested: int | None, exc: BaseException, action: str) -> ActionResult:
        """A write refused before anything changed (the audit row is written by control.audit)."""
        return cls(
            server_url, requested, None, False, None, [], str(exc), outcome="not applied", action=action
        )


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default certificate verification, built once per console process: building it loads the
    CA bundle, 30-90 ms that the Control page's live read of the knob paid on every refresh."""
    import httpx

    return httpx.create_ssl_context()


def _client(server_url: str, operator: settings.Operator | None, timeout_s: float) -> KnobClient:
    """The operator's admin key for writes; the API key (environment or its file) for an --api-key server.
    The client's transport is httpx's default one, with the process's one verification context."""
    import httpx

    from ..control.credentials import load_api_key
    from ..control.knob import KnobClient

    admin_key = operator.admin_key if operator else None
    transport = httpx.HTTPTransport(verify=_tls_context())
    return KnobClient(
        server_url, admin_key=admin_key, api_key=load_api_key(), timeout=timeout_s, transport=transport
    )


def read_state(
    server_url: str, operator: settings.Operator | None, timeout_s: float = DEFAULT_ACTION_TIMEOUT_S
) -> KnobState:
    """The knob as the server reports it now: value per rank, owner, lock, last writer, policy's last."""
    with _client(server_url, operator, timeout_s) as client:
        return client.read()


# What a refused or failed write raises (our errors; none carries a key): shown as a result, never raised.
_REFUSALS = (ValueError, ConnectionError, PermissionError, LookupError)


def apply_knob(
    db_url: str,
    server_url: str,
    target: Target,
    reason: str,
    operator: settings.Operator,
    hold_s: float | None = None,
) -> ActionResult:
    """Set ``target`` (``"off"``, ``"on"`` or N), read back and audited through control.audit.apply_knob."""
    from ..control.audit import apply_knob as audited_apply
    from ..storage import open_database

    requested = target if isinstance(target, int) else (0 if target == "off" else None)
    with open_database(db_url) as db, _client(server_url, operator, DEFAULT_ACTION_TIMEOUT_S) as client:
        try:
            result = audited_apply(db, client, target, reason, operator.actor, hold_s=hold_s)
        except _REFUSALS as exc:
            return ActionResult.refused(server_url, requested, exc, "set")
    return ActionResult.of(result)


def release_lock(db_url: str, server_url: str, reason: str, operator: settings.Operator) -> ActionResult:
    """Clear the server's lock (manual or sweep) so a policy acts again; read back and audited."""
    from ..control.audit import release
    from ..storage import open_database

    with open_database(db_url) as db, _client(server_url, operator, DEFAULT_ACTION_TIMEOUT_S) as client:
        try:
            outcome = release(db, client, operator.actor, reason)
        except _REFUSALS as exc:
            return ActionResult.refused(server_url, None, exc, "release")
    return ActionResult.of(outcome.result, "release")


def freeze_gc(db_url: str, server_url: str, reason: str, operator: settings.Operator) -> ActionResult:
    """SGLang's /freeze_gc, read back from every process's frozen objects and audited
    (control.gc_freeze.freeze); the knob is not touched, so requested and read-back are its value."""
    from ..control.gc_freeze import freeze
    from ..storage import open_database

    with open_database(db_url) as db, _client(server_url, operator, DEFAULT_ACTION_TIMEOUT_S) as client:
        try:
            state = client.read()
            result = freeze(db, client, operator.actor, reason, before=state)
        except _REFUSALS as exc:
            return ActionResult.refused(server_url, None, exc, "freeze-gc")
    rows = [{"process": where, "frozen objects before": count,
             "after": result.after.get(where) if result.after is not None else None}
            for where, count in result.before.items()]  # fmt: skip
    knob = state.spec_max_bs
    outcome = "confirmed" if result.confirmed else "unknown"
    return ActionResult(server_url, None, knob, result.confirmed, knob, rows, result.error, outcome=outcome,
                        action="freeze-gc", owner=state.owner)  # fmt: skip


# ------------------------------------------------------------------------------------------- fleets


def read_fleet(
    replicas: Sequence[str], operator: settings.Operator | None, timeout_s: float = DEFAULT_ACTION_TIMEOUT_S
) -> list[tuple[str, KnobState | BaseException]]:
    """Every replica's knob as it reports it, read at once (an unreachable one: its error)."""
    from ..control.fleet_ops import read_all

    return read_all(replicas, lambda url: _client(url, operator, timeout_s))


def apply_fleet(
    db_url: str,
    replicas: Sequence[str],
    target: Target,
    reason: str,
    operator: settings.Operator,
    hold_s: float | None = None,
) -> list[dict[str, Any]]:
    """The fleet flip: ``target`` on every replica at once, each read back and audited
    (``control.fleet_ops.set_all``, as `control set --fleet`); one row per replica."""
    from ..control.fleet_ops import set_all
    from ..storage import open_database

    with open_database(db_url) as db:
        outcomes = set_all(db, replicas, lambda url: _client(url, operator, DEFAULT_ACTION_TIMEOUT_S), target,
                           reason, operator.actor, hold_s=hold_s)  # fmt: skip
    return [outcome.to_dict() for outcome in outcomes]


def release_fleet(
    db_url: str, replicas: Sequence[str], reason: str, operator: settings.Operator
) -> list[dict[str, Any]]:
    """Every replica's lock cleared at once, each read back and audited (``fleet_ops.release_all``)."""
    from ..control.fleet_ops import release_all
    from ..storage import open_database

    with open_database(db_url) as db:
        outcomes = release_all(db, replicas, lambda url: _client(url, operator, DEFAULT_ACTION_TIMEOUT_S),
                               operator.actor, reason)  # fmt: skip
    return [outcome.to_dict() for outcome in outcomes]
