"""`bench sweep`'s knob: collectors/bench/knob.py's ``Knob`` protocol on the one knob client, audited.

Every write goes through ``control.knob.KnobClient`` (its bounded reads, its contract request, its read-back
that settles a late or lost answer) as the contract's sweep writer; the per-slice moves go through
``prepare_set`` like any other set. The audit trail gets ONE row when the sweep borrows the knob (or is
refused it) and ONE when it gives it back; the per-slice moves are the run's own record
(``SweepResult.knob_moves``), not control actions. The client is synchronous and a sweep's knob moves are
rare (one per slice), so each call runs in a worker thread and never blocks the sweep's event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..collectors.bench.knob import SWEEP_HOLD_S, Found
from ..collectors.sglang.server_info import knob_values
from ..plugin import knob_contract
from ..plugin.knob_contract import KnobRequest
from ..storage.database import Database
from . import audit
from .credentials import Credentials
from .knob import KnobClient
from .knob_state import (
    OWNERSHIP_PLUGIN_VERSION,
    KnobError,
    KnobState,
    PluginMissingError,
    SetResult,
    ensure_ready,
    new_request_id,
    prepare_set,
)
from .sglang_config import PLUGIN_INSTALL_HINT

SWEEP_REASON = "bench sweep"
# Every knob request of a sweep has this deadline, whatever the sweep's own (long) request timeout is.
KNOB_TIMEOUT_S = 10.0


class SweepKnobError(KnobError, PermissionError):
    """The sweep may not borrow the knob now, or the server refused (or did not confirm) a sweep's write."""


