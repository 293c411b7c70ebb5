"""control.runner: observations from a real SQLite store, the safety rails, pause/release, persistence.

Fast cases drive the unit-level knob fake (MockTransport) with a controlled clock; the end-to-end case
drives the real simulator subprocess (tests/test_control_cli.py has the CLI one).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.control import audit
from spectower.control.knob import KnobClient
from spectower.control.policy import make_policy
from spectower.control.runner import (
    PolicyRunner,
    RunnerConfig,
    RunnerConfigError,
    observe_storage,
)
from spectower.plugin import engine_counters
from spectower.storage import queries
from spectower.storage.database import Database, open_database
from spectower.storage.models import EngineSample

from tests.conftest import dead_url
from tests.fake_knob_server import FakeKnobServer

URL = "http://10.1.2.3:30000"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "runner.db")
    yield database
    database.close()


def add_samples(
    db: Database,
    url: str,
    ts: float,
    running: float,
    *,
    rank: int = 0,
    n: int = 3,
    tok_s: float | None = 1000.0,
    accept: float | None = 2.5,
    queued: float = 0.0,
) -> None:
    """Write what the collector would: one EngineSample per second up to ``ts``."""
    server_id = db.server_id(url, ts=ts)
    with db.session(write=True) as session:
        for i in range(n):
            session.add(EngineSample(server_id=server_id, dp_rank=rank, ts=ts - (n - 1 - i),
                                     num_running_reqs=running, num_queue_reqs=queued, output_tok_s=tok_s,
                                     spec_accept_length=accept))  # fmt: skip


def make_runner(db: Database, fake: FakeKnobServer, clock: Clock, spec: str = "threshold:20",
                **config: float) -> PolicyRunner:  # fmt: skip
    client = KnobClient(URL, transport=fake.transport(), readback_delay_s=0.0)
    mode = spec.split(":")[0]
    policy = make_policy(spec, 48)
    return PolicyRunner(db, client, policy, mode=mode, config=RunnerConfig(**config), clock=clock)  # type: ignore[arg-type]


def test_observation_sums_ranks_over_the_interval(db: Database) -> None:
    add_samples(db, URL, T0, 10, rank=0, tok_s=500, accept=2.0, queued=1)
    add_samples(db, URL, T0, 30, rank=1, tok_s=700, accept=3.0, queued=2)
    metrics, stale = observe_storage(db, URL, T0 + 1, interval_s=5, stale_after_s=30)
    assert stale is None
    assert metrics == {"num_running_reqs": 40, "num_queue_reqs": 3, "output_tok_s": 1200,
                       "accept_length": 2.5}  # fmt: skip
    _, stale = observe_storage(db, URL, T0 + 100, interval_s=5, stale_after_s=30)
    assert stale is not None and "stale" in stale
    _, none = observe_storage(db, "http://127.0.0.1:1", T0, interval_s=5, stale_after_s=30)
    assert none is not None and "spectower collect" in none


def test_threshold_moves_the_knob_once_and_audits_it(db: Database) -> None:
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)
    outcome = runner.step()
    assert outcome.action == "set" and outcome.result is not None and outcome.result.confirmed
    assert fake.values() == [20]
    (row,) = audit.list_events(db, URL)
    assert (row.actor, row.action, row.old_max_bs, row.new_max_bs, row.confirmed) == (
        "policy:threshold", "set", 0, 20, True)  # fmt: skip
    clock.now += 5
    add_samples(db, URL, clock.now, 12)
    assert runner.step().action == "hold"
    assert len(audit.list_events(db, URL)) == 1  # no re-set, no new audit row


def test_stale_data_and_unreachable_server_hold(db: Database) -> None:
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock, stale_after_s=10)
    outcome = runner.step()  # nothing collected yet
    assert outcome.action == "hold" and "spectower collect" in outcome.reason
    add_samples(db, URL, T0 - 60, 12)  # a minute old
    outcome = runner.step()
    assert outcome.action == "hold" and "stale" in outcome.reason
    assert outcome.observation is not None and outcome.observation.stale
    assert fake.posts == [] and audit.list_events(db) == []

    dead = KnobClient(dead_url(), timeout=1.0)
    runner = PolicyRunner(db, dead, make_policy("threshold:20", 48), mode="threshold", clock=clock)
    add_samples(db, dead.base_url, T0, 12)
    outcome = runner.step()
    assert outcome.action == "hold" and "cannot reach" in outcome.reason
    assert audit.list_events(db) == []


def test_manual_set_pauses_the_runner_and_release_resumes(db: Database, tmp_path: Path) -> None:
    """The operator uses ANOTHER database and another spelling of the URL: the lock is the server's, so the
    runner still pauses, and resumes after the release."""
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)
    assert runner.step().action == "set"
    elsewhere = open_database(tmp_path / "operators-own.db")
    with KnobClient(URL + "/", transport=fake.transport(), readback_delay_s=0.0) as operator:
        why = "incident: drafts misbehave"
        audit.apply_knob(elsewhere, operator, "off", why, "operator:alice", clock=clock)
        for _ in range(2):
            clock.now += 5
            add_samples(db, URL, clock.now, 12)
            outcome = runner.step()
            assert outcome.action == "paused"
            assert "manual lock holds the knob until released" in outcome.reason
            assert "spectower control release --server" in outcome.reason
        assert fake.values() == [0] and len(fake.posts) == 2  # the manual value stands; no policy write
        audit.release(elsewhere, operator, "operator:alice", "incident over", clock=clock)
    clock.now += 5
    add_samples(db, URL, clock.now, 12)
    outcome = runner.step()
    assert outcome.action == "set" and fake.values() == [20]
    assert [(e.actor, e.action) for e in reversed(audit.list_events(db, URL))] == [
        ("policy:threshold", "set"), ("policy:threshold", "set")]  # fmt: skip
    assert [(e.actor, e.action) for e in reversed(audit.list_events(elsewhere, URL))] == [
        ("operator:alice", "set"), ("operator:alice", "release")]  # fmt: skip
    elsewhere.close()


def test_a_lock_taken_between_decision_and_set_wins(db: Database) -> None:
    """The operator sets after the runner decided but before its set arrived: the server refuses the
    policy's write, the runner reports paused, and the refusal is audited as not applied."""
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)

    def operator_acts(request: httpx.Request) -> None:
        if request.method == "POST" and len(fake.posts) == 1:  # just before the policy's set lands
            fake.apply({"spectower_writer": 1, "spectower_spec_max_bs": 0})

    fake.on_request = operator_acts
    outcome = runner.step()
    assert outcome.action == "paused" and "locked by a manual write" in outcome.reason
    assert fake.values() == [0] and fake.owner.owner() == "manual"
    (row,) = audit.list_events(db, URL)
    assert (row.actor, row.confirmed, row.new_max_bs) == ("policy:threshold", False, 20)
    assert row.error and row.error.startswith("not applied:")


