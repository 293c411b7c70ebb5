"""The knob of a whole fleet at once: read, preview, set and release every replica concurrently.

Each replica goes through exactly what one server goes through (``control.audit.preview_knob`` /
``apply_knob`` / ``release``: checked, written, read back per DP rank, audited), on its own client in its
own thread, so a replica that does not answer costs its own deadline and nothing else: the others are
still set, and its row names why. The CLI (`control set --fleet`) and the console's fleet page both call
these and show the same ``ReplicaOutcome`` rows.

Exit codes of a fleet write (the CLI's): 0 every replica confirmed, 3 some confirmed and some not
(partial), 1 none confirmed. 2 stays the code of bad input (nothing sent).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..storage.database import Database
from . import audit
from .knob import KnobClient
from .knob_state import KnobState, SetResult, Target, check_target

EXIT_ALL_CONFIRMED = 0
EXIT_NONE_CONFIRMED = 1
EXIT_PARTIAL = 3
MAX_PARALLEL = 32  # threads at once; each waits on the network, not the CPU

T = TypeVar("T")
ClientFor = Callable[[str], KnobClient]
# What refused or failed writes raise (our errors name the server and never carry a key).
FAILURES = (ValueError, ConnectionError, PermissionError, LookupError, audit.PolicyPaused)


@dataclass(frozen=True)
class ReplicaOutcome:
    """One replica's row: the value before and after, who holds the knob after, confirmed or why not."""

    replica: str
    before: int | None
    after: int | None
    owner: str | None
    confirmed: bool
    why: str | None = None
    max_running_requests: int | None = None

    @classmethod
    def of(cls, result: SetResult) -> ReplicaOutcome:
        after = result.after
        return cls(
            result.server_url, result.old_max_bs, after.spec_max_bs if after is not None else None,
            after.owner if after is not None else None, result.confirmed,
            None if result.confirmed else (result.error or result.outcome),
            result.before.max_running_requests,
        )  # fmt: skip

    @classmethod
    def failed(cls, replica: str, exc: BaseException) -> ReplicaOutcome:
        return cls(replica, None, None, None, False, str(exc) or type(exc).__name__)

    def to_dict(self) -> dict[str, object]:
        return {
            "replica": self.replica, "before": self.before, "after": self.after, "owner": self.owner,
            "confirmed": self.confirmed, "why": self.why,
        }  # fmt: skip


def each(replicas: Sequence[str], work: Callable[[str], T]) -> list[tuple[str, T | BaseException]]:
    """``work(replica)`` for every replica at once, in the replicas' order; an exception is that replica's
    answer (one replica failing never stops the others)."""
    if not replicas:
        return []
    answers: dict[str, T | BaseException] = {}
    with concurrent.futures.ThreadPoolExecutor(min(MAX_PARALLEL, len(replicas)), "fleet") as pool:
        futures = {pool.submit(work, replica): replica for replica in replicas}
        for future in concurrent.futures.as_completed(futures):
            try:
                answers[futures[future]] = future.result()
            except Exception as exc:
                answers[futures[future]] = exc
    return [(replica, answers[replica]) for replica in replicas]


def exit_code(outcomes: Sequence[ReplicaOutcome]) -> int:
    return exit_code_of([o.confirmed for o in outcomes])


def exit_code_of(done: Sequence[bool]) -> int:
    """The exit code of any fleet command from whether each replica's part was done: 0 all, 3 some
    (partial), 1 none (also the code of an empty fleet)."""
    count = sum(1 for d in done if d)
    if done and count == len(done):
        return EXIT_ALL_CONFIRMED
    return EXIT_PARTIAL if count else EXIT_NONE_CONFIRMED


def read_all(replicas: Sequence[str], client_for: ClientFor) -> list[tuple[str, KnobState | BaseException]]:
    """Every replica's knob as it reports it (an unreachable one: its error)."""

    def read(replica: str) -> KnobState:
        with client_for(replica) as client:
            return client.read()

    return each(replicas, read)


@dataclass(frozen=True)
class Preview:
    """One replica before a fleet set: its state and the value the target resolves to there, or why it
    cannot be set (already audited as a refused attempt by ``audit.preview_knob``)."""

    replica: str
    state: KnobState | None
    new: int | None
    problem: str | None


def preview(
    db: Database, replicas: Sequence[str], client_for: ClientFor, target: Target, reason: str, actor: str
) -> list[Preview]:
    """old -> new on every replica, nothing sent (for the one confirmation of a fleet set)."""
    check_target(target)

    def one(replica: str) -> tuple[KnobState, int]:
        with client_for(replica) as client:
            return audit.preview_knob(db, client, target, reason, actor)

    rows = []
    for replica, got in each(replicas, one):
        if isinstance(got, BaseException):
            rows.append(Preview(replica, None, None, str(got) or type(got).__name__))
        else:
            rows.append(Preview(replica, got[0], got[1], None))
    return rows


def set_all(
    db: Database,
    replicas: Sequence[str],
    client_for: ClientFor,
    target: Target,
    reason: str,
    actor: str,
    *,
    hold_s: float | None = None,
) -> list[ReplicaOutcome]:
    """Set ``target`` on every replica at once, each read back and audited (``audit.apply_knob``)."""
    actor, reason, target = audit.validate_actor(actor), audit.validate_reason(reason), check_target(target)

    def one(replica: str) -> SetResult:
        with client_for(replica) as client:
            return audit.apply_knob(db, client, target, reason, actor, hold_s=hold_s)

    return [_outcome(replica, got) for replica, got in each(replicas, one)]


def release_all(
    db: Database, replicas: Sequence[str], client_for: ClientFor, actor: str, reason: str
) -> list[ReplicaOutcome]:
    """Clear every replica's lock at once, each read back and audited (``audit.release``)."""
    actor, reason = audit.validate_actor(actor), audit.validate_reason(reason)

    def one(replica: str) -> SetResult:
        with client_for(replica) as client:
            return audit.release(db, client, actor, reason).result

    return [_outcome(replica, got) for replica, got in each(replicas, one)]


def _outcome(replica: str, got: SetResult | BaseException) -> ReplicaOutcome:
    if isinstance(got, SetResult):
        return ReplicaOutcome.of(got)
    if isinstance(got, FAILURES):
        return ReplicaOutcome.failed(replica, got)
    raise got  # not a replica's refusal (a database error, a bug): the caller's to show


def timed(work: Callable[[], T]) -> tuple[T, float]:
    """``work()`` and how long it took (seconds): the figure a fleet write prints."""
    started = time.monotonic()
    value = work()
    return value, time.monotonic() - started
