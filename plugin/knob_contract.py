"""The knob's wire contract and its ownership logic: ONE module that the SGLang plugin, the simulator and the
client all import, so the three cannot drift apart. Standard library only (the plugin imports it inside
SGLang's processes).

SGLang's ``/set_internal_state`` carries numbers only (``Dict[str, Union[int, float]]``), so who writes and
what they ask for travel as numeric keys beside the value, in the SAME request; the server applies all of
them or none (``updated=False`` on a refusal, nothing changed):

==========================  ==========================================================================
key                         meaning
==========================  ==========================================================================
``spectower_spec_max_bs``   N >= 0: drafting only while the running batch is <= N (0 = off)
``spectower_writer``        who writes: 1 = manual (an operator), 2 = policy, 3 = sweep. Absent: an
                            unmarked write (curl, an older client) that applies like a manual one but
                            takes no lock and leaves any lock as it is
``spectower_hold_s``        manual: the lock lasts this many seconds (0 or absent = until released);
                            sweep: its lock expires this many seconds after its last write
                            (absent = ``SWEEP_DEFAULT_HOLD_S``), so a dead sweep frees the knob
``spectower_release``       1 = clear the lock (manual: any lock; sweep: its own lock only)
``spectower_force``         1 = a sweep may take the knob over a manual lock (``bench sweep --force``)
``spectower_lock_as``       1 = (sweep only, with release) leave a manual lock behind: a sweep giving back
                            a knob it borrowed from an operator; ``spectower_hold_s`` is its remaining time
``spectower_request_id``    1 .. 2**53-1, chosen by the client: the read-back names the request that
                            was applied (``last_write``) or refused (``last_refused``), so a set whose
                            answer was late or lost still has a known outcome
``spectower_explore_share`` 0 .. 0.2: the share of decode batches, per batch-size bin, that run the other
                            mode than the ceiling says (runs of 4, one batch in ``round(1 / share)`` of a
                            bin: plugin/explore.py), so
                            drafted and gated step rates stay measured at every load; 0 = none; paused
                            while a lock holds the knob (an operator's off means off). Alone (no value,
                            hold or release) it takes no lock. Default ``DEFAULT_EXPLORE_SHARE``, or
                            ``SPECTOWER_EXPLORE_SHARE`` in the server's environment at launch
==========================  ==========================================================================

Rules (``KnobOwner.check``): a manual write always applies (an operator in an incident wins over a sweep and
a policy) and takes the manual lock; a policy write is refused while any lock holds; a sweep write is
refused while a manual lock holds unless forced; a policy never releases. Locks expire by the server's clock.

What ``/server_info`` reports per DP rank, under ``internal_states[i]["spectower"]`` (``KnobOwner.report``):
``owner`` ("manual" / "sweep" while that lock holds, else "policy"), ``lock`` (``{"writer", "since",
"expires_at", "request_id"}`` or null; ``expires_at`` null = until released; ``request_id`` the request that
took a manual lock, so the client finds who in its audit, null for one a sweep left behind),
``last_write`` (``{"writer", "value", "previous", "ts", "request_id", "release"}``), ``last_refused``
(``{"writer", "request_id", "ts", "why"}``), ``policy_last`` (the policy's last attempt: ``{"value", "ts",
"applied"}``), ``server_time`` and ``contract_version``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CONTRACT_VERSION = 1
KEY_PREFIX = "spectower_"
KNOB_KEY = "spectower_spec_max_bs"
WRITER_KEY = "spectower_writer"
HOLD_KEY = "spectower_hold_s"
RELEASE_KEY = "spectower_release"
FORCE_KEY = "spectower_force"
LOCK_AS_KEY = "spectower_lock_as"
REQUEST_ID_KEY = "spectower_request_id"
EXPLORE_KEY = "spectower_explore_share"
KEYS = (KNOB_KEY, WRITER_KEY, HOLD_KEY, RELEASE_KEY, FORCE_KEY, LOCK_AS_KEY, REQUEST_ID_KEY, EXPLORE_KEY)

WRITER_MANUAL = 1
WRITER_POLICY = 2
WRITER_SWEEP = 3
WRITER_NAMES = {WRITER_MANUAL: "manual", WRITER_POLICY: "policy", WRITER_SWEEP: "sweep"}
WRITER_CODES = {name: code for code, name in WRITER_NAMES.items()}
OWNER_FREE = "policy"  # no lock: the policy (if one runs) may move the knob

MAX_SPEC_MAX_BS = 2**31 - 1  # fits every database's INTEGER; far above any max_running_requests
MAX_HOLD_S = 30 * 86400.0
# The shortest hold an operator sets (CLI and console; the server takes any from 0): a bare number is
# seconds, so a `30` meant as minutes would be a lock over before anyone read it back.
MIN_OPERATOR_HOLD_S = 60.0
MAX_REQUEST_ID = 2**53 - 1  # exact in a JSON double
SWEEP_DEFAULT_HOLD_S = 900.0
# Exploration (``spectower_explore_share``): 2 % of each bin's batches run the other mode by default, so the
# engine counters keep measuring both modes at every load the server sees; above 20 % it is no longer "a
# small share" (it would cost more than the knob can win).
DEFAULT_EXPLORE_SHARE = 0.02
MAX_EXPLORE_SHARE = 0.2
EXPLORE_ENV = "SPECTOWER_EXPLORE_SHARE"


class ContractError(ValueError):
    """A request that breaks the contract; the message names the key."""


@dataclass(frozen=True)
class KnobRequest:
    """Our part of one ``/set_internal_state`` request, validated."""

    writer: int = WRITER_MANUAL
    value: int | None = None
    hold_s: float | None = None
    release: bool = False
    force: bool = False
    lock_as: int | None = None
    request_id: int | None = None
    unmarked: bool = False  # no spectower_writer key: a bare write (curl, an older client)
    explore_share: float | None = None  # a new exploration share (None: unchanged)

    @property
    def settings_only(self) -> bool:
        """Only a server setting (the exploration share): no ceiling, hold or release, so no lock moves."""
        return self.value is None and self.hold_s is None and not self.release

    @property
    def writer_name(self) -> str:
        return WRITER_NAMES[self.writer]

    def to_server_args(self) -> dict[str, int | float]:
        """The numeric keys to send (only those that differ from the defaults, plus the writer)."""
        args: dict[str, int | float] = {} if self.unmarked else {WRITER_KEY: self.writer}
        if self.value is not None:
            args[KNOB_KEY] = self.value
        if self.hold_s is not None:
            args[HOLD_KEY] = int(self.hold_s) if float(self.hold_s).is_integer() else self.hold_s
        if self.release:
            args[RELEASE_KEY] = 1
        if self.force:
            args[FORCE_KEY] = 1
        if self.lock_as is not None:
            args[LOCK_AS_KEY] = self.lock_as
        if self.request_id is not None:
            args[REQUEST_ID_KEY] = self.request_id
        if self.explore_share is not None:
            args[EXPLORE_KEY] = self.explore_share
        parse_request(args)  # a client never sends what a server would refuse as malformed
        return args


def _int(key: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        kind = type(value).__name__
        raise ContractError(f"{key} must be an integer in {low}..{high}, got {value!r} ({kind})")
    if not low <= value <= high:
        raise ContractError(f"{key} must be an integer in {low}..{high}, got {value}")
    return value


def explore_share_of(value: object, key: str = EXPLORE_KEY) -> float:
    """A valid exploration share (0 .. ``MAX_EXPLORE_SHARE``) or ContractError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractError(f"{key} must be a number in 0..{MAX_EXPLORE_SHARE:g}, got {value!r}")
    if not 0 <= value <= MAX_EXPLORE_SHARE:
        raise ContractError(f"{key} must be a number in 0..{MAX_EXPLORE_SHARE:g}, got {value}")
    return float(value)