def test_a_sweep_lock_pauses_the_runner_too(db: Database) -> None:
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)
    fake.apply({"spectower_writer": 3, "spectower_spec_max_bs": 48})
    outcome = runner.step()
    assert outcome.action == "paused" and "sweep lock" in outcome.reason and fake.posts == []


def _sets_then_one_more(
    db: Database, runner: PolicyRunner, fake: FakeKnobServer, clock: Clock, sets: int
) -> Any:
    """``sets`` sets a minute apart, the knob moved back behind the policy's back after each; then the
    outcome of one more step a minute later."""
    for _ in range(sets):
        add_samples(db, URL, clock.now, 12)
        assert runner.step().action == "set"
        fake.info["internal_states"][0]["spectower"]["spec_max_bs"] = 0  # moved behind the policy's back
        clock.now += 60
    add_samples(db, URL, clock.now, 12)
    return runner.step()


def test_flip_rate_is_capped_per_rolling_hour(db: Database) -> None:
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock, max_flips_per_hour=1)
    outcome = _sets_then_one_more(db, runner, fake, clock, sets=1)
    assert outcome.action == "rate-limited" and "--max-flips-per-hour 1" in outcome.reason
    assert fake.values() == [0]
    clock.now += 3600
    add_samples(db, URL, clock.now, 12)
    assert runner.step().action == "set" and fake.values() == [20]


def counters_block(steps: int, bins: int = 6) -> dict[str, Any]:
    """One rank's counters (plugin/engine_counters.py's shape): ``steps`` drafted and gated ones in bin 4."""
    block = engine_counters.EngineCounters(2 ** (bins - 1), clock_name="model").snapshot()
    block["started_at"] = 1.0
    i = block["bins"].index(4)
    for mode, tokens in (("drafted", 30), ("gated", 10)):
        block[mode]["steps"][i] = steps
        block[mode]["tokens"][i] = tokens * steps
        block[mode]["time_s"][i] = 0.01 * steps
    return block


