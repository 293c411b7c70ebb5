"""What a sweep needs of the speculation knob, as a protocol: the sweep BORROWS the knob and GIVES IT BACK.

The implementation is control's (control/sweep_audit.py ``SweepKnob``, on the one knob client
``control.knob.KnobClient`` and the contract's sweep writer, audited there): collectors do not import
control's client or its database side. What the server does with a sweep's writes is the contract's
(plugin/knob_contract.py):

- ``borrow(running)``: refused (unless forced) when the server is serving other requests or a lock holds
  (the error names ``--force``); otherwise the sweep takes the server's sweep lock (a policy is then refused
  by the server itself) at the value it found. The lock expires ``SWEEP_HOLD_S`` after the sweep's last
  write, so a sweep that dies does not hold the knob for ever.
- ``set()``: one move per slice, as the sweep writer (renewing the lock); recorded in ``moves`` (the run's
  own record), not in the audit trail. A write the server refuses (an operator took the knob during the
  sweep) stops the sweep.
- ``give_back()``: the value AND the owner found: no lock (the policy acts again), or the operator's manual
  lock with the time it had left; nothing is written when an operator took the knob during the sweep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ...plugin import knob_contract as kc

SWEEP_HOLD_S = kc.SWEEP_DEFAULT_HOLD_S


@dataclass(frozen=True)
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
        """The live value per DP rank (raises when the server has no spectower plugin)."""
        ...

    async def borrow(self, running: int | None) -> Found:
        """Take the sweep lock, ``running`` requests being served now (None: unknown), or raise the error
        that says why not and names --force."""
        ...

    async def set(self, max_bs: int, reason: str) -> None:
        """Set the value and confirm it on every rank, or raise."""
        ...

    async def give_back(self) -> tuple[bool, str]:
        """Restore the value and owner found: (restored, one-line summary)."""
        ...
