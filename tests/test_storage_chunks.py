"""The chunk codec (storage/chunks.py) gives back every bit it was given, and is small on real shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectower.storage import chunks
from spectower.storage.chunks import Chunk, ChunkColumn, ChunkError

from tests.conftest import examples

ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True, width=64)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _bits(a: np.ndarray) -> list[int]:
    return [int(x) for x in np.asarray(a).view(np.uint64)]


@st.composite
def chunk_input(draw: st.DrawFn) -> tuple[np.ndarray, list[ChunkColumn]]:
    n = draw(st.integers(min_value=1, max_value=300))
    start = draw(st.floats(min_value=0.0, max_value=4e9))
    steps = draw(
        st.lists(
            st.one_of(st.just(1.0), st.floats(min_value=0, max_value=1e5), st.sampled_from([0.999, 1.0003])),
            min_size=n - 1, max_size=n - 1,
        )
    )  # fmt: skip
    ts = np.array([start, *(start + np.cumsum(steps))], dtype=np.float64)[:n]
    shape = draw(st.sampled_from(["steps", "millis", "any"]))
    if shape == "millis":  # stamped to the millisecond, as the collectors do (-0.0 and 0.0 among them)
        ts = np.array([round(t, 3) for t in ts], dtype=np.float64)
        ts[: draw(st.integers(0, 1))] = draw(st.sampled_from([-0.0, 0.0, 1.5]))
    elif shape == "any":  # any floats at all, unordered, NaN included
        ts = np.array(draw(st.lists(ANY_FLOAT, min_size=n, max_size=n)), dtype=np.float64)
    columns = []
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            pool = st.one_of(ANY_FLOAT, st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, 42.5]))
            values = np.array(draw(st.lists(pool, min_size=n, max_size=n)), dtype=np.float64)
        else:
            values = np.array(draw(st.lists(INT64, min_size=n, max_size=n)), dtype=np.int64)
        mode = draw(st.sampled_from(["all", "some", "none", "constant"]))
        present = None
        if mode == "some":
            present = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=np.bool_)
        elif mode == "none":
            present = np.zeros(n, dtype=np.bool_)
        elif mode == "constant":
            values = np.full(n, values[0], dtype=values.dtype)
        columns.append(ChunkColumn(values, present))
    return ts, columns


@settings(max_examples=examples(120), deadline=None)
@given(chunk_input())
def test_every_bit_comes_back(case: tuple[np.ndarray, list[ChunkColumn]]) -> None:
    ts, columns = case
    chunk = Chunk.parse(chunks.encode(ts, columns))
    assert chunk.n == len(ts)
    assert _bits(chunk.timestamps()) == _bits(ts)
    for k, given_col in enumerate(columns):
        values, present = chunk.column(k)
        assert values.dtype == given_col.values.dtype
        expect_present = np.ones(len(ts), bool) if given_col.present is None else given_col.present
        assert present.tolist() == expect_present.tolist()
        # where a value is present, its exact bit pattern (NaN payload, -0.0) is back
        assert _bits(values[present]) == _bits(given_col.values[expect_present])


def test_special_floats_and_one_sample() -> None:
    special = np.array([math.nan, -0.0, math.inf, -math.inf, 5e-324], dtype=np.float64)
    ts = np.array([1.7e9, 1.7e9 + 1, 1.7e9 + 1, 1.7e9 + 0.5, 1.8e9])  # repeated, backwards, a gap
    chunk = Chunk.parse(chunks.encode(ts, [ChunkColumn(special)]))
    values, _ = chunk.column(0)
    assert _bits(values) == _bits(special)
    assert _bits(chunk.timestamps()) == _bits(ts)
    one = Chunk.parse(chunks.encode(np.array([1.5]), [ChunkColumn(np.array([7], dtype=np.int64))]))
    assert one.timestamps().tolist() == [1.5] and one.column(0)[0].tolist() == [7]


def test_steady_samples_take_about_a_byte_a_value() -> None:
    """An hour of 1 Hz with scrape jitter: a slowly moving gauge, a constant, a counter, a NULL column."""
    rng = np.random.default_rng(1)
    n = 3600
    ts = 1.76e9 + np.arange(n) + rng.uniform(0, 0.002, n)
    util = np.round(np.clip(50 + np.cumsum(rng.normal(0, 3, n)), 0, 100))
    columns = [
        ChunkColumn(util),
        ChunkColumn(np.full(n, 700.0)),
        ChunkColumn(np.cumsum(rng.integers(0, 50, n)).astype(np.int64)),
        ChunkColumn(np.zeros(n), np.zeros(n, dtype=bool)),
    ]
    blob = chunks.encode(ts, columns)
    assert len(blob) / (n * len(columns)) < 1.2


@pytest.mark.parametrize("damage", ["truncate", "version", "garbage"])
def test_a_damaged_chunk_is_a_clear_error(damage: str) -> None:
    blob = chunks.encode(np.array([1.0, 2.0, 3.0]), [ChunkColumn(np.array([1.0, 2.0, 4.0]))])
    if damage == "truncate":
        blob = blob[:-3]
    elif damage == "version":
        blob = bytes([99]) + blob[1:]
    else:
        blob = blob[:20] + b"\xff" * (len(blob) - 20)
    with pytest.raises(ChunkError, match="chunk: "):
        chunk = Chunk.parse(blob)
        chunk.timestamps()
        chunk.column(0)


def test_millisecond_stamps_cost_about_half_a_byte_each() -> None:
    """Timestamps stamped to the millisecond (the collectors' sink does) with a few ms of scrape jitter:
    stored as whole milliseconds, exactly."""
    rng = np.random.default_rng(2)
    ts = np.round(1.76e9 + np.arange(3600) + rng.integers(0, 4, 3600) / 1000, 3)
    blob = chunks.encode(ts, [])
    assert _bits(Chunk.parse(blob).timestamps()) == _bits(ts)
    assert len(blob) < 3600 * 0.6  # whole float64 bit patterns: about 2 bytes each
