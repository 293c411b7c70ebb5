"""spectower.control.audit on a real SQLite file: every attempt is a row with its outcome; the lock is the
server's (a manual set takes it, a policy is refused under it, release clears it).

The knob side is the unit-level fake (MockTransport); the real simulator runs in test_control_cli.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.control import audit
from spectower.control.knob import KnobClient
from spectower.control.knob_state import KnobAuthError, PluginMissingError, ServerUnreachableError
from spectower.storage.database import Database, open_database

from tests.conftest import dead_url
from tests.fake_knob_server import FakeKnobServer

URL = "http://10.1.2.3:30000"
KEY = "k-3f9a7c1e"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "audit.db")
    yield database
    database.close()


def client_for(fake: FakeKnobServer, key: str | None = KEY) -> KnobClient:
    return KnobClient(URL, key, transport=fake.transport(), readback_delay_s=0.0)


def test_manual_set_is_audited_and_locks_the_server(db: Database) -> None:
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake) as client:
        result = audit.apply_knob(db, client, 16, "incident 42: p99 latency", "operator:alice")
        assert result.confirmed and client.read().owner == "manual"
        (set_row,) = audit.list_events(db, URL)  # one row: the lock is the server's, not a second row
        assert (set_row.actor, set_row.action, set_row.old_max_bs, set_row.new_max_bs) == (
            "operator:alice", "set", 0, 16)  # fmt: skip
        # a confirmed set has no error; the lock it took is its note
        assert set_row.confirmed and (set_row.error, set_row.note) == (None, "manual lock until released")
        assert set_row.request_id == result.request_id is not None
        assert set_row.reason == "incident 42: p99 latency"
        assert json.loads(set_row.per_rank_json or "[]") == [
            {"dp_rank": 0, "accepted": True, "spec_max_bs": 16, "owner": "manual", "confirmed": True,
             "outcome": "applied"}
        ]  # fmt: skip

        released = audit.release(db, client, "operator:alice", "incident over")
        assert released.was_locked and released.result.confirmed and client.read().owner == "policy"
        row = audit.list_events(db, URL, limit=1)[0]
        assert (row.action, row.confirmed, row.old_max_bs, row.new_max_bs) == ("release", True, 16, 16)
        again = audit.release(db, client, "operator:alice", "twice")
        assert not again.was_locked and again.result.confirmed


def test_policy_set_takes_no_lock_and_is_refused_under_one(db: Database) -> None:
    fake = FakeKnobServer()
    with client_for(fake) as client:
        audit.apply_knob(db, client, "on", "learn: crossover at 30", "policy:learn")
        assert client.read().owner == "policy"
        (row,) = audit.list_events(db, URL)
        assert (row.actor, row.new_max_bs, row.confirmed) == ("policy:learn", 48, True)
        audit.apply_knob(db, client, "off", "incident", "operator:bob", hold_s=3600)
        with pytest.raises(audit.PolicyPaused, match="locked by a manual write until"):
            audit.apply_knob(db, client, 20, "learn: explore", "policy:learn")
    refused = audit.list_events(db, URL, limit=1)[0]
    assert (refused.actor, refused.confirmed, refused.old_max_bs, refused.new_max_bs) == (
        "policy:learn", False, 0, 20)  # fmt: skip
    assert refused.error and refused.error.startswith("not applied: the server refused it")
    assert fake.values() == [0]


def test_every_outcome_is_recorded_lost_answers_included(db: Database) -> None:
    fake = FakeKnobServer(lose_answers=1)
    with KnobClient(URL, transport=fake.transport(), readback_delay_s=0.0, settle_s=2.0) as client:
        result = audit.apply_knob(db, client, 0, "incident", "operator:alice")
        assert result.confirmed and fake.values() == [0]
        fake.lose_answers, fake.lose_before_apply = 1, True
        client.settle_s = 0.1
        lost = audit.apply_knob(db, client, 7, "lost on the way", "operator:alice")
    assert lost.outcome == "unknown"
    newest, first = audit.list_events(db, URL)
    assert first.confirmed and (first.error, first.note) == (None, "manual lock until released")
    assert not newest.confirmed and newest.error and newest.error.startswith("outcome unknown:")
    assert (newest.old_max_bs, newest.new_max_bs) == (0, 7)


def test_old_value_is_the_one_the_server_replaced(db: Database) -> None:
    """Another writer moves the knob between our read and our set: the audit's old value is the server's."""
    fake = FakeKnobServer()

    def race(request: httpx.Request) -> None:
        if request.method == "POST" and len(fake.posts) == 1:  # just before the server handles our set
            fake.apply({"spectower_writer": 2, "spectower_spec_max_bs": 30})

    fake.on_request = race
    with client_for(fake) as client:
        result = audit.apply_knob(db, client, 5, "incident", "operator:alice")
    assert result.before.spec_max_bs == 0 and result.old_max_bs == 30
    assert audit.list_events(db, URL)[0].old_max_bs == 30


def test_a_server_value_no_database_can_hold_is_audited_without_a_crash(db: Database) -> None:
    fake = FakeKnobServer()
    for state in fake.info["internal_states"]:
        state["spectower"]["spec_max_bs"] = 10**30  # a broken plugin or a hand-made request
    fake.owner.last_write = None
    with client_for(fake) as client:
        result = audit.apply_knob(db, client, 0, "incident", "operator:alice")
    assert result.confirmed
    (row,) = audit.list_events(db, URL)
    assert row.old_max_bs is None and row.new_max_bs == 0
    assert row.error is None and row.note and "beyond the database's INTEGER range" in row.note


def test_refused_attempts_are_audited_and_reraised(db: Database, tmp_path: Path) -> None:
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake, "not-the-key") as client, pytest.raises(KnobAuthError):
        audit.apply_knob(db, client, "off", "try with a wrong key", "operator:bob")
    with client_for(FakeKnobServer(plugin=False)) as client, pytest.raises(PluginMissingError):
        audit.apply_knob(db, client, 3, "no plugin there", "operator:bob")
    dead = dead_url()
    with KnobClient(dead, KEY, timeout=2.0) as client, pytest.raises(ServerUnreachableError):
        audit.apply_knob(db, client, "off", "server is down", "operator:bob")
    rows = audit.list_events(db)
    assert len(rows) == 3 and not any(r.confirmed for r in rows)
    by_reason = {r.reason: r for r in rows}
    assert by_reason["try with a wrong key"].error.startswith("not applied: KnobAuthError")  # type: ignore[union-attr]
    assert by_reason["try with a wrong key"].new_max_bs == 0
    assert by_reason["no plugin there"].error.startswith("not applied: PluginMissingError")  # type: ignore[union-attr]
    assert by_reason["server is down"].server_url == dead
    assert fake.values() == [0] and fake.owner.owner() == "policy"  # nothing reached the server: no lock
    # The admin key is in no row (nor anywhere in the file).
    db.close()
    assert b"not-the-key" not in (tmp_path / "audit.db").read_bytes()
    assert KEY.encode() not in (tmp_path / "audit.db").read_bytes()


def test_bad_input_reaches_neither_server_nor_database(db: Database) -> None:
    fake = FakeKnobServer()
    with client_for(fake) as client:
        with pytest.raises(audit.AuditError, match="--reason is required"):
            audit.apply_knob(db, client, 0, "   ", "operator:alice")
        with pytest.raises(audit.AuditError, match="actor must be"):
            audit.apply_knob(db, client, 0, "why", "root")
        with pytest.raises(ValueError, match=">= 0"):
            audit.apply_knob(db, client, -3, "why", "operator:alice")
    assert fake.requests == [] and audit.list_events(db) == []
    with pytest.raises(audit.AuditError, match="--as"):
        audit.operator_actor("bad name with spaces")


def test_list_events_filters_newest_first(db: Database) -> None:
    for i, actor in enumerate(["operator:a", "policy:learn", "policy:learn"]):
        audit.record_event(db, actor=actor, server_url=URL, action="set", reason=f"r{i}", ts=100.0 + i)
    audit.record_event(db, actor="operator:a", server_url="http://other:1", action="set", reason="x", ts=50)
    assert [e.reason for e in audit.list_events(db, URL)] == ["r2", "r1", "r0"]
    assert [e.reason for e in audit.list_events(db, URL, actor_prefix="policy:")] == ["r2", "r1"]
    assert [e.reason for e in audit.list_events(db, since=101.0)] == ["r2", "r1"]
    assert len(audit.list_events(db, limit=2)) == 2


def test_one_change_is_checked_resolved_and_audited_once(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'on' is checked once, resolved once (against the state read for this very change), sent once, and
    written as one row; a refusal after the read is one `not applied` row carrying the resolved value."""
    from spectower.control import knob_state

    calls: dict[str, int] = {"check": 0, "resolve": 0}

    def counted(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(audit, "check_target", counted("check", audit.check_target))
    monkeypatch.setattr(knob_state, "check_target", counted("check", knob_state.check_target))
    monkeypatch.setattr(knob_state, "resolve_target", counted("resolve", knob_state.resolve_target))
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake) as client:
        result = audit.apply_knob(db, client, "on", "back to normal", "operator:alice")
    assert result.confirmed and result.requested == 48 and calls == {"check": 1, "resolve": 1}
    assert len(fake.posts) == 1
    assert [(e.new_max_bs, e.confirmed) for e in audit.list_events(db)] == [(48, True)]
    with client_for(fake, "wrong-key") as client, pytest.raises(KnobAuthError):
        audit.apply_knob(db, client, 24, "with a wrong key", "operator:mallory")
    newest = audit.list_events(db, limit=1)[0]
    assert (newest.new_max_bs, newest.confirmed) == (24, False) and newest.error.startswith("not applied:")