def publish_counters(fake: FakeKnobServer, steps: int, ranks: list[int] | None = None) -> None:
    for rank, state in enumerate(fake.info["internal_states"]):
        if ranks is None or rank in ranks:
            state["spectower"]["counters"] = counters_block(steps)


def test_the_observation_carries_the_engine_counters_summed_over_ranks(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    fake, clock = FakeKnobServer(dp_size=2), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)
    obs, why = runner.observe(clock.now)
    assert why is None and obs.counters is None  # a server without counters: the observation says so
    assert "publishes no engine counters" in caplog.text
    publish_counters(fake, 7)
    obs, _ = runner.observe(clock.now)
    assert obs.counters is not None and engine_counters.validate(dict(obs.counters)) is None
    i = obs.counters["bins"].index(4)
    assert obs.counters["drafted"]["steps"][i] == 14 and obs.counters["gated"]["tokens"][i] == 140
    assert obs.counters["ranks"] == 2
    # one rank without a valid block: no partial sum (it would read as a restart, then as a jump)
    fake.info["internal_states"][1]["spectower"]["counters"] = {"bins": "no"}
    caplog.clear()
    obs, _ = runner.observe(clock.now)
    assert obs.counters is None
    assert "internal_states[1].spectower.counters.bins must be a non-empty list" in caplog.text
    runner.observe(clock.now)  # said once, not every interval
    assert caplog.text.count("internal_states[1]") == 1


def test_learn_state_is_persisted_and_restored(db: Database) -> None:
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock, spec="learn")  # the fake's knob reads back 0: speculation off
    actions = []
    for i in range(6):
        clock.now = T0 + 15 * i
        add_samples(db, URL, clock.now, 4 + i, tok_s=200.0 * (4 + i))
        publish_counters(fake, 10 * (i + 1))  # bin 4: drafted 3000 tok/s, gated 1000
        outcome = runner.step()
        actions.append(outcome.action)
        if i < 3:  # fewer than 3 intervals of the bin in both modes
            assert outcome.decision is not None and "too thin" in outcome.decision.reason
    assert actions == ["hold"] * 3 + ["set", "hold", "hold"] and fake.values() == [4]  # bin 4 pays: on
    saved = audit.get_policy_state(db, URL)
    assert saved is not None and saved.mode == "learn"
    assert json.loads(saved.state_json) == json.loads(json.dumps(runner.policy.state(), sort_keys=True))
    assert len(json.loads(saved.state_json)["snapshots"]) == 6  # the counters window survives a restart
    fresh = make_runner(db, fake, clock, spec="learn")
    assert fresh.load_state()
    assert fresh.policy.state() == runner.policy.state()
    other = make_runner(db, fake, clock, spec="threshold:8")  # a different policy does not load it
    assert not other.load_state()


def test_run_loop_records_start_and_stop_and_leaves_the_ceiling(db: Database) -> None:
    fake = FakeKnobServer()
    add_samples(db, URL, time.time(), 12)
    runner = PolicyRunner(db, KnobClient(URL, transport=fake.transport(), readback_delay_s=0.0),
                          make_policy("threshold:20", 48), mode="threshold",
                          config=RunnerConfig(interval_s=0.05))  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,))
    thread.start()
    thread.join(timeout=1.0)
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    actions = [e.action for e in reversed(audit.list_events(db, URL))]
    assert actions[0] == "auto-start" and actions[-1] == "auto-stop" and "set" in actions
    assert fake.values() == [20]  # stopping does not touch the knob
    assert "keeps its last ceiling" in audit.list_events(db, URL, limit=1)[0].reason


def test_bad_runner_options_name_the_flag() -> None:
    with pytest.raises(RunnerConfigError, match="--stale-after"):
        RunnerConfig(stale_after_s=0)
    with pytest.raises(RunnerConfigError, match="--max-flips-per-hour"):
        RunnerConfig(max_flips_per_hour=0)


def test_no_plugin_holds_and_sends_nothing(db: Database) -> None:
    fake, clock = FakeKnobServer(plugin=False), Clock()
    runner = make_runner(db, fake, clock)
    add_samples(db, URL, T0, 12)
    outcome = runner.step()
    assert outcome.action == "hold" and "plugin is not installed" in outcome.reason
    assert fake.posts == [] and audit.list_events(db) == []