class SweepKnob:
    """The sweep's knob on one server: borrow, move once per slice, give back. Use as a context manager
    (or call :meth:`close`) so the client's connections are released."""

    def __init__(
        self, client: KnobClient, db: Database, actor: str, *, force: bool = False, reason: str = SWEEP_REASON
    ) -> None:
        self.client = client
        self.db = db
        self.actor = audit.validate_actor(actor)
        self.reason = audit.validate_reason(reason)
        self.force = force
        self.found: Found | None = None
        self.moves: list[dict[str, Any]] = []  # the run's own record of per-slice moves
        self.borrowed = False
        self._state: KnobState | None = None  # the server as last read back

    def __enter__(self) -> SweepKnob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    async def _read(self) -> KnobState:
        self._state = await asyncio.to_thread(self.client.read)
        return self._state

    async def _write(self, what: str, request: KnobRequest | None = None, **release: Any) -> SetResult:
        """One contract request (a set, or a release with ``release``'s options), settled by read-back;
        raises SweepKnobError unless every rank confirmed it."""
        before = self._state if self._state is not None else await self._read()
        if request is not None:
            result = await asyncio.to_thread(self.client.write, request, before)
        else:
            result = await asyncio.to_thread(self.client.release, before=before, writer="sweep", **release)
        if result.after is not None:
            self._state = result.after
        if result.outcome == "not applied":
            why = result.refused_why or result.error or "refused"
            raise SweepKnobError(f"knob: the server refused the sweep's {what}: {why}")
        if not result.confirmed:
            raise SweepKnobError(f"knob: the outcome of the sweep's {what} is unknown ({result.error})")
        return result

    async def read(self) -> list[int | None]:
        state = await self._read()
        if not state.plugin_installed:
            raise PluginMissingError(
                f"knob: {self.client.base_url}/server_info reports no internal_states[i].spectower."
                f"spec_max_bs: the spectower plugin is not installed on this server; {PLUGIN_INSTALL_HINT}"
            )
        return knob_values(state.info)

    async def borrow(self, running: int | None) -> Found:
        try:
            return await self._borrow(running)
        except KnobError as exc:  # a refused borrow is a control attempt too: audited
            old = self.found.value if self.found is not None else None
            self._record("sweep-start", old_max_bs=old, confirmed=False,
                         error=f"not applied: {type(exc).__name__}: {exc}"[:2000])  # fmt: skip
            raise

    async def _borrow(self, running: int | None) -> Found:
        state = await self._read()
        ranks = state.ranks
        if not state.ownership_supported or any(rank.spec_max_bs is None for rank in ranks):
            raise SweepKnobError(
                "knob: the server's spectower plugin does not report who holds the knob (plugin "
                f"{OWNERSHIP_PLUGIN_VERSION} or newer is needed for a sweep to borrow it)"
            )
        ensure_ready(state)
        first = ranks[0]
        found = Found(
            value=int(first.spec_max_bs or 0), owner=str(first.owner),
            lock_expires_at=(first.lock or {}).get("expires_at"), server_time=first.server_time,
            running=running,
        )  # fmt: skip
        self.found = found
        problems = []
        if running is None:
            problems.append("cannot tell whether the server is busy (/v1/loads did not answer)")
        elif running > 0:
            problems.append(f"the server is serving {running} other request(s) right now")
        if found.owner != knob_contract.OWNER_FREE:
            problems.append(f"the knob is held ({found.describe()})")
        if problems and not self.force:
            raise SweepKnobError(
                "bench sweep refused: " + "; ".join(problems) + ". A sweep moves the knob for everyone on "
                "this server; run it off-peak, release the lock, or pass --force"
            )
        # the value found, under the sweep's lock: the value itself is given back as it was, not resolved
        request = KnobRequest(
            writer=knob_contract.WRITER_SWEEP, value=found.value, hold_s=SWEEP_HOLD_S, force=self.force,
            request_id=new_request_id(),
        )  # fmt: skip
        await self._write("borrow", request)
        self.borrowed = True
        note = f"borrowed with a sweep lock; found {found.describe()}"
        if problems:
            note += " (--force: " + "; ".join(problems) + ")"
        self._record(
            "sweep-start", old_max_bs=found.value, new_max_bs=found.value, confirmed=True, error=note
        )
        return found

    async def set(self, max_bs: int, reason: str) -> None:
        state = self._state if self._state is not None else await self._read()
        request = prepare_set(state, max_bs, writer="sweep", hold_s=SWEEP_HOLD_S)
        result = await self._write(f"move to {max_bs}", request)
        self.moves.append({"ts": time.time(), "value": max_bs, "previous": result.previous, "reason": reason})

    async def give_back(self) -> tuple[bool, str]:
        """Restore the value and owner found; (restored, one-line summary)."""
        found = self.found
        if found is None or not self.borrowed:
            return False, "nothing borrowed"
        try:
            state = await self._read()
            first = state.ranks[0] if state.ranks else None
            if first is None or first.owner != "sweep":
                last = (first.last_write if first is not None else None) or {}
                summary = (
                    f"not restored: the knob is now held by {first.owner if first else None} (last writer "
                    f"{last.get('writer')}, value {first.spec_max_bs if first else None}); left as it is"
                )
                return self._gave_back(False, summary)
            # an operator's lock the sweep borrowed goes back to the operator, with the time it had left
            lock_as_manual, hold_s = False, None
            if found.owner == "manual":
                if found.lock_expires_at is None:
                    lock_as_manual, hold_s = True, 0.0
                else:
                    left = float(found.lock_expires_at) - float(first.server_time or 0.0)
                    if left >= 1.0:
                        lock_as_manual, hold_s = True, min(left, knob_contract.MAX_HOLD_S)
            result = await self._write(
                "restore", value=found.value, lock_as_manual=lock_as_manual, hold_s=hold_s
            )
        except KnobError as exc:
            return self._gave_back(False, f"not restored: {exc}")
        value, owner = (result.after.spec_max_bs, result.after.owner) if result.after else (None, None)
        summary = f"restored value {value} and owner {owner} (found {found.describe()})"
        return self._gave_back(True, summary)

    def _gave_back(self, restored: bool, summary: str) -> tuple[bool, str]:
        self.borrowed = False
        found = self.found
        said = f"{summary}; {len(self.moves)} knob moves in the run's record"
        self._record("sweep-end", confirmed=restored, new_max_bs=found.value if found is not None else None,
                     **{"note" if restored else "error": said})  # fmt: skip
        return restored, summary

    def _record(self, action: str, **fields: Any) -> None:
        audit.record_event(
            self.db, actor=self.actor, server_url=self.client.base_url, action=action, reason=self.reason,
            **fields,
        )  # fmt: skip


def audited_sweep_knob(
    server_url: str, credentials: Credentials, db: Database, actor: str, *, force: bool = False,
    reason: str = SWEEP_REASON,
) -> SweepKnob:  # fmt: skip
    """The sweep's knob on ``server_url``, borrowed and given back under ``actor`` (who ran the sweep)."""
    client = KnobClient(
        server_url, admin_key=credentials.admin_key, api_key=credentials.api_key, timeout=KNOB_TIMEOUT_S
    )
    return SweepKnob(client, db, actor, force=force, reason=reason)
