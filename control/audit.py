"""The audit trail of the speculation knob, and the one function every caller uses to move it.

Every attempt becomes a ``ControlEvent`` row (who, when, old -> new, why, the per-rank read-back, the
outcome). ``apply_knob`` is what the CLI, the console and the policy runner call. Who holds the knob is NOT
kept here: the server keeps it (plugin/knob_contract.py), so a manual set holds against a policy whatever
database, URL spelling, host or console each of them uses. ``confirmed`` is true only when the read-back
shows this very request applied on every rank; otherwise ``error`` starts with ``not applied:`` or
``outcome unknown:``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..storage import queries
from ..storage.database import Database
from ..storage.models import ControlEvent, PolicyState
from .knob import KnobClient, explore_share_of
from .knob_state import (
    KnobError,
    KnobState,
    SetResult,
    Target,
    Writer,
    check_target,
    ensure_ready,
    normalize_server_url,
    prepare_set,
    resolve_target,
)

MAX_REASON_CHARS = 1000
ACTOR_KINDS = ("operator", "policy")
_ACTOR_NAME = re.compile(r"^[A-Za-z0-9_.@+:-]{1,64}$")

Clock = Callable[[], float]


class AuditError(ValueError):
    """A bad actor or reason: refused before anything reaches the server or the database."""


def validate_actor(actor: str) -> str:
    kind, sep, name = (actor or "").partition(":")
    if not sep or kind not in ACTOR_KINDS or not _ACTOR_NAME.match(name):
        raise AuditError(
            f"actor must be 'operator:NAME' or 'policy:MODE' (letters, digits, _.@+:-), got {actor!r}"
        )
    return actor


def operator_actor(name: str) -> str:
    """``operator:NAME`` for ``--as NAME``."""
    if not _ACTOR_NAME.match(name or ""):
        raise AuditError(f"--as must be 1-64 letters, digits or _.@+:- characters, got {name!r}")
    return f"operator:{name}"


def is_manual(actor: str) -> bool:
    return actor.startswith("operator:")


def validate_reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise AuditError("--reason is required and must not be empty: say why the knob moves")
    if len(text) > MAX_REASON_CHARS:
        raise AuditError(f"--reason is {len(text)} characters; keep it under {MAX_REASON_CHARS}")
    return text


def record_event(
    db: Database,
    *,
    actor: str,
    server_url: str,
    action: str,
    reason: str,
    old_max_bs: int | None = None,
    new_max_bs: int | None = None,
    confirmed: bool = False,
    per_rank: list[dict[str, Any]] | None = None,
    error: str | None = None,
    note: str | None = None,
    request_id: int | None = None,
    ts: float | None = None,
) -> ControlEvent:
    """Write one audit row now (its own transaction: storage's ``add_control_event``) and return it."""
    event = ControlEvent(
        ts=time.time() if ts is None else ts,
        actor=validate_actor(actor),
        server_url=server_url,
        action=action,
        old_max_bs=old_max_bs,
        new_max_bs=new_max_bs,
        reason=validate_reason(reason),
        confirmed=confirmed,
        per_rank_json=json.dumps(per_rank) if per_rank is not None else None,
        error=error,
        note=note,
        request_id=request_id,
    )
    return queries.add_control_event(db, event)


def record_failure(
    db: Database,
    server_url: str,
    actor: str,
    reason: str,
    exc: BaseException,
    *,
    old: int | None = None,
    new: int | None = None,
    clock: Clock = time.time,
    action: str = "set",
    note: str | None = None,
) -> ControlEvent:
    """Audit a set that was refused or failed (the message of our errors never holds a key)."""
    return record_event(
        db, actor=actor, server_url=server_url, action=action, reason=reason, old_max_bs=old,
        new_max_bs=new, confirmed=False, error=f"not applied: {type(exc).__name__}: {exc}", note=note,
        ts=clock(),
    )  # fmt: skip


def preview_knob(
    db: Database, client: KnobClient, new_max_bs: Target, reason: str, actor: str, *, clock: Clock = time.time
) -> tuple[KnobState, int]:
    """Read the server and work out old -> new without sending anything (for a confirmation prompt).

    A server that cannot take the value is refused here, and that refused attempt is audited.
    """
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    target = check_target(new_max_bs)
    state: KnobState | None = None
    try:
        state = client.read()
        ensure_ready(state)
        return state, resolve_target(state, target)
    except KnobError as exc:
        notes: list[str] = []
        old = _db_int(state.spec_max_bs if state is not None else None, "old value", notes)
        record_failure(db, client.base_url, actor, reason, exc, old=old, new=_static_new(target), clock=clock)
        raise


def _static_new(target: Target) -> int | None:
    return 0 if target == "off" else (target if isinstance(target, int) else None)


class PolicyPaused(Exception):
    """A policy's set was not applied: the server's lock (a manual set or a sweep) holds the knob."""

    def __init__(self, server_url: str, why: str) -> None:
        self.server_url, self.why = server_url, why
        super().__init__(f"the policy for {server_url} is paused: {why}")


# SQL INTEGER (SQLite, PostgreSQL BIGINT): a server value beyond it is audited as NULL with a note, never
# a crash after the change was applied.
DB_INT_MIN, DB_INT_MAX = -(2**63), 2**63 - 1


def _db_int(value: int | None, what: str, notes: list[str]) -> int | None:
    if value is None or DB_INT_MIN <= value <= DB_INT_MAX:
        return value
    notes.append(f"{what} {value} is beyond the database's INTEGER range (recorded as empty)")
    return None


def lock_text(state: KnobState) -> str:
    """``manual lock until released`` / ``sweep lock, 540 s left`` / ``no lock`` (from the server)."""
    if not state.ownership_supported:
        return "ownership not reported (plugin predates server-side locks)"
    if not state.locked:
        return "no lock: the policy may act"
    left = state.lock_left_s()
    return f"{state.owner} lock " + ("until released" if left is None else f"for {_duration(left)} more")


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"


def _writer_of(actor: str, writer: Writer | None) -> Writer:
    if writer is not None:
        return writer
    return "manual" if is_manual(actor) else "policy"


def apply_knob(
    db: Database,
    client: KnobClient,
    new_max_bs: Target,
    reason: str,
    actor: str,
    *,
    writer: Writer | None = None,
    hold_s: float | None = None,
    force: bool = False,
    clock: Clock = time.time,
) -> SetResult:
    """Set, settle the outcome by read-back, audit it. Returns the result whatever the outcome.

    Bad input (actor, reason, a negative, non-integer or too large value) is refused before anything is
    sent or written. Who may write is the server's decision (plugin/knob_contract.py): a manual set takes
    the server's lock (``hold_s`` seconds, or until released); a policy's set is refused while a lock holds
    (audited as not applied, then ``PolicyPaused`` is raised). The old value is the one the server itself
    recorded as replaced by this very request (atomic with the write), not an earlier read.
    """
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    target = check_target(new_max_bs)  # the one static check: bad input never reaches the server
    url = client.base_url
    kind = _writer_of(actor, writer)

    def audit_failure(exc: KnobError, old: int | None, new: int | None) -> None:
        notes: list[str] = []
        old, new = _db_int(old, "old value", notes), _db_int(new, "new value", notes)
        record_failure(db, url, actor, reason, exc, old=old, new=new, clock=clock)

    try:
        before = client.read()
    except KnobError as exc:
        audit_failure(exc, None, _static_new(target))
        raise
    try:
        request = prepare_set(before, target, writer=kind, hold_s=hold_s, force=force)  # the one resolve
    except KnobError as exc:
        audit_failure(exc, before.spec_max_bs, _static_new(target))
        raise
    try:
        result = client.write(request, before)
    except KnobError as exc:
        audit_failure(exc, before.spec_max_bs, request.value)
        raise
    _audit_result(db, actor, reason, "set", result, clock)
    if kind == "policy" and result.refused_by_lock:
        raise PolicyPaused(url, result.refused_why or "a lock holds")
    return result


def _share_text(share: float | None) -> str:
    return "unknown" if share is None else f"{share:g}"


def apply_explore_share(
    db: Database, client: KnobClient, share: float, reason: str, actor: str, *, clock: Clock = time.time
) -> SetResult:
    """Write the server's exploration share alone (no ceiling: no lock taken), settle it by read-back and
    audit it as action ``explore`` (the ceiling columns keep the current value; the note says old -> new
    share and what the server read back). A policy's write is refused while a lock holds: audited as not
    applied, then ``PolicyPaused`` is raised, as ``apply_knob`` does."""
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    url = client.base_url
    kind = _writer_of(actor, None)
    before: KnobState | None = None
    try:
        before = client.read()
        result = client.set_explore_share(share, before=before, writer=kind)
    except KnobError as exc:
        notes: list[str] = []
        old = _db_int(before.spec_max_bs if before is not None else None, "old value", notes)
        old_share = explore_share_of(before) if before is not None else None
        note = f"explore share {_share_text(old_share)} -> {share:g}"
        record_failure(db, url, actor, reason, exc, old=old, new=old, clock=clock, action="explore",
                       note=note)  # fmt: skip
        raise
    seen = explore_share_of(result.after) if result.after is not None else None
    old_share = explore_share_of(before)
    note = f"explore share {_share_text(old_share)} -> {share:g} (read back {_share_text(seen)})"
    _audit_result(db, actor, reason, "explore", result, clock, note=note)
    if kind == "policy" and result.refused_by_lock:
        raise PolicyPaused(url, result.refused_why or "a lock holds")
    return result


def _audit_result(
    db: Database,
    actor: str,
    reason: str,
    action: str,
    result: SetResult,
    clock: Clock,
    note: str | None = None,
) -> ControlEvent:
    # What went wrong goes to ``error``; what a row only tells (the lock a confirmed set took, a value the
    # database cannot hold) to ``note``: a confirmed set never reads as an error.
    notes: list[str] = [note] if note else []
    old = _db_int(result.old_max_bs, "old value", notes)
    new = _db_int(result.requested if result.requested is not None else result.old_max_bs, "new value", notes)
    if result.confirmed and result.after is not None and result.writer == "manual" and action == "set":
        notes.append(lock_text(result.after))
    return record_event(
        db, actor=actor, server_url=result.server_url, action=action, reason=reason, old_max_bs=old,
        new_max_bs=new, confirmed=result.confirmed, per_rank=result.per_rank(), error=result.error,
        note="; ".join(notes) or None, request_id=result.request_id, ts=clock(),
    )  # fmt: skip


def remarks(confirmed: bool, error: str | None, note: str | None) -> tuple[str | None, str | None]:
    """``(error, note)`` of an audit row as shown. A confirmed row has no error: rows written before schema
    v4 kept its note (the lock a set took, a sweep's summary) in ``error``, shown as the note it is."""
    if confirmed and error and not note:
        return None, error
    return error or None, note or None


# The server's clock and this host's may differ by this much: a lock whose set is not found by its request
# id (a plugin before the lock named it, or an audit row written before schema v4) is matched to the
# operator's confirmed set audited within this long of the lock's start.
LOCK_CLOCK_SLACK_S = 120.0


def lock_holder(db: Database, state: KnobState) -> ControlEvent | None:
    """The audit row of the operator's set that holds the server's manual lock (``actor`` says who, ``ts``
    since when, ``reason`` why), or None: no manual lock, or that set was audited in another database (or
    the lock is one a sweep gave back)."""
    lock = state.lock
    if not lock or lock.get("writer") != "manual":
        return None
    url = normalize_server_url(state.server_url)
    request_id = lock.get("request_id")
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        rows = queries.control_events(db, server_url=url, request_id=request_id, limit=1)
        return rows[0] if rows else None
    since = lock.get("since")
    if not isinstance(since, int | float):
        return None
    rows = queries.control_events(
        db, server_url=url, actor_prefix="operator:", action="set", confirmed=True,
        start=since - LOCK_CLOCK_SLACK_S, end=since + LOCK_CLOCK_SLACK_S, limit=1,
    )  # fmt: skip
    return rows[0] if rows else None


# ------------------------------------------------------------------------------- release


def get_policy_state(db: Database, server_url: str) -> PolicyState | None:
    """What the policy for ``server_url`` persisted (storage's query, the URL normalised as the runner
    writes it)."""
    return queries.policy_state(db, normalize_server_url(server_url))


@dataclass(frozen=True)
class ReleaseResult:
    event: ControlEvent
    was_locked: bool  # a lock held when the release was sent
    result: SetResult

    @property
    def was_paused(self) -> bool:  # the old name
        return self.was_locked


def release(
    db: Database, client: KnobClient, actor: str, reason: str, *, clock: Clock = time.time
) -> ReleaseResult:
    """Clear the server's lock so a policy (wherever it runs, whatever database it uses) acts again;
    read back and audited whatever the outcome."""
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    url = client.base_url
    try:
        before = client.read()
        result = client.release(before=before, writer="manual")
    except KnobError as exc:
        record_event(db, actor=actor, server_url=url, action="release", reason=reason, confirmed=False,
                     error=f"{type(exc).__name__}: {exc}", ts=clock())  # fmt: skip
        raise
    event = _audit_result(db, actor, reason, "release", result, clock)
    return ReleaseResult(event, before.locked, result)


# ------------------------------------------------------------------------------------------ queries


def list_events(
    db: Database,
    server_url: str | None = None,
    *,
    since: float | None = None,
    until: float | None = None,
    actor_prefix: str | None = None,
    action: str | None = None,
    limit: int = 100,
) -> list[ControlEvent]:
    """Audit rows, newest first (storage's query, with the URL normalised as the client writes it)."""
    return queries.control_events(
        db,
        server_url=normalize_server_url(server_url) if server_url is not None else None,
        start=since,
        end=until,
        actor_prefix=actor_prefix,
        action=action,
        limit=limit,
    )
