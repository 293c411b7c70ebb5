"""The request-mix lean of a gated bin's explored drafting, in the simulator, and what plugin 0.4.15's
counters make of it: the ``slots`` block (each cell's requests per step) and the ``mix`` block (the request
mix of each exploring part, plugin/part_mix.py).

Requests accept differently (simulator/accept_kinds.py: half accept 4 tokens per verify, half 2, as the GPU
check's constructed pair). A gated stream holds each request in proportion to its length, a drafting one keeps
the requests that accept less for longer, so a steady drafting stream commits the harmonic mean H of the
accepts per request-step (2.67) where an exploring part, which starts from the gated stream's batch, starts at
their arithmetic mean A (3.0) and reaches H only once its requests turn over. Here a part is capped short
against a request's drafted life: 40 batches (20 of them its turnover) in a window of a 1024-batch cycle,
where a request of 64-448 output tokens drafts for 16-224 steps. Learn's explored drafted side then reads
high, and the counters say why: the same batch (slots per step) at a higher accept per slot, the parts' A / H
at the kinds' 1.125, and a part's drafted steps committing ``slots x H`` tokens serve what always on serves.

The runs are the simulator's own loop (``RankScheduler.run``) with closed-loop clients as coroutines, on a
virtual clock (``tests/sim_closed_loop.py``), 48 clients under a policy's ceiling of 24 (bin
48, 33-48 running, gated by the ceiling; the exploring part's stream drafts up to twice the ceiling) against
always on at the same load. The counters are read from the rank's ``/server_info`` payload.

Measured (seed 0, the profile's own step noise): the explored drafted steps at 48 commit 2.859 tokens per
request-step against always on's 2.660 (+7.5 %) at the same batch (47.6 requests a step); the 15 parts' H
2.664 (1.0015 of always on's), A / H 1.125; the explored rate with its tokens at ``slots x H`` 0.990 of always
on's (its steps carry a part's more frequent prefills: it finishes requests faster), raw 1.063. Over seeds 0-8
the lean read 7.0-9.1 %, H 1.002-1.012 of always on's, the levelled rate 0.990-1.009. As learn reads it (the
run's 2000-step intervals through ``as_choices``, which levels by the mix: control/mix_levelled.py) 0.989 of
always on's drafted rate, 1.060 without the mix levelling. With one kind A / H read
1.0020 (seeds 0-3: 1.0017-1.0025; a request's own accept per verify varies from step to step).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from typing import Any

import pytest
from spectower.control import mix_levelled, prefilled, speedup
from spectower.control.policy import learn_counters
from spectower.plugin import engine_counters
from spectower.simulator.accept_kinds import AcceptKind, arithmetic_mean, harmonic_mean
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import load_profile
from spectower.simulator.server_info import ServerInfo

from tests.conftest import REPO_ROOT
from tests.sim_closed_loop import run_closed_loop, virtual_sleep

# The fixed-share 0.5 pair's profile (its step noise kept: the runs are seeded, so deterministic).
PROFILE = load_profile(REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton.json")
KINDS = (AcceptKind(4.0, 0.5), AcceptKind(2.0, 0.5))
SEED = 0
CLIENTS, CEILING, BIN = 48, 24, 48
PROMPT_TOKENS = 64
OUTPUT_TOKENS = (64, 448)  # each request's output length, uniform in this range (the sweep's mix)
CYCLE = 1024  # batches per window: its exploring part 40 batches at the default share (8192 on a server)
SHARE = 0.02  # the default share
STEADY_STEPS, EXPLORED_STEPS = 20_000, 40_000  # decode steps: the explored run holds 15 parts
SNAPSHOT_EVERY = 2_000  # decode steps per counter interval of the explored run, as learn reads them
# The module's three runs (80 000 decode steps) take 25 s alone on a 2-core box and took 120 s in the
# whole suite there (2026-12-07): the first test, whose setup they are, gets more than pytest's default 300 s.
pytestmark = pytest.mark.timeout(600)


def closed_loop(ceiling: int | None, kinds: tuple[AcceptKind, ...], steps: int,
                snapshots: list[tuple[float, dict[str, Any]]] | None = None) -> dict[str, Any]:  # fmt: skip
    """Rank 0's counters, as its ``/server_info`` publishes them, after ``steps`` decode steps of a closed
    loop of ``CLIENTS`` (each resubmits when its request finishes) at ``ceiling`` (None: always on, nothing
    explored); ``snapshots``, where given, gets (virtual time, counters) every ``SNAPSHOT_EVERY`` steps."""

    async def run() -> dict[str, Any]:
        share = 0.0 if ceiling is None else SHARE
        config = SimConfig(profile=PROFILE, explore_share=share, explore_cycle=CYCLE, accept_kinds=kinds,
                           seed=SEED)  # fmt: skip
        engine = Engine(config)
        engine.set_spec_max_bs(engine.max_running_requests if ceiling is None else ceiling)

        def after_step(rank: RankScheduler, deadline: float) -> bool:
            if snapshots is not None and rank.decode_passes % SNAPSHOT_EVERY == 0:
                snapshots.append((deadline, rank.counters.snapshot()))
            return rank.decode_passes >= steps

        await run_closed_loop(engine, CLIENTS, PROMPT_TOKENS, OUTPUT_TOKENS, random.Random(SEED), after_step)
        info = ServerInfo(config, engine)
        try:
            counters: dict[str, Any] = info.server_info()["internal_states"][0]["spectower"]["counters"]
        finally:
            info.close()
        return counters

    return asyncio.run(run())


@pytest.fixture(scope="module")
def runs() -> Iterator[dict[str, Any]]:
    """Always on, the policy's ceiling exploring, both with the two kinds; and the policy with one kind. And
    the policy run's counter intervals (``intervals``), ``rates()`` of its consecutive snapshots."""
    snapshots: list[tuple[float, dict[str, Any]]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RankScheduler, "_sleep_until", virtual_sleep)
        out: dict[str, Any] = {
            "on": closed_loop(None, KINDS, STEADY_STEPS),
            "explored": closed_loop(CEILING, KINDS, EXPLORED_STEPS, snapshots),
            "one kind": closed_loop(CEILING, (), STEADY_STEPS),
        }
        yield {**out, "intervals": speedup.intervals_from_snapshots(snapshots)}


