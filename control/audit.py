"""The audit trail of the speculation knob, and the one function every caller uses to move it.

Every attempt, confirmed or refused, becomes a ``ControlEvent`` row (who, when, old -> new, why, the
per-rank read-back, the error). ``apply_knob`` is what the CLI, the console and the policy runner call; a
manual (``operator:``) set also pauses that server's policy until ``release``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from spectower.control.db import read_session, write_session
from spectower.control.knob import (
    KnobClient,
    KnobError,
    KnobState,
    SetResult,
    Target,
    check_target,
    ensure_ready,
    normalize_server_url,
    resolve_target,
)
from spectower.storage import queries
from spectower.storage.models import ControlEvent, PolicyState
from sqlmodel import select

# "Until released", as a float every SQL backend stores exactly (9999-12-31T23:59:59Z); inf is not portable.
PAUSE_UNTIL_RELEASED = 253402300799.0
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
    db: Any,
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
    ts: float | None = None,
) -> ControlEvent:
    """Write one audit row now (its own transaction) and return it."""
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
    )
    with write_session(db) as session:
        session.add(event)
    return event


def record_failure(
    db: Any,
    server_url: str,
    actor: str,
    reason: str,
    exc: BaseException,
    *,
    old: int | None = None,
    new: int | None = None,
    clock: Clock = time.time,
) -> ControlEvent:
    """Audit a set that was refused or failed (the message of our errors never holds a key)."""
    return record_event(
        db, actor=actor, server_url=server_url, action="set", reason=reason, old_max_bs=old,
        new_max_bs=new, confirmed=False, error=f"{type(exc).__name__}: {exc}", ts=clock(),
    )  # fmt: skip


def preview_knob(
    db: Any, client: KnobClient, new_max_bs: Target, reason: str, actor: str, *, clock: Clock = time.time
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
        old = state.spec_max_bs if state is not None else None
        record_failure(db, client.base_url, actor, reason, exc, old=old, new=_static_new(target), clock=clock)
        raise


def _static_new(target: Target) -> int | None:
    return 0 if target == "off" else (target if isinstance(target, int) else None)


class PolicyPaused(Exception):
    """A policy's set was not sent: a manual set paused the server's policy (raised by ``apply_knob``)."""

    def __init__(self, server_url: str, until: float) -> None:
        self.server_url, self.until = server_url, until
        when = "until released" if until >= PAUSE_UNTIL_RELEASED else f"until {until:.0f}"
        super().__init__(f"the policy for {server_url} is paused by a manual set {when}")


def _ensure_policy_row(db: Any, url: str, now: float) -> None:
    with write_session(db) as session:
        if session.get(PolicyState, url) is None:
            session.add(PolicyState(server_url=url, updated_ts=now, mode="", state_json="{}"))


@contextmanager
def knob_lock(db: Any, server_url: str, now: float) -> Iterator[PolicyState]:
    """The server's PolicyState row, locked for writing until the block ends (then committed).

    A policy's "not paused? then set" and an operator's "set, then pause" each run inside this lock, so they
    cannot interleave: either the policy's set lands first and the operator's overrides it, or the policy
    sees the pause. SQLite: the transaction began IMMEDIATE; PostgreSQL: the row is SELECTed FOR UPDATE.
    The lock is held for one set and its read-back (milliseconds on a healthy server, at most the client's
    timeouts); other writers wait within their busy timeout. Write nothing else to the database inside it.
    """
    _ensure_policy_row(db, server_url, now)
    with write_session(db) as session:
        row = session.exec(
            select(PolicyState).where(PolicyState.server_url == server_url).with_for_update()
        ).one()
        yield row
        session.add(row)


def apply_knob(
    db: Any,
    client: KnobClient,
    new_max_bs: Target,
    reason: str,
    actor: str,
    *,
    clock: Clock = time.time,
) -> SetResult:
    """Read the old value, set, read back, audit; a manual actor also pauses the server's policy.

    Bad input (actor, reason, a negative or non-integer value) is refused before anything is sent or
    written. Every attempt past that is audited, and a refused one re-raises the knob error. A policy
    actor's set is not sent while the server's policy is paused (``PolicyPaused``, not audited: nothing
    was attempted); the pause check and the set are atomic against a manual set (``knob_lock``).
    """
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    target = check_target(new_max_bs)
    url = client.base_url
    manual = is_manual(actor)

    def audit_failure(exc: KnobError, old: int | None, new: int | None) -> None:
        record_failure(db, url, actor, reason, exc, old=old, new=new, clock=clock)

    try:
        before = client.read()
    except KnobError as exc:
        audit_failure(exc, None, _static_new(target))
        raise
    try:
        new_value: int | None = resolve_target(before, target)
    except KnobError:
        new_value = _static_new(target)
    paused_now = False
    try:
        with knob_lock(db, url, clock()) as row:
            now = clock()
            if not manual and row.paused_until is not None and row.paused_until > now:
                raise PolicyPaused(url, row.paused_until)
            result = client.set(target, before=before)
            if manual and any(result.accepted):  # a manual set always wins: pause in the same lock
                row.paused_until, row.updated_ts = PAUSE_UNTIL_RELEASED, now
                paused_now = True
    except KnobError as exc:
        audit_failure(exc, before.spec_max_bs, new_value)
        raise

    error = result.error
    if error is None and not result.confirmed:
        seen = [row["spec_max_bs"] for row in result.per_rank()]
        error = f"not confirmed: read-back per rank {seen}, requested {result.requested}"
    record_event(
        db, actor=actor, server_url=url, action="set", reason=reason, old_max_bs=result.old_max_bs,
        new_max_bs=result.requested, confirmed=result.confirmed, per_rank=result.per_rank(), error=error,
        ts=clock(),
    )  # fmt: skip
    if paused_now:
        record_event(db, actor=actor, server_url=url, action="pause", reason=f"manual set: {reason}",
                     confirmed=True, ts=clock())  # fmt: skip
    return result


# ------------------------------------------------------------------------------- pause / release


def get_policy_state(db: Any, server_url: str) -> PolicyState | None:
    with read_session(db) as session:
        return session.get(PolicyState, normalize_server_url(server_url))


def paused_until(db: Any, server_url: str, now: float | None = None) -> float | None:
    """When the server's policy resumes (``PAUSE_UNTIL_RELEASED`` = on release), or None if not paused."""
    state = get_policy_state(db, server_url)
    if state is None or state.paused_until is None:
        return None
    current = time.time() if now is None else now
    return state.paused_until if state.paused_until > current else None


