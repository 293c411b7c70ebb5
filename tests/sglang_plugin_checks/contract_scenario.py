"""One scenario of the knob's ownership contract (plugin/knob_contract.py), run unchanged against the SGLang
plugin inside SGLang's real Scheduler methods (check_contract.py, 0.5.17 and 0.5.23) and against the
simulator over HTTP (tests/test_sim_knob.py): the two implementations must give the same answers.

Standard library only: this file is imported inside SGLang's venv as well as by pytest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

K = "spectower_spec_max_bs"
W = "spectower_writer"
HOLD = "spectower_hold_s"
REL = "spectower_release"
FORCE = "spectower_force"
LOCK_AS = "spectower_lock_as"
RID = "spectower_request_id"
MANUAL, POLICY, SWEEP = 1, 2, 3
EXPIRY_DEADLINE_S = 30.0  # generous for a loaded 2-core CI machine; polled, never slept through
POLL_S = 0.05

# (name, request or {"wait_owner": X}, expected: updated, spec_max_bs, owner, extra checks)
STEPS: list[dict[str, Any]] = [
    {"name": "policy sets 10", "request": {W: POLICY, K: 10, RID: 1}, "updated": True, "value": 10,
     "owner": "policy", "last_write": {"writer": "policy", "request_id": 1, "previous": 48}},
    {"name": "manual off, until released", "request": {W: MANUAL, K: 0, RID: 2}, "updated": True, "value": 0,
     "owner": "manual", "lock_expires": None, "last_write": {"writer": "manual", "previous": 10}},
    {"name": "policy refused under the manual lock", "request": {W: POLICY, K: 30, RID: 3}, "updated": False,
     "value": 0, "owner": "manual", "last_refused": {"writer": "policy", "request_id": 3},
     "policy_last": {"value": 30, "applied": False}},
    {"name": "sweep refused under the manual lock", "request": {W: SWEEP, K: 48, RID: 4}, "updated": False,
     "value": 0, "owner": "manual", "last_refused": {"writer": "sweep", "request_id": 4}},
    {"name": "a policy cannot release", "request": {W: POLICY, REL: 1, RID: 5}, "updated": False, "value": 0,
     "owner": "manual"},
    {"name": "manual 5 held 2h", "request": {W: MANUAL, K: 5, HOLD: 7200, RID: 6}, "updated": True,
     "value": 5, "owner": "manual", "lock_expires_in": 7200},
    {"name": "manual release", "request": {W: MANUAL, REL: 1, RID: 7}, "updated": True, "value": 5,
     "owner": "policy", "last_write": {"writer": "manual", "release": True, "request_id": 7}},
    {"name": "sweep borrows a free knob", "request": {W: SWEEP, K: 48, HOLD: 600, RID: 8}, "updated": True,
     "value": 48, "owner": "sweep", "lock_expires_in": 600},
    {"name": "policy refused under the sweep lock", "request": {W: POLICY, K: 1, RID: 9}, "updated": False,
     "value": 48, "owner": "sweep"},
    {"name": "manual wins over a sweep", "request": {W: MANUAL, K: 2, RID: 10}, "updated": True, "value": 2,
     "owner": "manual"},
    {"name": "forced sweep borrows the manual knob", "request": {W: SWEEP, K: 48, FORCE: 1, RID: 11},
     "updated": True, "value": 48, "owner": "sweep"},
    {"name": "sweep gives it back with the manual lock",
     "request": {W: SWEEP, K: 2, REL: 1, LOCK_AS: MANUAL, HOLD: 0, RID: 12}, "updated": True, "value": 2,
     "owner": "manual", "lock_expires": None},
    {"name": "manual release again", "request": {W: MANUAL, REL: 1}, "updated": True, "value": 2,
     "owner": "policy"},
    {"name": "an unmarked set applies and takes no lock", "request": {K: 7}, "updated": True, "value": 7,
     "owner": "policy", "last_write": {"writer": "manual"}},
    {"name": "manual lock without a value change", "request": {W: MANUAL, HOLD: 0}, "updated": True,
     "value": 7, "owner": "manual"},
    {"name": "an unmarked set under a manual lock leaves the lock", "request": {K: 7}, "updated": True,
     "value": 7, "owner": "manual"},
    {"name": "release", "request": {W: MANUAL, REL: 1}, "updated": True, "value": 7, "owner": "policy"},
    {"name": "an unmarked write cannot release", "request": {REL: 1}, "updated": False, "value": 7,
     "owner": "policy"},
    {"name": "unknown writer class", "request": {W: 9, K: 3}, "updated": False, "value": 7,
     "owner": "policy"},
    {"name": "unknown spectower key", "request": {K: 3, "spectower_bogus": 1}, "updated": False, "value": 7,
     "owner": "policy"},
    {"name": "too large for any database", "request": {W: POLICY, K: 2**31}, "updated": False, "value": 7,
     "owner": "policy"},
    {"name": "a float is not a ceiling", "request": {W: POLICY, K: 4.0}, "updated": False, "value": 7,
     "owner": "policy"},
    {"name": "manual 4 held 1 s", "request": {W: MANUAL, K: 4, HOLD: 1, RID: 19}, "updated": True, "value": 4,
     "owner": "manual"},
    {"name": "the hold expires", "wait_owner": "policy", "value": 4, "owner": "policy"},
    {"name": "policy acts after the expiry", "request": {W: POLICY, K: 6, RID: 20}, "updated": True,
     "value": 6, "owner": "policy"},
    {"name": "mixed with SGLang's key", "request": {W: POLICY, K: 8, "speculative_accept_threshold_acc": 0.7},
     "updated": True, "value": 8, "owner": "policy"},
    {"name": "mixed with a key SGLang refuses: nothing applied",
     "request": {W: MANUAL, K: 9, "no_such_sglang_key": 1, RID: 22}, "updated": False, "value": 8,
     "owner": "policy", "last_refused": {"writer": "manual", "request_id": 22}},
]  # fmt: skip


def run(
    set_state: Callable[[dict[str, Any]], bool], get_spectower: Callable[[], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Play every step; one row per step with what the server answered and reported afterwards."""
    rows = []
    for step in STEPS:
        row: dict[str, Any] = {"name": step["name"]}
        if "wait_owner" in step:
            deadline = time.monotonic() + EXPIRY_DEADLINE_S
            state = get_spectower()
            while state.get("owner") != step["wait_owner"] and time.monotonic() < deadline:
                time.sleep(POLL_S)
                state = get_spectower()
            row["updated"] = None
        else:
            row["updated"] = set_state(dict(step["request"]))
            state = get_spectower()
        row["spectower"] = state
        rows.append(row)
    return rows


