"""Load traces: the built-ins (deterministic, wide enough), the file format and its errors."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from spectower.simulator.profile import builtin_profile_names, load_profile
from spectower.simulator.traces import BUILTIN_TRACES, TraceError, builtin_trace, load_trace, parse_trace


def samples(trace_name: str, seed: int, duration: float = 3600.0) -> list[float]:
    trace = builtin_trace(trace_name, duration, seed)
    return [trace.concurrency_at(t) for t in range(0, int(duration) + 1, 5)]


@pytest.mark.parametrize("name", BUILTIN_TRACES)
def test_builtin_traces_are_deterministic_per_seed(name: str) -> None:
    assert builtin_trace(name, 3600, 4) == builtin_trace(name, 3600, 4)
    assert builtin_trace(name, 3600, 4) != builtin_trace(name, 3600, 5)


@pytest.mark.parametrize("name", BUILTIN_TRACES)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_builtin_traces_span_one_to_past_max_running_requests(name: str, seed: int) -> None:
    values = samples(name, seed)
    assert min(values) <= 1.5
    assert max(values) >= 64  # reaches max_running_requests of both shipped profiles (the excess queues)
    assert all(v >= 0 for v in values)
    trace = builtin_trace(name, 3600, seed)
    assert trace.duration_s == pytest.approx(3600)


@pytest.mark.parametrize("name", BUILTIN_TRACES)
@pytest.mark.parametrize("profile_name", builtin_profile_names())
def test_builtin_traces_cross_each_profiles_crossover_region(name: str, profile_name: str) -> None:
    profile = load_profile(profile_name)
    cross = profile.crossover() or float(profile.max_running_requests)  # none: spec pays up to the top
    values = samples(name, 0)
    below = sum(1 for v in values if v < cross / 1.5)
    above = sum(1 for v in values if v > cross * 1.5)
    near = sum(1 for v in values if cross / 1.5 <= v <= cross * 1.5)
    # each side and the region itself get a real share of the hour, not one sample
    assert min(below, above if profile.crossover() else below, near) >= 20, (below, near, above)


def test_builtin_duration_scales() -> None:
    short = builtin_trace("diurnal", 600, 0)
    assert short.duration_s == pytest.approx(600)
    assert max(samples("diurnal", 0, 600)) >= 64


def test_concurrency_at_is_linear_with_steps_and_held_at_the_ends() -> None:
    trace = parse_trace([[0, 1], [10, 11], [10, 40], [20, 40]])
    assert trace.concurrency_at(-5) == 1
    assert trace.concurrency_at(5) == pytest.approx(6)
    assert trace.concurrency_at(10) == 40  # a step: the later value from t on
    assert trace.concurrency_at(9.999) == pytest.approx(10.999)
    assert trace.concurrency_at(100) == 40


def test_load_trace_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps([[0, 2], [60, 30], [120, 2]]))
    trace = load_trace(str(path))
    assert trace.name == "mine"
    assert trace.duration_s == 120
    assert trace.concurrency_at(30) == pytest.approx(16)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"t": 1}, "non-empty JSON list"),
        ([], "non-empty JSON list"),
        ([[0, 1], [5]], r"point \[1\] must be a pair"),
        ([[0, 1], "x"], r"point \[1\] must be a pair"),
        ([[0, 1], [5, "a"]], r"point \[1\] concurrency must be a finite number"),
        ([[0, 1], [5, True]], r"point \[1\] concurrency must be a finite number"),
        ([[0, 1], [5, -2]], r"point \[1\] concurrency must be >= 0"),
        ([[0, 1], ["x", 2]], r"point \[1\] t_seconds must be a finite number"),
        ([[0, 1], [float("nan"), 2]], r"point \[1\] t_seconds must be a finite number"),
        ([[0, 1], [10, 2], [5, 3]], r"point \[2\] t_seconds 5 goes back in time"),
        ([[0, 1]], "must span some time"),
        # past these, scoring a trace never ended (1e300 s) or overflowed (1e308 clients)
        ([[0, 1], [1e300, 3]], r"point \[1\] t_seconds must be at most 2.592e\+06, got 1e\+300"),
        ([[0, 1e308], [10, 3]], r"point \[0\] concurrency must be at most 1e\+06, got 1e\+308"),
    ],
)
def test_bad_traces_name_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace(data, source="t.json")
    assert issubclass(TraceError, ValueError)


def test_load_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file and no built-in trace"):
        load_trace("weekly")
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("[[0, 1], [5, 2]")
    with pytest.raises(TraceError) as err:
        load_trace(str(bad))
    # the option's word and both forms a file may take: an Azure trace without .csv read as JSON
    assert str(err.value).startswith(f"trace {str(bad)!r}: not valid JSON")
    assert str(err.value).endswith("a concurrency trace is JSON, a request trace a .csv file")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe[[0, 1]]")
    with pytest.raises(TraceError, match=r"not UTF-8 text \(byte 0\)"):
        load_trace(str(binary))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(TraceError, match=r"not usable JSON \(nested too deeply\)"):
        load_trace(str(deep))
    digits = tmp_path / "digits.json"
    digits.write_text(f"[[0, {'9' * 5000}]]")
    with pytest.raises(TraceError, match="not usable JSON"):
        load_trace(str(digits))
    with pytest.raises(TraceError, match="more than"):
        load_trace("/dev/zero")
    with pytest.raises(TraceError, match="at least 60 s"):
        builtin_trace("ramp", 10, 0)
    with pytest.raises(TraceError, match="unknown built-in trace"):
        builtin_trace("weekly", 3600, 0)
    assert not math.isnan(builtin_trace("step", 3600, 0).concurrency_at(0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jump_moves_every_second_between_one_and_max_running_requests(seed: int) -> None:
    trace = load_trace("jump", seed=seed, max_running_requests=64)
    assert trace.name == "jump" and trace.duration_s == pytest.approx(3600)
    levels = [trace.concurrency_at(t + 0.5) for t in range(3600)]
    assert all(float(c).is_integer() and 1 <= c <= 64 for c in levels)
    assert min(levels) == 1 and max(levels) == 64
    # held for the whole second, then a new draw: no 5 s decision interval sees one load
    assert all(trace.concurrency_at(t) == trace.concurrency_at(t + 0.99) for t in range(3599))
    changes = sum(a != b for a, b in itertools.pairwise(levels))
    assert changes > 0.95 * 3599  # uniform over 64 levels: the next second repeats 1 time in 64
    for b in (1, 2, 4, 8, 16, 32, 64):  # every power-of-two bin of the engine counters gets its seconds
        assert sum(1 for c in levels if b // 2 < c <= b) >= 30, b
    default = load_trace("jump", seed=seed)  # without a max_running_requests: up to 90, like the others
    assert max(default.concurrency_at(t) for t in range(3600)) == 90
    assert load_trace("jump", seed=seed, max_running_requests=64) != load_trace(
        "jump", seed=seed + 1, max_running_requests=64
    )


def test_jump_refuses_a_top_below_one() -> None:
    with pytest.raises(TraceError, match="max_running_requests must be >= 1"):
        builtin_trace("jump", 3600, 0, max_running_requests=0)


def test_an_error_naming_brackets_is_printed_as_text(tmp_path: Path) -> None:
    """The CLI's last line of defence printed messages as rich markup: a path with "[/b]" in it raised
    MarkupError as a traceback, and "[t_seconds, concurrency]" vanished from the message."""
    from tests.conftest import cli_in_process

    folder = tmp_path / "a[/b]"
    folder.mkdir(parents=True)  # "a[" holding "b]": the path reads a[/b]
    trace = folder / "t.json"
    trace.write_text("[]")
    done = cli_in_process("sim", "evaluate", "--profile", "h200-8b-pair-triton", "--trace", str(trace))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    said = f"{trace}: a trace is a non-empty JSON list of [t_seconds, concurrency] pairs"
    assert done.stderr.strip() == f"error: {said}"
