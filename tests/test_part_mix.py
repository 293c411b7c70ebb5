"""plugin/part_mix.py: the request mix of each exploring part (plugin 0.4.15), on stand-in requests that carry
SGLang's two cumulative counts. What it records at a part's end, which requests count, which parts count
nothing, its sums across parts and bins, when its readings are taken in the overlap loop (the results due
before them), and its means against a plain-Python harmonic mean."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectower.plugin import engine_counters as ec
from spectower.plugin import sglang_targets
from spectower.plugin.part_mix import PartMix

from tests.conftest import examples


@dataclass
class Req:
    """A stand-in for SGLang's ``Req``: its cumulative verify passes and correct drafts."""

    accept: float = 3.0  # tokens per verify while drafted, the bonus token included
    spec_verify_ct: int = 0
    spec_num_correct_drafts: int = 0

    def verify(self, drafted: bool = True) -> None:
        """One decode result applied: a drafted verify commits ``accept`` tokens, a gated one the bonus."""
        self.spec_verify_ct += 1
        self.spec_num_correct_drafts += round(self.accept - 1) if drafted else 0


def step(mix: PartMix, reqs: list[Req], in_part: bool, drafts: bool = True) -> None:
    """One decode step of the normal loop: decided (nothing due), then its result applied to ``reqs``."""
    mix.batch(in_part, drafts, len(reqs), lambda: reqs)
    for req in reqs:
        req.verify(drafts)


def sums(mix: PartMix, bins: list[int], b: int) -> dict[str, float]:
    block = mix.block(bins)
    return {field: block[field][bins.index(b)] for field in block}


def test_a_part_records_its_first_batchs_requests_and_their_accept_since_its_start() -> None:
    """Gated steps before the part count nothing; a request that finishes mid-part keeps the counts it
    finished with; one that joins after the first batch is not the part's; one without a verify in the part
    (retracted at once, say) is left out."""
    fours, twos, idle = [Req(4.0) for _ in range(3)], [Req(2.0) for _ in range(2)], Req(4.0)
    first = [*fours, *twos, idle]
    mix = PartMix()
    for _ in range(5):
        step(mix, first, in_part=False, drafts=False)  # the gated stream: 1 token a verify
    step(mix, [*fours, *twos], in_part=True)  # the idle request never verifies again
    step(mix, [*fours[1:], *twos, Req(4.0)], in_part=True)  # fours[0] finished; a newcomer
    step(mix, [*fours[1:], *twos], in_part=False, drafts=False)  # the part ends before this one's result
    got = sums(mix, ec.counter_bins(8), 6)
    assert got == {"parts": 1, "requests": 5, "accept_sum": pytest.approx(3 * 4 + 2 * 2),
                   "inverse_sum": pytest.approx(3 / 4 + 2 / 2)}  # fmt: skip
    assert mix._part is None and mix.unread == 0


def test_a_part_whose_batch_cannot_be_read_or_runs_gated_adds_nothing() -> None:
    """No request list, one that fails, one of another batch's size, or a first batch that does not draft:
    the part is not measured, and the part's later batches start none; a batch of the part run gated
    (above the stream's limit) drops the part read so far. The next part is measured again."""
    reqs = [Req() for _ in range(4)]

    def broken() -> list[Any]:
        raise RuntimeError("no batch")

    mix = PartMix()
    for requests in (lambda: None, broken, lambda: reqs[:3]):
        mix.batch(True, True, 4, requests)
        step(mix, reqs, in_part=True)
        step(mix, reqs, in_part=False, drafts=False)
    assert mix.unread == 3
    mix.batch(True, False, 4, lambda: reqs)  # its first batch above the stream's limit: gated
    step(mix, reqs, in_part=True)
    step(mix, reqs, in_part=False, drafts=False)
    step(mix, reqs, in_part=True)
    step(mix, reqs, in_part=True, drafts=False)  # gated within the part
    step(mix, reqs, in_part=False, drafts=False)
    assert mix.sums == {} and mix._part is None
    step(mix, reqs, in_part=True)
    step(mix, reqs, in_part=False, drafts=False)
    assert mix.sums == {4: [1, 4, 12.0, 4 / 3]}
    assert mix.unread == 3


def test_parts_sum_per_bin_of_their_first_batch() -> None:
    mix = PartMix()
    for batch in ([Req(4.0), Req(2.0)], [Req(2.0), Req(2.0), Req(4.0)], [Req(4.0)] * 5):
        step(mix, batch, in_part=True)
        step(mix, batch, in_part=True)
        step(mix, batch, in_part=False, drafts=False)
    bins = ec.counter_bins(4)  # [1, 2, 3, 4]: the 5-request part counts in the last bin
    block = mix.block(bins)
    assert block["parts"] == [0, 1, 1, 1] and block["requests"] == [0, 2, 3, 5]
    assert block["accept_sum"] == [0, 6.0, 8.0, 20.0]
    assert block["inverse_sum"] == pytest.approx([0, 0.75, 1.25, 1.25])