def explore_period(share: float) -> int:
    """Every how many batches of a bin one runs the other mode (0: never): ``round(1 / share)``."""
    return round(1.0 / share) if share > 0 else 0


def extend_skippable(
    gated_by_ceiling: bool, period: int, owner: str, window_phase: str | None = None
) -> bool:
    """Whether a gated batch may skip the draft model's KV extend: the ceiling gated it (not exploration,
    not SGLang's own bands) and no batch of its kind explores drafting (``period`` 0, or a lock holds the
    knob, which pauses exploration), or exploration runs in windows (plugin/explore.py) and the batch is in a
    window's cold part (``window_phase`` "cold"). The one rule for the SGLang plugin
    (plugin/knob_gate.py, read by the gated-decode plugin's skip), the simulator's ranks and its policy
    harness. A request that ran through a skipped extend has holes in its draft KV: once the ceiling lets its
    batch draft again, the gated-decode plugin holds the batch at 0 steps with the extend until such requests
    have finished (the drain). A batch gated by exploration inside a drafting bin keeps the extend (its
    requests go on drafting), and so does every gated batch of a window's warm and exploring parts, so that
    explored drafting finds the draft warm: with the extend, gated batches served 0.87-0.97 of the knob at 0
    locked on the H200 (data/gpu-runs/NOTEBOOK.md); the windows confine that to a few % of the gated
    batches."""
    if not gated_by_ceiling:
        return False
    return not (period > 0 and owner == OWNER_FREE) or window_phase == "cold"


