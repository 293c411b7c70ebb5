"""control.runner applies a decision's exploration share (``Decision.explore_share``: learn quieting) on the
real simulator over HTTP: written alone, read back, audited as ``explore``; never under a lock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from spectower.control import audit
from spectower.control.knob import KnobClient, explore_share_of
from spectower.control.policy import Decision, Observation
from spectower.control.runner import PolicyRunner
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE
from spectower.storage.database import Database, open_database

from tests.test_runner import add_samples

ADMIN_KEY = "adm-key-1"


class AskingPolicy:
    """Holds the ceiling and asks for ``share`` at its first decision (what learn does when it quiets), then
    holds; ``before`` runs inside that first decision (an operator acting while the policy decides)."""

    name = "learn"

    def __init__(self, share: float, before: Callable[[], None] | None = None, max_bs: int | None = None
                 ) -> None:  # fmt: skip
        self.share, self.before, self.max_bs = share, before, max_bs
        self.seen: list[float | None] = []

    def decide(self, obs: Observation) -> Decision:
        self.seen.append(obs.explore_share)
        if len(self.seen) > 1:
            return Decision(None, "hold")
        if self.before is not None:
            self.before()
        return Decision(self.max_bs, "hold; quiet: bins 2-32 decided", explore_share=self.share)

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "runner.db")
    yield database
    database.close()


def _runner(db: Database, client: KnobClient, policy: AskingPolicy) -> PolicyRunner:
    add_samples(db, client.base_url, time.time(), 5, rank=0)
    add_samples(db, client.base_url, time.time(), 7, rank=1)
    return PolicyRunner(db, client, policy, mode="learn")


@pytest.mark.integration
def test_the_runner_writes_the_share_reads_it_back_and_audits_it(db: Database, simulator_factory: Any
                                                                  ) -> None:  # fmt: skip
    sim = simulator_factory(admin_key=ADMIN_KEY, dp_size=2)
    client = KnobClient(sim.base_url, ADMIN_KEY)
    ceiling = client.read().spec_max_bs
    policy = AskingPolicy(0.005)
    runner = _runner(db, client, policy)
    outcome = runner.step()
    assert outcome.action == "explore", outcome.reason
    assert outcome.result is not None and outcome.result.confirmed
    assert outcome.reason.startswith(f"explore share {DEFAULT_EXPLORE_SHARE:g} -> 0.005 confirmed, read back "
                                     "0.005: hold; quiet")  # fmt: skip
    after = client.read()
    assert [rank.explore["share"] for rank in after.ranks if rank.explore] == [0.005, 0.005]
    assert after.spec_max_bs == ceiling and not after.locked  # the share alone: no ceiling, no lock
    (row,) = audit.list_events(db, sim.base_url)
    assert (row.actor, row.action, row.confirmed, row.error) == ("policy:learn", "explore", True, None)
    assert (row.old_max_bs, row.new_max_bs) == (ceiling, ceiling)
    assert row.note == f"explore share {DEFAULT_EXPLORE_SHARE:g} -> 0.005 (read back 0.005)"
    assert runner.step().action == "hold" and policy.seen == [DEFAULT_EXPLORE_SHARE, 0.005]
    client.close()


@pytest.mark.integration
def test_under_a_manual_lock_the_runner_writes_no_share(db: Database, simulator_factory: Any) -> None:
    sim = simulator_factory(admin_key=ADMIN_KEY, dp_size=2)
    client = KnobClient(sim.base_url, ADMIN_KEY)
    audit.apply_knob(db, client, "off", "incident: drafts misbehave", "operator:alice")
    policy = AskingPolicy(0.005)
    outcome = _runner(db, client, policy).step()
    assert outcome.action == "paused" and "nor the exploration share" in outcome.reason
    assert policy.seen == []  # paused before the policy is asked
    assert explore_share_of(client.read()) == DEFAULT_EXPLORE_SHARE
    assert [e.action for e in audit.list_events(db, sim.base_url, action="explore")] == []
    client.close()


@pytest.mark.integration
def test_a_lock_taken_while_the_policy_decides_refuses_the_share(db: Database, simulator_factory: Any
                                                                  ) -> None:  # fmt: skip
    """The operator sets the knob after the runner read the server but before its share write lands: the
    server refuses the policy's write, the step is paused (no crash), and the refusal is audited."""
    sim = simulator_factory(admin_key=ADMIN_KEY, dp_size=2)
    client = KnobClient(sim.base_url, ADMIN_KEY)
    operator = KnobClient(sim.base_url, ADMIN_KEY)
    policy = AskingPolicy(0.005, before=lambda: operator.set("off", writer="manual") and None)
    outcome = _runner(db, client, policy).step()
    assert outcome.action == "paused" and "explore share 0.005 not written" in outcome.reason
    assert "locked by a manual write" in outcome.reason
    assert explore_share_of(client.read()) == DEFAULT_EXPLORE_SHARE
    (row,) = audit.list_events(db, sim.base_url, action="explore")
    assert not row.confirmed and row.error is not None and row.error.startswith("not applied:")
    client.close()
    operator.close()


@pytest.mark.integration
def test_a_failed_share_write_is_an_error_outcome_not_a_crash(db: Database, simulator_factory: Any) -> None:
    sim = simulator_factory(admin_key=ADMIN_KEY, dp_size=2)
    client = KnobClient(sim.base_url, ADMIN_KEY)
    policy = AskingPolicy(0.005, before=sim.stop)  # the server goes away while the policy decides
    runner = _runner(db, client, policy)
    runner.client.settle_s = 0.0
    outcome = runner.step()
    assert outcome.action == "error" and outcome.reason.startswith("explore share 0.005 failed: ")
    (row,) = audit.list_events(db, sim.base_url, action="explore")
    assert not row.confirmed and row.error is not None
    client.close()


@pytest.mark.integration
def test_a_move_and_a_share_in_one_decision_are_both_applied(db: Database, simulator_factory: Any) -> None:
    """learn wakes exploring when it moves the ceiling: the set first, then the share, each audited."""
    sim = simulator_factory(admin_key=ADMIN_KEY, dp_size=2)
    client = KnobClient(sim.base_url, ADMIN_KEY)
    outcome = _runner(db, client, AskingPolicy(0.1, max_bs=6)).step()
    assert outcome.action == "set" and outcome.result is not None and outcome.result.requested == 6
    assert "; explore share 0.02 -> 0.1 confirmed, read back 0.1" in outcome.reason
    after = client.read()
    assert (after.spec_max_bs, explore_share_of(after)) == (6, 0.1)
    rows = audit.list_events(db, sim.base_url)
    assert [(r.action, r.new_max_bs, r.confirmed) for r in reversed(rows)] == [("set", 6, True),
                                                                               ("explore", 6, True)]
    client.close()