def pause_policy(
    db: Any,
    server_url: str,
    *,
    actor: str,
    reason: str,
    until: float = PAUSE_UNTIL_RELEASED,
    clock: Clock = time.time,
) -> ControlEvent:
    """Pause the server's policy (a manual set always wins) and audit it."""
    url = normalize_server_url(server_url)
    now = clock()
    with write_session(db) as session:
        state = session.get(PolicyState, url)
        if state is None:
            # No policy has run yet: the row still carries the pause for the one that starts later.
            session.add(
                PolicyState(server_url=url, updated_ts=now, mode="", paused_until=until, state_json="{}")
            )
        else:
            state.paused_until = until
            state.updated_ts = now
            session.add(state)
    return record_event(
        db, actor=actor, server_url=url, action="pause", reason=reason, confirmed=True, ts=now
    )


@dataclass(frozen=True)
class ReleaseResult:
    event: ControlEvent
    was_paused: bool


def release(
    db: Any, server_url: str, actor: str, reason: str, *, clock: Clock = time.time
) -> ReleaseResult:
    """Lift a manual pause so the server's policy (if one runs) acts again; audited either way."""
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    url = normalize_server_url(server_url)
    now = clock()
    with write_session(db) as session:
        state = session.get(PolicyState, url)
        was_paused = state is not None and state.paused_until is not None and state.paused_until > now
        if state is not None and state.paused_until is not None:
            state.paused_until = None
            state.updated_ts = now
            session.add(state)
    event = record_event(
        db, actor=actor, server_url=url, action="release", reason=reason, confirmed=True,
        error=None if was_paused else "the policy was not paused", ts=now,
    )  # fmt: skip
    return ReleaseResult(event, was_paused)


# ------------------------------------------------------------------------------------------ queries


def list_events(
    db: Any,
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