def test_lock_holder_is_the_operator_whose_set_took_the_lock(db: Database) -> None:
    """#34: `control get` and the console say who holds a manual lock and since when: the server's lock
    names the request that took it, the audit row of that request names the operator."""
    fake = FakeKnobServer(admin_key=KEY)
    server_now = [1_800_000_000.0]
    fake.clock = lambda: server_now[0]
    with client_for(fake) as client:
        assert audit.lock_holder(db, client.read()) is None  # no lock
        audit.apply_knob(db, client, 0, "incident 7", "operator:alice", clock=lambda: 1_800_000_005.0)
        holder = audit.lock_holder(db, client.read())
        assert holder is not None and (holder.actor, holder.ts, holder.reason) == (
            "operator:alice", 1_800_000_005.0, "incident 7")  # fmt: skip
        server_now[0] += 1000.0  # bob's set, later: the lock is his now
        audit.apply_knob(
            db, client, 4, "incident 7, bob's turn", "operator:bob", clock=lambda: 1_800_001_005.0
        )
        state = client.read()
        holder = audit.lock_holder(db, state)
        assert holder is not None and (holder.actor, holder.reason) == (
            "operator:bob",
            "incident 7, bob's turn",
        )
        # a plugin before the lock named its request: the operator's set audited when the lock began
        fake.owner.lock_request_id = None
        holder = audit.lock_holder(db, client.read())
        assert holder is not None and holder.actor == "operator:bob"
        # a policy's row never holds a lock; a released server has none
        audit.release(db, client, "operator:bob", "over")
        assert audit.lock_holder(db, client.read()) is None


def test_a_lock_taken_through_another_database_has_no_holder_here(db: Database, tmp_path: Path) -> None:
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake) as client, open_database(tmp_path / "other.db") as other:
        audit.apply_knob(other, client, 0, "incident", "operator:carol")
        assert audit.lock_holder(db, client.read()) is None
        assert audit.lock_holder(other, client.read()).actor == "operator:carol"  # type: ignore[union-attr]


def test_a_confirmed_set_reads_ok_in_events_with_its_lock_as_a_note(db: Database, tmp_path: Path) -> None:
    """#34: a successful set read "set 16 -> 0 ok ... error: manual lock until released"."""
    from spectower.console.cli import app
    from typer.testing import CliRunner

    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake) as client:
        audit.apply_knob(db, client, 16, "warm up", "operator:alice")
        audit.apply_knob(db, client, 0, "incident 8", "operator:alice")
    res = CliRunner().invoke(app, ["control", "events", "--db", str(tmp_path / "audit.db")])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the terminal wraps long lines
    assert f"operator:alice set 16 -> 0 ok {URL}: incident 8 note: manual lock until released" in text
    assert "error" not in res.output
