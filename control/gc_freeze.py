"""Freeze a server's garbage collectors (SGLang's ``/freeze_gc``), read back and audited.

Why: on the H200 under Azure's replay every stretch of a run's p99 TTFT was a full collection in SGLang's
launcher (0.33-0.44 s over ~790 000 objects, about once a minute), a pause for every request's output; after
``/freeze_gc`` none reached 0.05 s (data/gpu-runs/NOTEBOOK.md, 2026-12-05). SGLang's own warning advises it
after some warm-up. An operator does it here as any control action: with the admin key, confirmed, read back
(plugin 0.4.8 reports the objects each process has frozen: ``gc.get_freeze_count()`` in the launcher's block
and in each rank's ``gc``), and audited as action ``freeze-gc`` with the knob unchanged.

A server whose plugin does not report frozen objects is refused before anything is sent: a freeze it cannot
read back would be a write nobody can confirm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..collectors.sglang.launcher import first_launcher
from ..storage.database import Database
from .audit import Clock, record_event, validate_actor, validate_reason
from .knob import AnswerLostError, KnobClient
from .knob_state import KnobError, KnobState, KnobUnsupportedError

ACTION = "freeze-gc"


def frozen_counts(state: KnobState) -> dict[str, int | None]:
    """Objects each process has frozen, as the plugin reports them: ``launcher`` (once: every rank carries
    the same block) and ``rank N`` (its scheduler); None where a process does not say."""
    launcher = first_launcher(rank.launcher for rank in state.ranks)
    counts: dict[str, int | None] = {} if launcher is None else {"launcher": launcher.frozen}
    for rank in state.ranks:
        frozen = (rank.gc or {}).get("frozen")
        readable = isinstance(frozen, int) and not isinstance(frozen, bool)
        counts[f"rank {rank.dp_rank}"] = frozen if readable else None
    return counts


def _counts_text(before: dict[str, int | None], after: dict[str, int | None] | None) -> str:
    def n(value: int | None) -> str:
        return "?" if value is None else f"{value:,}".replace(",", " ")

    return "; ".join(f"{where} {n(old)} -> {n(after.get(where)) if after is not None else '?'}"
                     for where, old in before.items())  # fmt: skip


def check_readable(state: KnobState) -> dict[str, int | None]:
    """The counts before, or KnobUnsupportedError where a freeze could not be read back."""
    counts = frozen_counts(state)
    if "launcher" not in counts or None in counts.values():
        raise KnobUnsupportedError(
            f"{state.server_url} does not report its frozen objects (spectower plugin 0.4.8 or later, with "
            "its spectower-loop-stalls entry point): a freeze could not be read back, so none is sent"
        )
    return counts


@dataclass(frozen=True)
class FreezeResult:
    server_url: str
    confirmed: bool  # every process reads back frozen objects
    answer: str | None  # the server's own words ("Garbage collection frozen.")
    before: dict[str, int | None]
    after: dict[str, int | None] | None  # None: no read-back came
    error: str | None = None

    def text(self) -> str:
        return _counts_text(self.before, self.after)


def freeze(
    db: Database, client: KnobClient, actor: str, reason: str, *, before: KnobState | None = None,
    clock: Clock = time.time,
) -> FreezeResult:  # fmt: skip
    """Freeze, read back and audit (whatever the outcome); what refused it before the send is audited and
    raised."""
    actor = validate_actor(actor)
    reason = validate_reason(reason)
    url = client.base_url
    state: KnobState | None = before
    try:
        state = state if state is not None else client.read()
        counts = check_readable(state)
        answer: str | None = None
        lost: str | None = None
        try:
            answer = client.freeze_gc()
        except AnswerLostError as exc:  # it may have frozen: the read-back says
            lost = str(exc)
    except KnobError as exc:
        knob = state.spec_max_bs if state is not None else None
        record_event(db, actor=actor, server_url=url, action=ACTION, reason=reason, old_max_bs=knob,
                     new_max_bs=knob, confirmed=False, error=f"not applied: {type(exc).__name__}: {exc}",
                     ts=clock())  # fmt: skip
        raise
    result = _read_back(client, url, counts, answer, lost)
    record_event(db, actor=actor, server_url=url, action=ACTION, reason=reason, old_max_bs=state.spec_max_bs,
                 new_max_bs=state.spec_max_bs, confirmed=result.confirmed, error=result.error,
                 note=f"frozen objects: {result.text()}" + (f"; the server said: {answer}" if answer else ""),
                 ts=clock())  # fmt: skip
    return result


def _read_back(
    client: KnobClient, url: str, before: dict[str, int | None], answer: str | None, lost: str | None
) -> FreezeResult:
    try:
        after = frozen_counts(client.read())
    except KnobError as exc:
        why = f"{lost}; " if lost else ""
        return FreezeResult(url, False, answer, before, None, f"{why}no read-back: {exc}")
    unfrozen = [where for where in before if not after.get(where)]
    error = None
    if unfrozen:
        error = (f"{lost}; " if lost else "") + f"nothing frozen on {', '.join(unfrozen)} after the freeze"
    return FreezeResult(url, not unfrozen, answer, before, after, error)
