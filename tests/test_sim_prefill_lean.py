"""The prefill lean of a drafting bin's explored gated side, in the simulator, and what levelling does to it
(control/prefilled.py ``levelled_intervals``, which learn's ``as_choices`` applies first).

SGLang's overlap loop counts a prefill's GPU time in the span of the decode step after it (plugin 0.4.14's
``prefilled`` block), so a decode step carries the prefills of the stream it sits in. On the H100
(2026-12-06, data/gpu-runs/h100-8b-pair-triton-prefilled-2026-12-06) a drafting bin's explored gated steps
at 32 carried a prefill in 0.138 of their steps against a steady gated stream's 0.085, and each of a drafting
stream's prefills includes the draft model's pass, which a gated stream skips (plugin 0.4.10): their raw
rate reads the gated choice low. The simulator's wire engine models both: a prefill's modelled seconds land
in the next decode step, a closed loop's clients resubmit when their request finishes, and the plugin's rule
skips the draft's prefill where nothing needs the draft warm (the profile's ``draft_prefill_share``).

The runs are the simulator's own loop (``RankScheduler.run``) with its clients as coroutines, on a virtual
clock: a rank's sleep gives the event loop one turn (the clients its last step finished resubmit, as HTTP
clients do while the next step runs) and returns its deadline at once. So a request that finished in one
step is prefilled after the next one, or after a prefill already under way: a drafting stream's finishes
reach into the first steps of an explored gated run. (Replacing finished requests before the very next
step instead leaves the explored steps about a drafting stream's prefill seconds per token, 7.9 us against
its 7.6 over 900 explored steps and a gated stream's 7.1-7.3: the draft's pass alone, a few tenths of a %
of the rate, within the noise.) The counters are fed the modelled durations.

The kept-extend tax (an explored gated step keeps the draft's KV extend, which a steady gated stream skips:
the profile's ``spec_off_warm`` curve, 0.93 of ``spec_off`` at 32) is a separate correction, learn's
``scale`` in ``as_choices``; the profile here runs its warm curve at ``spec_off``, so the explored gated side
and a steady gated stream differ by the prefills in their steps alone. No step noise (``noise_cv`` 0): the
runs are deterministic.

Measured (seed 0, 40 000 drafting steps, 600 explored gated steps at 32): the explored gated steps carry a
prefill in 0.152 of their steps against the steady gated stream's 0.109, 11.4 against 7.4 us of prefill per
output token; their raw rate reads 0.979 of the steady gated rate at 32, levelled 1.000. Over seeds 0-13
the raw reading was 0.973-0.990 of the truth (mean 0.982; seed 1 alone 1.000 over this length, a low run of
prefilled explored steps that longer runs wash out) and the levelled one 0.998-1.002.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from spectower.control import prefilled, speedup
from spectower.control.policy import learn_counters
from spectower.plugin import knob_contract
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine, RankScheduler
from spectower.simulator.profile import Profile, load_profile

from tests.conftest import REPO_ROOT
from tests.sim_closed_loop import run_closed_loop, virtual_sleep

# The H200 pair's profile with its draft_prefill_share (0.04: a skipped draft prefill is that much faster).
PROFILE_PATH = REPO_ROOT / "data" / "profiles" / "h200-8b-pair-triton.json"
SEED = 0
PROMPT_TOKENS = 64
OUTPUT_TOKENS = (64, 448)  # each request's output length, uniform in this range (the sweep's mix)
WARMUP_STEPS = 300  # decode steps before the first snapshot, for the closed loop's lengths to mix
SNAPSHOT_EVERY = 400  # decode steps per counter interval
DRAFTING_STEPS = 40_000  # phase A: 3 explored gated steps at 32 counted in every 200 (default share)
GATED_STEPS = 4_000  # phases B and C
BIN, STEADY_GATED_BIN = 32, 16

Phase = tuple[list[dict[str, Any]], list[list[bool]]]  # intervals, and learn's mask of each


def _profile() -> Profile:
    base = load_profile(PROFILE_PATH)
    return dataclasses.replace(base, noise_cv=0.0, spec_off_warm_tok_s=base.spec_off_tok_s)


def _engine(ceiling: int | None, explore_share: float) -> Engine:
    """The simulator at ``ceiling`` (None: every bin drafted, ``max_running_requests``)."""
    eng = Engine(SimConfig(profile=_profile(), explore_share=explore_share, seed=SEED))
    eng.set_spec_max_bs(eng.max_running_requests if ceiling is None else ceiling)
    return eng


def closed_loop(clients: int, ceiling: int | None, explore_share: float, steps: int) -> Phase:
    """Rank 0's counter intervals every ``SNAPSHOT_EVERY`` decode steps after ``WARMUP_STEPS``, of a closed
    loop of ``clients`` (each resubmits when its request finishes), and learn's mask of each for the
    ceiling it ran under (``learn_counters.drafted_by``)."""

    async def run() -> tuple[list[tuple[float, dict[str, Any]]], int]:
        eng = _engine(ceiling, explore_share)
        snapshots: list[tuple[float, dict[str, Any]]] = []

        def after_step(rank: RankScheduler, deadline: float) -> bool:
            done = rank.decode_passes - WARMUP_STEPS
            if done >= 0 and done % SNAPSHOT_EVERY == 0:
                snapshots.append((deadline, rank.counters.snapshot()))  # deadline: the virtual clock
            return done >= steps

        await run_closed_loop(eng, clients, PROMPT_TOKENS, OUTPUT_TOKENS, random.Random(SEED), after_step)
        return snapshots, eng.ranks[0].spec_max_bs

    snapshots, knob = asyncio.run(run())
    intervals = speedup.intervals_from_snapshots(snapshots)
    return intervals, [learn_counters.drafted_by(i["bins"], knob) for i in intervals]


@pytest.fixture(scope="module")
def phases() -> Iterator[dict[str, Phase]]:
    """A: 32 clients, the ceiling drafting every bin, exploration at its default share. B: 16 clients, the
    ceiling at 0 and nothing exploring: a steady gated stream that skips the draft's prefill, as the plugin's
    rule does. C, the truth: 32 clients gated as B."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RankScheduler, "_sleep_until", virtual_sleep)
        yield {
            "A": closed_loop(32, None, knob_contract.DEFAULT_EXPLORE_SHARE, DRAFTING_STEPS),
            "B": closed_loop(16, 0, 0.0, GATED_STEPS),
            "C": closed_loop(32, 0, 0.0, GATED_STEPS),
        }