def drafted(counters: dict[str, Any]) -> dict[str, float]:
    """Bin ``BIN``'s drafted cell: steps, tokens, step seconds and slots (the requests of its steps)."""
    i = counters["bins"].index(BIN)
    slots = engine_counters.slots_block(counters)
    assert slots is not None
    cell = {field: float(counters["drafted"][field][i]) for field in engine_counters.FIELDS}
    return {**cell, "slots": slots["drafted"][i]}


def means(counters: dict[str, Any]) -> tuple[float, float, float]:
    """The ``mix`` block's parts in bin ``BIN``, and their requests' arithmetic and harmonic means."""
    mix = engine_counters.mix_block(counters)
    assert mix is not None
    i = counters["bins"].index(BIN)
    requests = mix["requests"][i]
    return mix["parts"][i], mix["accept_sum"][i] / requests, requests / mix["inverse_sum"][i]


def test_the_explored_drafting_commits_more_per_request_step_at_the_same_batch(runs: dict[str, Any]) -> None:
    """The lean, in the slots block: the parts' counted drafted steps hold as many requests a step as always
    on's (47.6) and commit more tokens per request (+7.5 %): a higher accept, not a larger batch."""
    explored, steady = drafted(runs["explored"]), drafted(runs["on"])
    assert explored["steps"] >= 200 and steady["steps"] == STEADY_STEPS
    assert explored["slots"] / explored["steps"] == pytest.approx(steady["slots"] / steady["steps"], rel=0.01)
    lean = (explored["tokens"] / explored["slots"]) / (steady["tokens"] / steady["slots"])
    assert lean > 1.03


def test_the_parts_harmonic_mean_is_what_always_on_commits_per_request_step(runs: dict[str, Any]) -> None:
    """The mix block: each part's first batch is the gated stream's (A / H at the kinds' 1.125), and H, what
    a drafting stream of those requests commits per request-step, reads always on's accept per slot (2.664
    against 2.660). The explored steps, half turned over, sit between the two means."""
    parts, arithmetic, harmonic = means(runs["explored"])
    steady = drafted(runs["on"])
    assert parts >= 10
    assert arithmetic / harmonic == pytest.approx(arithmetic_mean(KINDS) / harmonic_mean(KINDS), rel=0.01)
    assert harmonic == pytest.approx(steady["tokens"] / steady["slots"], rel=0.015)
    explored = drafted(runs["explored"])
    assert harmonic < explored["tokens"] / explored["slots"] < arithmetic


def test_levelled_by_the_mix_the_explored_drafting_serves_what_always_on_serves(runs: dict[str, Any]) -> None:
    """What levelling by the mix would read: the explored drafted step time with its tokens at ``slots x H``
    against always on's drafted rate, 0.990 (raw 1.063: learn's drafting side high by the mix)."""
    _, _, harmonic = means(runs["explored"])
    explored, steady = drafted(runs["explored"]), drafted(runs["on"])
    steady_rate = steady["tokens"] / steady["time_s"]
    assert explored["tokens"] / explored["time_s"] / steady_rate > 1.03
    levelled = explored["slots"] * harmonic / explored["time_s"]
    assert levelled / steady_rate == pytest.approx(1.0, abs=0.02)


def test_with_one_kind_the_parts_requests_lean_nowhere(runs: dict[str, Any]) -> None:
    parts, arithmetic, harmonic = means(runs["one kind"])
    assert parts >= 5
    assert arithmetic / harmonic == pytest.approx(1.0, abs=0.005)


def test_learn_reads_the_explored_drafting_levelled_by_the_mix_at_always_on(runs: dict[str, Any]) -> None:
    """What learn weighs for drafting the gated bin: the policy run's intervals (``rates()`` of its
    consecutive snapshots, as learn reads its own) through ``as_choices``, which levels the explored drafted
    cells by the window's mix (14 parts, 670 requests, H 2.661) and then by their prefills: 0.989 of always
    on's steady drafted rate at 48 (with the seconds outside the steps, as both are read), where without the
    mix levelling (the prefill levelling alone, which has no steady drafting bin to take a cost from here)
    it reads 1.060."""
    intervals: list[dict[str, Any]] = runs["intervals"]
    masks = [learn_counters.drafted_by(interval["bins"], CEILING) for interval in intervals]
    i = intervals[0]["bins"].index(BIN)
    steady = engine_counters.with_outside(engine_counters.rates(None, runs["on"]))["drafted"]
    steady_rate = steady["tokens"][i] / steady["time_s"][i]

    def rate(read: list[dict[str, Any]]) -> float:
        """The drafted rate at ``BIN`` over the intervals: their tokens over their seconds."""
        return sum(x["drafted"]["tokens"][i] for x in read) / sum(x["drafted"]["time_s"][i] for x in read)

    mix = mix_levelled.levelling_mix(intervals)
    assert mix is not None and mix.parts >= 10
    chosen = rate(learn_counters.as_choices(intervals, masks, 1.0))
    assert chosen / steady_rate == pytest.approx(1.0, abs=0.02)
    assert rate(prefilled.levelled_intervals(intervals, masks)) / steady_rate > 1.03