def mismatches(rows: list[dict[str, Any]]) -> list[str]:
    """Every way the rows differ from the expectations (empty: the contract holds)."""
    problems = []
    for step, row in zip(STEPS, rows, strict=True):
        got = row["spectower"] or {}
        name = step["name"]

        def differ(what: str, want: Any, have: Any, name: str = name) -> None:
            problems.append(f"{name}: {what} expected {want!r}, got {have!r}")

        if "request" in step and row["updated"] is not step["updated"]:
            differ("updated", step["updated"], row["updated"])
        if got.get("spec_max_bs") != step["value"]:
            differ("spec_max_bs", step["value"], got.get("spec_max_bs"))
        if got.get("owner") != step["owner"]:
            differ("owner", step["owner"], got.get("owner"))
        lock = got.get("lock")
        if (lock is not None) != (step["owner"] != "policy"):
            differ("lock", "a lock" if step["owner"] != "policy" else None, lock)
        if "lock_expires" in step and (lock or {}).get("expires_at") != step["lock_expires"]:
            differ("lock.expires_at", step["lock_expires"], (lock or {}).get("expires_at"))
        if "lock_expires_in" in step:
            left = (lock or {}).get("expires_at") or 0
            left -= got.get("server_time") or 0
            if not step["lock_expires_in"] - 60 <= left <= step["lock_expires_in"]:
                differ("lock seconds left", step["lock_expires_in"], left)
        for block in ("last_write", "last_refused", "policy_last"):
            for key, want in (step.get(block) or {}).items():
                have = (got.get(block) or {}).get(key)
                if have != want:
                    differ(f"{block}.{key}", want, have)
    return problems