def prefill_skippable(
    ceiling: int | None, next_batch_gated: bool, period: int, owner: str, window_phase: str | None = None
) -> bool:
    """Whether a prefill batch may skip the draft model's pass over its prompts: a lock holds the knob at 0
    (an operator's off, a sweep's 0: nothing drafts or explores until it is released), or the decode batch
    its requests join next will be gated by the ceiling and may skip its extend (``extend_skippable``:
    nothing exploring, or the last batch in an exploration window's cold part). That step would skip the
    extend and hole the requests anyway, so the skip adds no drain of its own; where the next batch may
    draft (a drafting bin, the load falling under the ceiling, an idle loop: ``Gate.next_batch_gated``) or a
    window's warm and exploring parts prepare explored drafting, the prompts go through the draft. The one
    rule for the SGLang plugin (``knob_gate.prefill_skip_allowed``) and the simulator (its wire ranks and its
    open loop)."""
    locked_at_zero = ceiling == 0 and owner != OWNER_FREE
    return locked_at_zero or extend_skippable(next_batch_gated, period, owner, window_phase)


def _flag(key: str, value: object) -> bool:
    return bool(_int(key, value, 0, 1))


def ours(server_args: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a request that belong to spectower (any ``spectower_*`` key)."""
    return {k: v for k, v in server_args.items() if isinstance(k, str) and k.startswith(KEY_PREFIX)}


def parse_request(server_args: Mapping[str, Any]) -> KnobRequest | None:
    """Validate our keys of a request: None when it carries none, else the request; ContractError naming the
    key when malformed (the server then refuses the whole request)."""
    mine = ours(server_args)
    if not mine:
        return None
    unknown = sorted(set(mine) - set(KEYS))
    if unknown:
        raise ContractError(f"unknown spectower key {unknown[0]} (known: {', '.join(KEYS)})")
    writer = _int(WRITER_KEY, mine.get(WRITER_KEY, WRITER_MANUAL), 1, 3)
    value = _int(KNOB_KEY, mine[KNOB_KEY], 0, MAX_SPEC_MAX_BS) if KNOB_KEY in mine else None
    hold: float | None = None
    if HOLD_KEY in mine:
        raw = mine[HOLD_KEY]
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
            raise ContractError(f"{HOLD_KEY} must be a number of seconds in 0..{MAX_HOLD_S:g}, got {raw!r}")
        if not 0 <= raw <= MAX_HOLD_S:
            raise ContractError(f"{HOLD_KEY} must be a number of seconds in 0..{MAX_HOLD_S:g}, got {raw}")
        hold = float(raw)
    release = _flag(RELEASE_KEY, mine.get(RELEASE_KEY, 0))
    force = _flag(FORCE_KEY, mine.get(FORCE_KEY, 0))
    lock_as = request_id = None
    if LOCK_AS_KEY in mine:
        lock_as = _int(LOCK_AS_KEY, mine[LOCK_AS_KEY], WRITER_MANUAL, WRITER_MANUAL)
    if REQUEST_ID_KEY in mine:
        request_id = _int(REQUEST_ID_KEY, mine[REQUEST_ID_KEY], 1, MAX_REQUEST_ID)
    explore = explore_share_of(mine[EXPLORE_KEY]) if EXPLORE_KEY in mine else None
    if writer == WRITER_POLICY and (release or force or lock_as is not None or hold):
        raise ContractError(f"a policy write ({WRITER_KEY}=2) takes no hold, release, force or lock_as")
    if lock_as is not None and not (writer == WRITER_SWEEP and release):
        raise ContractError(
            f"{LOCK_AS_KEY} goes only with a sweep's release ({WRITER_KEY}=3, {RELEASE_KEY}=1)"
        )
    manual_hold = writer == WRITER_MANUAL and hold is not None
    if value is None and not release and explore is None and not manual_hold:
        raise ContractError(
            f"nothing to do: give {KNOB_KEY}, {RELEASE_KEY}=1, {EXPLORE_KEY}, or (manual) {HOLD_KEY}"
        )
    unmarked = WRITER_KEY not in mine
    if unmarked and (hold is not None or release or force or lock_as is not None):
        raise ContractError(f"{HOLD_KEY}, {RELEASE_KEY}, {FORCE_KEY} and {LOCK_AS_KEY} need {WRITER_KEY}")
    return KnobRequest(writer, value, hold, release, force, lock_as, request_id, unmarked, explore)


def request_id_of(server_args: Mapping[str, Any]) -> int | None:
    """The request id of a (possibly malformed) request, for ``last_refused``."""
    raw = server_args.get(REQUEST_ID_KEY) if isinstance(server_args, Mapping) else None
    if isinstance(raw, int) and not isinstance(raw, bool) and 1 <= raw <= MAX_REQUEST_ID:
        return raw
    return None


def writer_of(server_args: Mapping[str, Any]) -> str:
    raw = server_args.get(WRITER_KEY, WRITER_MANUAL) if isinstance(server_args, Mapping) else None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return WRITER_NAMES.get(raw, "unknown")
    return "unknown"


class KnobOwner:
    """Who holds the knob, on one server process (one per SGLang scheduler; one for the simulator).

    ``check`` then (only if the rest of the request was accepted) ``commit``, under ``lock``; or
    ``refuse`` to record why a request did not apply. Times are the server's own clock.
    """

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.lock_writer: int | None = None
        self.lock_since: float | None = None
        self.lock_expires_at: float | None = None  # None with a lock: until released
        self.lock_request_id: int | None = None  # the manual set that took the lock (its audit row says who)
        self.last_write: dict[str, Any] | None = None
        self.last_refused: dict[str, Any] | None = None
        self.policy_last: dict[str, Any] | None = None

    def _expire(self, now: float) -> None:
        if self.lock_writer is not None and self.lock_expires_at is not None and now >= self.lock_expires_at:
            self.lock_writer = self.lock_since = self.lock_expires_at = self.lock_request_id = None

    def owner(self, now: float | None = None) -> str:
        with self.lock:
            self._expire(self.clock() if now is None else now)
            return WRITER_NAMES[self.lock_writer] if self.lock_writer is not None else OWNER_FREE

    def check(self, request: KnobRequest, now: float | None = None) -> str | None:
        """Why this request may not apply now (None: it may)."""
        with self.lock:
            now = self.clock() if now is None else now
            self._expire(now)
            held = self.lock_writer
            if held is None or request.writer == WRITER_MANUAL:
                return None
            until = "until released" if self.lock_expires_at is None else f"until {self.lock_expires_at:.0f}"
            if request.writer == WRITER_POLICY:
                return f"the knob is locked by a {WRITER_NAMES[held]} write {until}"
            # a sweep
            if held == WRITER_MANUAL and not request.force:
                return f"the knob is locked by a manual write {until} (a sweep needs force to borrow it)"
            return None

    def refuse(self, server_args: Mapping[str, Any], why: str, now: float | None = None) -> None:
        with self.lock:
            now = self.clock() if now is None else now
            writer = writer_of(server_args)
            self.last_refused = {"writer": writer, "request_id": request_id_of(server_args), "ts": now,
                                 "why": why[:300]}  # fmt: skip
            value = server_args.get(KNOB_KEY) if isinstance(server_args, Mapping) else None
            if writer == "policy":
                self.policy_last = {"value": value, "ts": now, "applied": False}

    def commit(self, request: KnobRequest, previous: int | None, now: float | None = None) -> None:
        """Record an applied request: the new lock, the last writer (with the value it replaced)."""
        with self.lock:
            now = self.clock() if now is None else now
            self._expire(now)
            if request.release:
                if request.writer == WRITER_MANUAL or self.lock_writer == request.writer or request.force:
                    self.lock_writer = self.lock_since = self.lock_expires_at = self.lock_request_id = None
                if request.lock_as is not None:
                    hold = request.hold_s or 0.0
                    self.lock_writer, self.lock_since = request.lock_as, now
                    self.lock_expires_at = now + hold if hold > 0 else None
                    self.lock_request_id = None  # the operator's set that took it is not this request
            elif request.writer == WRITER_MANUAL and not request.unmarked and not request.settings_only:
                hold = request.hold_s or 0.0
                self.lock_writer, self.lock_since = WRITER_MANUAL, now
                self.lock_expires_at = now + hold if hold > 0 else None
                self.lock_request_id = request.request_id
            elif request.writer == WRITER_SWEEP and not request.settings_only:
                hold = SWEEP_DEFAULT_HOLD_S if request.hold_s in (None, 0.0) else float(request.hold_s or 0.0)
                if self.lock_writer != WRITER_SWEEP:
                    self.lock_since = now
                self.lock_writer, self.lock_expires_at = WRITER_SWEEP, now + hold
                self.lock_request_id = None
            self.last_write = {
                "writer": request.writer_name,
                "value": request.value if request.value is not None else previous,
                "previous": previous,
                "ts": now,
                "request_id": request.request_id,
                "release": request.release,
            }
            if request.writer == WRITER_POLICY:
                self.policy_last = {"value": request.value, "ts": now, "applied": True}

    def report(self, now: float | None = None) -> dict[str, Any]:
        with self.lock:
            now = self.clock() if now is None else now
            self._expire(now)
            lock = None
            if self.lock_writer is not None:
                lock = {"writer": WRITER_NAMES[self.lock_writer], "since": self.lock_since,
                        "expires_at": self.lock_expires_at, "request_id": self.lock_request_id}  # fmt: skip
            return {
                "contract_version": CONTRACT_VERSION,
                "owner": WRITER_NAMES[self.lock_writer] if self.lock_writer is not None else OWNER_FREE,
                "lock": lock,
                "last_write": dict(self.last_write) if self.last_write else None,
                "last_refused": dict(self.last_refused) if self.last_refused else None,
                "policy_last": dict(self.policy_last) if self.policy_last else None,
                "server_time": now,
            }