def _window(phases: Mapping[str, Phase]) -> Phase:
    """What learn sees: phases A and B."""
    return phases["A"][0] + phases["B"][0], phases["A"][1] + phases["B"][1]


def _bin(intervals: Sequence[Mapping[str, Any]], b: int) -> speedup.BinEstimate:
    return next(x for x in speedup.estimate(intervals).bins if x.batch_size == b)


def _cell(phase: Phase, b: int, mode: str, steady: bool) -> prefilled.ModeSteps:
    return prefilled.choice_cells(*phase)[(b, mode, steady)]


def _per_token(cell: prefilled.ModeSteps) -> float:
    """The cell's prefill seconds per output token."""
    seconds = cell.prefill_s()
    assert seconds is not None and cell.tokens > 0
    return seconds / cell.tokens


def _fields(block: Mapping[str, Any], i: int) -> tuple[float, float, float]:
    """A mode's steps, tokens and seconds in one interval's bin ``i``."""
    return block["steps"][i], block["tokens"][i], block["time_s"][i]


def _truth(phases: Mapping[str, Phase]) -> float:
    """Phase C's steady gated rate at ``BIN``: tokens over time of its gated cells there."""
    intervals = phases["C"][0]
    i = intervals[0]["bins"].index(BIN)
    tokens = sum(interval["gated"]["tokens"][i] for interval in intervals)
    return tokens / sum(interval["gated"]["time_s"][i] for interval in intervals)