@pytest.mark.integration
def test_learn_reads_the_real_simulators_counters(db: Database, simulator_factory: Any) -> None:
    sim = simulator_factory(dp_size=2)
    client = KnobClient(sim.base_url)
    runner = PolicyRunner(db, client, make_policy("learn", 64), mode="learn")
    for _ in range(3):  # a few requests so the counters move
        httpx.post(f"{sim.base_url}/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 20}},
                   timeout=30)  # fmt: skip
    add_samples(db, sim.base_url, time.time(), 1, rank=0)
    add_samples(db, sim.base_url, time.time(), 0, rank=1)
    outcome = runner.step()
    obs = outcome.observation
    assert obs is not None and obs.counters is not None and obs.counters["ranks"] == 2
    assert engine_counters.validate(dict(obs.counters)) is None
    # three requests of 20 tokens, one from prefill: 19 from decode steps each, in bin 1
    assert obs.counters["drafted"]["tokens"][0] + obs.counters["gated"]["tokens"][0] == 3 * 19
    assert outcome.action == "hold" and "too thin" in outcome.reason
    client.close()


@pytest.mark.integration
def test_runner_drives_the_real_simulator(db: Database, simulator_factory: Any) -> None:
    sim = simulator_factory(admin_key="adm-key-1", dp_size=2)
    client = KnobClient(sim.base_url, "adm-key-1")
    runner = PolicyRunner(db, client, make_policy("threshold:6", 64), mode="threshold")
    add_samples(db, sim.base_url, time.time(), 5, rank=0)
    add_samples(db, sim.base_url, time.time(), 7, rank=1)
    outcome = runner.step()
    assert outcome.observation is not None and outcome.observation.num_running_reqs == 12
    assert outcome.action == "set" and outcome.result is not None and outcome.result.confirmed
    assert [r.spec_max_bs for r in client.read().ranks] == [6, 6]
    assert runner.step().action == "hold"
    (row,) = audit.list_events(db, sim.base_url)
    assert (row.actor, row.new_max_bs, row.confirmed) == ("policy:threshold", 6, True)
    assert [r["confirmed"] for r in json.loads(row.per_rank_json or "[]")] == [True, True]
    sim.stop()  # the server goes away: the runner holds and says why
    outcome = runner.step()
    assert outcome.action == "hold" and "cannot reach" in outcome.reason
    client.close()


def test_the_default_rail_is_the_readmes_twelve_changes_an_hour(db: Database) -> None:
    """`control auto` (the demo's policy included) allowed 60 sets an hour and handed learn 60 as its own
    limit, where the README promises at most 12: the 13th set within an hour is refused."""
    fake, clock = FakeKnobServer(), Clock()
    runner = make_runner(db, fake, clock)  # RunnerConfig's defaults, as `control auto` without the flag
    outcome = _sets_then_one_more(db, runner, fake, clock, sets=12)
    assert outcome.action == "rate-limited" and "--max-flips-per-hour 12" in outcome.reason
    assert runner.config.max_flips_per_hour == make_policy("learn", 48).max_flips_per_hour  # type: ignore[attr-defined]


def test_a_line_says_the_action_once(db: Database) -> None:
    """The policies' holds begin "hold: ..." themselves: the line does not say it twice ("hold: hold:", as
    every learn hold read until 2026-12-07); the runner's own reasons get the action in front."""
    fake, clock, lines = FakeKnobServer(), Clock(), []
    client = KnobClient(URL, transport=fake.transport(), readback_delay_s=0.0)
    runner = PolicyRunner(db, client, make_policy("learn", 48), mode="learn", clock=clock,
                          say=lines.append)  # fmt: skip
    runner.say(runner.step())  # nothing collected yet: the runner's own reason
    add_samples(db, URL, T0, 12)
    runner.say(runner.step())  # fresh samples, no counters: learn's own "hold: the server publishes no ..."
    assert [line.split(" ", 1)[1].split(":", 1)[0] for line in lines] == ["hold", "hold"], lines
    assert not any("hold: hold:" in line for line in lines), lines
    assert "spectower collect" in lines[0] and "publishes no engine counters" in lines[1], lines
    row = queries.policy_state(db, URL)  # what the console shows: the newest line, since its step
    assert row is not None and row.said == lines[1].split(" ", 1)[1] and row.said_ts == clock()