def test_in_the_overlap_loop_each_reading_waits_for_the_results_due_before_it() -> None:
    """The overlap loop launches a batch before it applies the previous one's result: a reading at the
    part's first batch waits for the gated batch before it, a reading at its end for the part's last batch.
    Each is taken as the batch's own result arrives, before it is applied: the part's record holds its
    drafted verifies exactly, the gated ones around it not at all (a = 4, not 3.4 or 3.25)."""
    reqs = [Req(4.0) for _ in range(3)]
    mix = PartMix()
    in_flight: list[bool] = []  # the batch launched last turn: its drafts

    def turn(in_part: bool, drafts: bool) -> None:
        mix.batch(in_part, drafts, len(reqs), lambda: reqs, due=len(in_flight))
        in_flight.append(drafts)
        if len(in_flight) == 2:  # the previous batch's result, after this one launched
            mix.result()
            drafted = in_flight.pop(0)
            for req in reqs:
                req.verify(drafted)

    for _ in range(3):
        turn(False, False)
    for _ in range(4):
        turn(True, True)
    for _ in range(3):
        turn(False, False)
    assert sums(mix, [1, 2, 3], 3) == {"parts": 1, "requests": 3, "accept_sum": 12.0, "inverse_sum": 0.75}


def test_a_one_batch_part_in_the_overlap_loop_and_a_part_that_replaces_one_still_due() -> None:
    """A part of one batch: its end is due after its own result, which also takes its start. A new part
    whose first batch comes before the last one's end reading replaces it: one part's requests at most."""
    reqs = [Req(4.0), Req(2.0)]
    mix = PartMix()
    mix.batch(True, True, 2, lambda: reqs, due=1)  # E1, with the gated batch before it in flight
    mix.result()  # the gated batch's result: due before E1's start
    for req in reqs:
        req.verify(False)
    mix.batch(False, False, 2, lambda: reqs, due=1)  # G1, with E1 in flight
    mix.result()  # E1's own result: the start reading, before it is applied
    for req in reqs:
        req.verify(True)
    mix.batch(True, True, 2, lambda: reqs, due=1)  # a new part before G1's result: the first one goes
    assert mix.sums == {} and mix._part is not None and mix._part.before is None
    mix = PartMix()
    mix.batch(True, True, 2, lambda: reqs, due=1)
    mix.result()
    mix.batch(False, False, 2, lambda: reqs, due=1)
    mix.result()
    for req in reqs:
        req.verify(True)
    mix.result()  # G1's own result: the end reading
    assert mix.sums == {2: [1, 2, 6.0, 0.75]}


def test_sglang_targets_reads_a_requests_two_counts_or_none() -> None:
    assert sglang_targets.spec_counts(Req(spec_verify_ct=3, spec_num_correct_drafts=5)) == (3, 5)
    assert sglang_targets.spec_counts(object()) is None
    assert sglang_targets.spec_counts(Req(spec_verify_ct=True)) is None  # type: ignore[arg-type]
    assert sglang_targets.batch_requests(type("Batch", (), {"reqs": [1, 2]})()) == [1, 2]
    assert sglang_targets.batch_requests(None) is None
    # a request whose counts cannot be read is left out of its part, the others count
    mix = PartMix()
    reqs: list[Any] = [Req(4.0), object()]
    mix.batch(True, True, 2, lambda: reqs)
    reqs[0].verify()
    mix.batch(False, False, 2, lambda: reqs)
    assert mix.sums == {2: [1, 1, 4.0, 0.25]}


@settings(max_examples=examples(100), deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 4)), min_size=1, max_size=30))
def test_the_parts_means_are_the_plain_and_harmonic_means_of_each_requests_accept(
    requests: list[tuple[int, int]],
) -> None:
    """Each request verifies ``n`` times in the part with ``d`` correct drafts each time (0-4: an EAGLE
    chain of 4); the block's A and H are ``statistics``' means of 1 + d."""
    reqs = [Req(1.0 + drafts) for _, drafts in requests]
    mix = PartMix()
    mix.batch(True, True, len(reqs), lambda: reqs)
    for req, (n, _) in zip(reqs, requests, strict=True):
        for _ in range(n):
            req.verify()
    mix.batch(False, False, len(reqs), lambda: reqs)
    got = sums(mix, ec.counter_bins(32), ec.bin_of(len(reqs)))
    accepts = [1.0 + drafts for _, drafts in requests]
    assert got["parts"] == 1 and got["requests"] == len(reqs)
    assert got["accept_sum"] / got["requests"] == pytest.approx(statistics.fmean(accepts), rel=1e-9)
    assert got["requests"] / got["inverse_sum"] == pytest.approx(statistics.harmonic_mean(accepts), rel=1e-8)
