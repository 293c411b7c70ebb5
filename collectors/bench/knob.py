"""Setting and reading the speculation knob during a sweep (docs/design.md's contract), behind a protocol.

A sweep BORROWS the knob and GIVES IT BACK (control/knob_contract.py; the same numeric keys the plugin and
the simulator implement):

- ``borrow()``: refused (unless forced) when the server is serving other requests or a manual lock holds
  (``KnobError`` naming ``--force``); otherwise the sweep takes the server's sweep lock (a policy is then
  refused by the server itself) at the value it found. The lock expires ``SWEEP_HOLD_S`` after the sweep's
  last write, so a sweep that dies does not hold the knob for ever.
- ``set()``: one move per slice, as the sweep writer (renewing the lock); recorded in ``moves`` (the run's
  own record), not in the audit trail. A write the server refuses (an operator took the knob during the
  sweep) stops the sweep.
- ``give_back()``: the value AND the owner found: no lock (the policy acts again), or the operator's manual
  lock with the time it had left; nothing is written when an operator took the knob during the sweep.

``on_borrow`` / ``on_give_back`` are called with a one-line summary (the CLI writes one audit row for each,
through control.audit: collectors do not import control's database side). Every request here has a
deadline (``KNOB_TIMEOUT_S``) and a byte cap, whatever the sweep's own (long) request timeout is.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from spectower.collectors.bench.errors import KnobError, ServerUnreachable
from spectower.collectors.bench.server import SERVER_INFO_PATH, auth_headers

# The wire contract is shared with the plugin and the simulator (standard library only).
from spectower.control import knob_contract as kc

SET_PATH = "/set_internal_state"
LOADS_PATH = "/v1/loads"
KNOB_KEY = kc.KNOB_KEY
KNOB_TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024
SWEEP_HOLD_S = kc.SWEEP_DEFAULT_HOLD_S
SETTLE_S = 10.0  # after a lost answer, poll /server_info this long for the request's fate
SETTLE_POLL_S = 0.2

Notify = Callable[[dict[str, Any]], None]


def knob_values(info: dict[str, Any]) -> list[int | None]:
    out: list[int | None] = []
    for state in info.get("internal_states") or []:
        spec = state.get("spectower") if isinstance(state, dict) else None
        value = spec.get("spec_max_bs") if isinstance(spec, dict) else None
        out.append(value if isinstance(value, int) else None)
    return out


def _blocks(info: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = []
    for state in info.get("internal_states") or []:
        spec = state.get("spectower") if isinstance(state, dict) else None
        blocks.append(spec if isinstance(spec, dict) else {})
    return blocks


@dataclass
class Found:
    """What the sweep found before it borrowed the knob."""

    value: int
    owner: str  # manual / sweep / policy
    lock_expires_at: float | None  # server clock; None with a lock = until released
    server_time: float | None
    running: int | None  # requests running + waiting on the server when the sweep started

    def describe(self) -> str:
        if self.owner == kc.OWNER_FREE:
            return f"value {self.value}, no lock"
        if self.lock_expires_at is None:
            return f"value {self.value}, {self.owner} lock until released"
        left = self.lock_expires_at - (self.server_time or 0.0)
        return f"value {self.value}, {self.owner} lock with {left:.0f} s left"


class Knob(Protocol):
    moves: list[dict[str, Any]]

    async def read(self) -> list[int | None]:
        """The live value per DP rank (None where a rank does not report it)."""
        ...

    async def borrow(self) -> Found:
        """Take the sweep lock (or raise ``KnobError`` saying why not and naming --force)."""
        ...

    async def set(self, max_bs: int, reason: str) -> None:
        """Set the value and confirm it on every rank, or raise ``KnobError``."""
        ...

    async def give_back(self) -> tuple[bool, str]:
        """Restore the value and owner found: (restored, one-line summary)."""
        ...


@dataclass
class HttpKnob:
    """The sweep's knob over plain HTTP (the sweep writer class of the contract)."""

    client: httpx.AsyncClient
    admin_key: str | None
    force: bool = False
    on_borrow: Notify | None = None
    on_give_back: Notify | None = None
    found: Found | None = None
    moves: list[dict[str, Any]] = field(default_factory=list)  # the run's own record of per-slice moves
    borrowed: bool = False

    # -- HTTP with a deadline and a byte cap

    async def _get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        deadline = time.monotonic() + KNOB_TIMEOUT_S
        try:
            async with self.client.stream("GET", path, params=params, timeout=KNOB_TIMEOUT_S) as resp:
                if resp.status_code != 200:
                    raise ServerUnreachable(f"knob: {path} answered HTTP {resp.status_code}")
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body.extend(chunk)
                    if len(body) > MAX_ANSWER_BYTES:
                        raise ServerUnreachable(f"knob: {path} answered more than {MAX_ANSWER_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise ServerUnreachable(f"knob: {path} did not answer within {KNOB_TIMEOUT_S:g} s")
            return json.loads(bytes(body))
        except (httpx.HTTPError, ValueError) as exc:
            raise ServerUnreachable(f"knob: {path} failed: {exc}") from None

    async def _info(self) -> dict[str, Any]:
        info = await self._get_json(SERVER_INFO_PATH)
        if not isinstance(info, dict):
            raise ServerUnreachable(f"knob: {SERVER_INFO_PATH} did not answer a JSON object")
        return info

    async def read(self) -> list[int | None]:
        return knob_values(await self._info())

    async def _in_flight(self) -> int | None:
        """Requests running + waiting on the server now (None when /v1/loads cannot tell)."""
        try:
            loads = await self._get_json(LOADS_PATH, {"include": "core"})
        except ServerUnreachable:
            return None
        total = 0
        items = loads.get("loads") if isinstance(loads, dict) else None
        for load in items or []:
            if not isinstance(load, dict):
                return None
            total += int(load.get("num_running_reqs") or 0) + int(load.get("num_waiting_reqs") or 0)
        return total

    async def _write(self, request: kc.KnobRequest, what: str) -> dict[str, Any]:
        """Send one contract request; settle a lost answer by read-back. Returns the server's block."""
        body = {"server_args": request.to_server_args()}
        answer: Any = None
        lost: str | None = None
        try:
            resp = await self.client.post(
                SET_PATH, json=body, headers=auth_headers(self.admin_key), timeout=KNOB_TIMEOUT_S
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ServerUnreachable(f"knob: {SET_PATH} unreachable ({exc}); nothing was sent") from None
        except httpx.HTTPError as exc:
            lost = f"{type(exc).__name__}: {exc}"
        else:
            if resp.status_code in (401, 403):
                raise KnobError(
                    f"knob refused: {SET_PATH} answered HTTP {resp.status_code}; set SPECTOWER_ADMIN_KEY "
                    "or SPECTOWER_ADMIN_KEY_FILE to the server's --admin-api-key"
                )
            if resp.status_code != 200:
                text = resp.text[:200]
                raise KnobError(f"knob refused: {SET_PATH} answered HTTP {resp.status_code}: {text}")
            try:
                answer = resp.json()
            except ValueError:
                lost = "the answer was not JSON"
        deadline = time.monotonic() + (SETTLE_S if lost else 0.0)
        while True:
            blocks = _blocks(await self._info())
            applied = [(b.get("last_write") or {}).get("request_id") == request.request_id for b in blocks]
            refused = [(b.get("last_refused") or {}).get("request_id") == request.request_id for b in blocks]
            if blocks and all(applied):
                return blocks[0]
            said_no = isinstance(answer, list) and bool(answer) and not any(answer)
            if (blocks and all(refused)) or said_no:
                why = next((str((b.get("last_refused") or {}).get("why")) for b in blocks if b), "refused")
                raise KnobError(f"knob: the server refused the sweep's {what}: {why}")
            if time.monotonic() >= deadline:
                raise KnobError(
                    f"knob: the outcome of the sweep's {what} is unknown ({lost or f'answered {answer!r}'}; "
                    f"read-back per rank {[b.get('spec_max_bs') for b in blocks]})"
                )
            await _sleep(SETTLE_POLL_S)

    def _request(self, **kw: Any) -> kc.KnobRequest:
        return kc.KnobRequest(writer=kc.WRITER_SWEEP, request_id=random.SystemRandom().randrange(
            1, kc.MAX_REQUEST_ID), **kw)  # fmt: skip

    # -- borrow, move, give back

    async def borrow(self) -> Found:
        try:
            return await self._borrow()
        except (KnobError, ServerUnreachable) as exc:
            if self.on_borrow is not None:  # a refused borrow is a control attempt too: audited
                self.on_borrow({"failed": f"{type(exc).__name__}: {exc}", "found": self.found})
            raise

    async def _borrow(self) -> Found:
        info = await self._info()
        blocks = _blocks(info)
        values = knob_values(info)
        if not blocks or any(v is None for v in values) or any("owner" not in b for b in blocks):
            raise KnobError(
                "knob: the server's spectower plugin does not report who holds the knob (plugin 0.2.0 or "
                "newer is needed for a sweep to borrow it)"
            )
        first = blocks[0]
        lock = first.get("lock") or {}
        found = Found(
            value=int(values[0] or 0), owner=str(first.get("owner")),
            lock_expires_at=lock.get("expires_at"), server_time=first.get("server_time"),
            running=await self._in_flight(),
        )  # fmt: skip
        problems = []
        if found.running is None:
            problems.append("cannot tell whether the server is busy (/v1/loads did not answer)")
        elif found.running > 0:
            problems.append(f"the server is serving {found.running} other request(s) right now")
        if found.owner != kc.OWNER_FREE:
            problems.append(f"the knob is held ({found.describe()})")
        self.found = found
        if problems and not self.force:
            raise KnobError(
                "bench sweep refused: " + "; ".join(problems) + ". A sweep moves the knob for everyone on "
                "this server; run it off-peak, release the lock, or pass --force"
            )
        block = await self._write(
            self._request(value=found.value, hold_s=SWEEP_HOLD_S, force=self.force), "borrow"
        )
        self.borrowed = True
        if self.on_borrow is not None:
            self.on_borrow({"found": found, "forced": bool(problems), "problems": problems, "block": block})
        return found

    async def set(self, max_bs: int, reason: str) -> None:
        block = await self._write(self._request(value=max_bs, hold_s=SWEEP_HOLD_S), f"move to {max_bs}")
        previous = (block.get("last_write") or {}).get("previous")
        self.moves.append({"ts": time.time(), "value": max_bs, "previous": previous, "reason": reason})
        if block.get("spec_max_bs") != max_bs:
            seen = block.get("spec_max_bs")
            raise KnobError(f"knob not confirmed: set {KNOB_KEY}={max_bs}, server reports {seen}")

    async def give_back(self) -> tuple[bool, str]:
        """Restore the value and owner found; (restored, one-line summary)."""
        found = self.found
        if found is None or not self.borrowed:
            return False, "nothing borrowed"
        try:
            info = await self._info()
            first = (_blocks(info) or [{}])[0]
            if first.get("owner") != "sweep":
                last = first.get("last_write") or {}
                summary = (
                    f"not restored: the knob is now held by {first.get('owner')} (last writer "
                    f"{last.get('writer')}, value {first.get('spec_max_bs')}); left as it is"
                )
                self._notify_back(False, summary)
                return False, summary
            kw: dict[str, Any] = {"value": found.value, "release": True}
            if found.owner == "manual":
                if found.lock_expires_at is None:
                    kw.update(lock_as=kc.WRITER_MANUAL, hold_s=0)
                else:
                    left = float(found.lock_expires_at) - float(first.get("server_time") or 0.0)
                    if left >= 1.0:
                        kw.update(lock_as=kc.WRITER_MANUAL, hold_s=min(left, kc.MAX_HOLD_S))
            block = await self._write(self._request(**kw), "restore")
        except (KnobError, ServerUnreachable) as exc:
            summary = f"not restored: {exc}"
            self._notify_back(False, summary)
            return False, summary
        owner = block.get("owner")
        summary = f"restored value {block.get('spec_max_bs')} and owner {owner} (found {found.describe()})"
        self._notify_back(True, summary)
        return True, summary

    def _notify_back(self, restored: bool, summary: str) -> None:
        self.borrowed = False
        if self.on_give_back is not None:
            self.on_give_back({"restored": restored, "summary": summary, "found": self.found,
                               "moves": len(self.moves)})  # fmt: skip


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)
