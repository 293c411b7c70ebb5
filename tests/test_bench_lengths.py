"""collectors/bench/lengths.py: mixed output lengths, one per request index; the flag's one-line errors."""

from __future__ import annotations

import itertools

import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.lengths import OutputLengths, parse_output_lengths


def test_a_range_spreads_lengths_over_it_and_an_index_keeps_its_length() -> None:
    lengths = parse_output_lengths("64-448")
    assert lengths == OutputLengths(64, 448) and lengths.mixed and str(lengths) == "64-448"
    drawn = [lengths.of(i) for i in range(2000)]
    assert min(drawn) >= 64 and max(drawn) <= 448
    # spread over the range: every quarter of it gets about a quarter of the requests
    quarters = [sum(64 + q * 96 <= n < 64 + (q + 1) * 96 for n in drawn) for q in range(4)]
    assert all(400 <= count <= 600 for count in quarters), quarters
    # consecutive requests differ (no runs of one length finishing together)
    assert sum(a != b for a, b in itertools.pairwise(drawn)) > 1990
    assert [lengths.of(i) for i in range(50)] == drawn[:50]


def test_one_number_is_one_length() -> None:
    lengths = parse_output_lengths("256")
    assert not lengths.mixed and {lengths.of(i) for i in range(100)} == {256} and str(lengths) == "256"


@pytest.mark.parametrize("text", ["", "a-b", "1-2-3", "448-64", "1", "0-10", "5-99999999"])
def test_a_bad_range_is_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(BenchError, match=r"^--output-len: ") as raised:
        parse_output_lengths(text)
    assert "\n" not in str(raised.value)
