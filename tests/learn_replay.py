"""control/policy/learn.py replayed on what a real run's policy kept: the counters snapshots it persisted (one
per ``sample_s``, its ``policy_state`` in the run's database under data/gpu-runs/) fed back one at a time,
with the knob (and, where asked, the exploration share) following the replay's own decisions. The counters
stay the recorded ones, so a replay is the run up to its first move; after it they read as what the
recorded ceiling served. Used by the replay tests of each recorded learn run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spectower.control import warm_start
from spectower.control.policy import Decision, Observation, make_policy
from spectower.plugin.knob_contract import DEFAULT_EXPLORE_SHARE
from spectower.storage import open_database, queries
from spectower.storage.database import recorded_copy
from spectower.storage.models import ControlEvent, ServerInfoSnapshot
from sqlmodel import select

MRR = 64


@dataclass(frozen=True)
class RecordedRun:
    db: Path  # the run's database, copied (opening it may migrate it in place)
    snapshots: list[tuple[float, dict[str, Any]]]  # oldest first
    events: dict[str, list[ControlEvent]]  # the policy's control events of each action asked for


def recorded_run(db_file: Path, server: str, tmp: Path, actions: tuple[str, ...]) -> RecordedRun:
    """The snapshots the policy on ``server`` kept and its control events of ``actions``."""
    copy = recorded_copy(db_file, tmp)
    with open_database(copy) as db:
        row = queries.policy_state(db, server)
        events = {action: queries.control_events(db, server_url=server, actor="policy", action=action)
                  for action in actions}  # fmt: skip
    assert row is not None, f"{db_file}: no policy state for {server}"
    snapshots = [(float(ts), snap) for ts, snap in json.loads(row.state_json)["snapshots"]]
    return RecordedRun(copy, snapshots, events)


def warm_start_at(run: RecordedRun, server: str, gpu: str, now: float, current: int) -> warm_start.WarmStart:
    """What ``control auto``'s warm start found in the run's database at ``now`` for ``server`` (its stored
    ``/server_info`` and one GPU named ``gpu``), the knob then ``current``."""
    with open_database(run.db) as db:
        with db.session() as session:
            info = json.loads(session.exec(select(ServerInfoSnapshot)).first().info_json)  # type: ignore[union-attr]
        stack = warm_start.Stack.of(info, [{"name": gpu}])
        return warm_start.find(db, stack, MRR, server_url=server, now=now, current=current)


def replay(
    snapshots: list[tuple[float, dict[str, Any]]], knob: int, follow_share: bool = False, **options: Any
) -> list[tuple[float, int, Decision]]:
    """(the snapshot's time, the knob it decided on, the decision) per kept snapshot. The knob follows the
    decisions, as the runner's read-back did; with ``follow_share`` so does the exploration share each
    observation carries (else none, as a plugin without the share would). The policy reads only the
    counters, the knob and the share: the gauges are left neutral."""
    policy = make_policy("learn", MRR, **options)
    share = DEFAULT_EXPLORE_SHARE if follow_share else None
    out = []
    for ts, counters in snapshots:
        obs = Observation(ts=ts, num_running_reqs=0.0, num_queue_reqs=0.0, output_tok_s=None,
                          accept_length=None, spec_max_bs=knob, max_running_requests=MRR, stale=False,
                          counters=counters, explore_share=share)  # fmt: skip
        decision = policy.decide(obs)
        out.append((ts, knob, decision))
        knob = decision.max_bs if decision.max_bs is not None else knob
        if follow_share and decision.explore_share is not None:
            share = decision.explore_share
    return out
