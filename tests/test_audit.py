"""spectower.control.audit on a real SQLite file: every attempt is a row; manual sets pause; release resumes.

The knob side is the unit-level fake (MockTransport); the real simulator runs in test_control_cli.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from spectower.control import audit
from spectower.control.knob import KnobAuthError, KnobClient, PluginMissingError, ServerUnreachableError
from spectower.storage.database import Database, open_database

from tests.conftest import free_port
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


def test_manual_set_is_audited_and_pauses_the_policy(db: Database) -> None:
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake) as client:
        result = audit.apply_knob(db, client, 16, "incident 42: p99 latency", "operator:alice")
    assert result.confirmed
    events = audit.list_events(db, URL)
    assert [e.action for e in events] == ["pause", "set"]
    set_row = events[1]
    assert (set_row.actor, set_row.old_max_bs, set_row.new_max_bs) == ("operator:alice", 0, 16)
    assert set_row.confirmed and set_row.error is None
    assert set_row.reason == "incident 42: p99 latency"
    assert json.loads(set_row.per_rank_json or "[]") == [
        {"dp_rank": 0, "accepted": True, "spec_max_bs": 16, "confirmed": True}
    ]
    assert audit.paused_until(db, URL) == audit.PAUSE_UNTIL_RELEASED

    released = audit.release(db, URL, "operator:alice", "incident over")
    assert released.was_paused and audit.paused_until(db, URL) is None
    assert audit.list_events(db, URL, limit=1)[0].action == "release"
    again = audit.release(db, URL, "operator:alice", "twice")
    assert not again.was_paused and again.event.error == "the policy was not paused"


def test_policy_set_does_not_pause(db: Database) -> None:
    fake = FakeKnobServer()
    with client_for(fake) as client:
        audit.apply_knob(db, client, "on", "learn: crossover at 30", "policy:learn")
    assert audit.paused_until(db, URL) is None
    (row,) = audit.list_events(db, URL)
    assert (row.actor, row.new_max_bs, row.confirmed) == ("policy:learn", 48, True)


def test_refused_attempts_are_audited_and_reraised(db: Database, tmp_path: Path) -> None:
    fake = FakeKnobServer(admin_key=KEY)
    with client_for(fake, "not-the-key") as client, pytest.raises(KnobAuthError):
        audit.apply_knob(db, client, "off", "try with a wrong key", "operator:bob")
    with client_for(FakeKnobServer(plugin=False)) as client, pytest.raises(PluginMissingError):
        audit.apply_knob(db, client, 3, "no plugin there", "operator:bob")
    dead = f"http://127.0.0.1:{free_port()}"
    with KnobClient(dead, KEY, timeout=2.0) as client, pytest.raises(ServerUnreachableError):
        audit.apply_knob(db, client, "off", "server is down", "operator:bob")
    rows = audit.list_events(db)
    assert len(rows) == 3 and not any(r.confirmed for r in rows)
    by_reason = {r.reason: r for r in rows}
    assert by_reason["try with a wrong key"].error.startswith("KnobAuthError")  # type: ignore[union-attr]
    assert by_reason["try with a wrong key"].new_max_bs == 0
    assert by_reason["no plugin there"].error.startswith("PluginMissingError")  # type: ignore[union-attr]
    assert by_reason["server is down"].server_url == dead
    assert fake.values() == [0]
    assert audit.paused_until(db, URL) is None  # nothing reached the server: nothing paused
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