def test_a_drafting_bins_explored_gated_steps_carry_more_prefill_than_a_gated_stream(
    phases: dict[str, Phase],
) -> None:
    """The lean itself, in the counters: a drafting bin's explored gated steps at 32 carry a prefill in more
    of their steps, and more prefill seconds per output token, than a steady gated stream at 32 (measured
    0.152 against 0.109 of steps, 11.4 against 7.4 us per token; the H100 read 0.138 against 0.085). It is
    what levelling is for: counted as decode time it reads gating a drafting bin as slower than it is. And
    the premise levelling rests on: a steady gated stream's prefill seconds per token hardly move with the
    batch (7.3 us at 16, 7.4 at 32), so a bin the ceiling drafts takes them from the bins it gates."""
    assert _engine(None, knob_contract.DEFAULT_EXPLORE_SHARE).ranks[0].draft_prefill_skipped(BIN) is False
    assert _engine(0, 0.0).ranks[0].draft_prefill_skipped(BIN) is True  # B and C skip the draft's prefill
    explored = _cell(_window(phases), BIN, "gated", steady=False)
    steady = _cell(phases["C"], BIN, "gated", steady=True)
    assert explored.pure_steps > 10 * prefilled.MIN_PURE_STEPS  # 509 of its 600 steps
    share = explored.prefilled_steps / explored.steps
    assert share > 1.2 * steady.prefilled_steps / steady.steps
    assert _per_token(explored) > 1.3 * _per_token(steady)
    # an explored step's own decode time is a steady gated step's: the lean is in the prefills alone
    assert explored.pure_step_s() == pytest.approx(steady.pure_step_s(), rel=1e-3)
    at_16 = _per_token(_cell(phases["B"], STEADY_GATED_BIN, "gated", steady=True))
    assert at_16 == pytest.approx(_per_token(steady), rel=0.1)


def test_levelling_reads_a_drafting_bins_gated_side_at_the_steady_gated_rate(
    phases: dict[str, Phase],
) -> None:
    """What learn weighs for gating bin 32 while the ceiling drafts it: raw, its explored gated steps read
    0.979 of what a steady gated stream at 32 serves (the lean: at least 1 % low); levelled (each explored
    cell's pure steps plus the gated mode's steady prefill seconds per token, from phase B's bin 16) 1.000,
    within 0.5 %, and much closer than raw. A levelling that changed nothing would fail both. ``as_choices``
    (what learn moves on) reads the levelled gated side."""
    intervals, masks = _window(phases)
    truth = _truth(phases)
    raw = _bin(intervals, BIN).gated_tok_s
    levelled = _bin(prefilled.levelled_intervals(intervals, masks), BIN).gated_tok_s
    assert raw is not None and levelled is not None
    assert raw / truth < 0.99
    assert levelled / truth == pytest.approx(1.0, abs=0.005)
    assert abs(levelled - truth) < abs(raw - truth) / 3
    chosen = _bin(learn_counters.as_choices(intervals, masks, 1.0), BIN).gated_tok_s
    assert chosen == pytest.approx(levelled, rel=1e-9)


def test_levelling_leaves_steady_cells_as_measured(phases: dict[str, Phase]) -> None:
    """A cell its ceiling chose carries its own stream's prefills, which are part of what that choice
    serves: phase A's drafted side at 32 and phase B's gated side at 16 read the same rate, steps and
    seconds levelled as raw, interval by interval. Only the explored cell moves."""
    intervals, masks = _window(phases)
    levelled = prefilled.levelled_intervals(intervals, masks)
    for mode, b in (("drafted", BIN), ("gated", STEADY_GATED_BIN)):
        i = intervals[0]["bins"].index(b)
        raw_cells = [_fields(x[mode], i) for x in intervals]
        assert sum(steps for steps, _, _ in raw_cells) > 0
        assert [_fields(x[mode], i) for x in levelled] == raw_cells
    before, after = _bin(intervals, BIN), _bin(levelled, BIN)
    assert after.drafted_tok_s == before.drafted_tok_s and after.gated_steps == before.gated_steps
    assert _bin(levelled, STEADY_GATED_BIN).gated_tok_s == _bin(intervals, STEADY_GATED_BIN).gated_tok_s
    assert after.gated_tok_s != before.gated_tok_s
