"""collectors/bench/limits.py: every bench flag that sizes a run has a bound, checked before anything runs.

``bench load --max-concurrency 1e20`` allocated clients until the kernel killed it; ``bench sweep
--input-len 1e20`` built a prompt for ever while holding the server's knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.limits import MAX_CONCURRENCY, MAX_TOKENS
from spectower.collectors.bench.sweep import SweepConfig
from spectower.collectors.bench.walk import WalkConfig, parse_pattern

from tests.conftest import cli_in_process

HUGE = 10**20


@pytest.mark.parametrize(
    ("pattern", "max_concurrency", "flag"),
    [("ramp", HUGE, "--max-concurrency"), ("day", 0, "--max-concurrency"), (f"hover:{HUGE}", 8, "hover:N"),
     (f"steps:1,{MAX_CONCURRENCY + 1}", 8, "steps")],
)  # fmt: skip
def test_the_load_walker_refuses_a_client_count_past_its_bound(
    pattern: str, max_concurrency: int, flag: str
) -> None:
    with pytest.raises(BenchError, match=rf"{flag}: must be between 1 and {MAX_CONCURRENCY}, got"):
        parse_pattern(pattern, max_concurrency=max_concurrency)
    assert parse_pattern("ramp", max_concurrency=MAX_CONCURRENCY).ceiling == MAX_CONCURRENCY


@pytest.mark.parametrize(("field", "flag"), [("input_len", "--input-len"), ("output_len", "--output-len")])
def test_request_shapes_past_any_context_are_refused(field: str, flag: str) -> None:
    walk = WalkConfig(server="http://127.0.0.1:9", pattern=parse_pattern("ramp"), **{field: HUGE})
    with pytest.raises(BenchError, match=rf"^{flag}: must be between 1 and {MAX_TOKENS}, got {HUGE}$"):
        walk.validate()
    with pytest.raises(BenchError, match=rf"^--input-len: must be between 1 and {MAX_TOKENS}, got 0$"):
        WalkConfig(server="http://127.0.0.1:9", pattern=parse_pattern("ramp"), input_len=0).validate()
    sweep = SweepConfig(server="http://127.0.0.1:9", duration_per_level=5.0, **{field: HUGE})
    with pytest.raises(BenchError, match=rf"^{flag}: must be between"):
        sweep.validate()


@pytest.mark.parametrize(("field", "flag"), [("rounds", "--rounds"), ("warmup", "--warmup"),
                                              ("requests_per_level", "--requests-per-level")])  # fmt: skip
def test_sweep_counts_have_bounds(field: str, flag: str) -> None:
    kwargs = {"duration_per_level": None} if field == "requests_per_level" else {"duration_per_level": 5.0}
    with pytest.raises(BenchError, match=rf"^{flag}: must be between \d+ and \d+, got {HUGE}$"):
        SweepConfig(server="http://127.0.0.1:9", **kwargs, **{field: HUGE}).validate()  # type: ignore[arg-type]


def test_the_cli_says_it_in_one_line_before_contacting_anything() -> None:
    cmd = ["bench", "load", "--server", "http://127.0.0.1:9", "--duration", "4s",
           "--max-concurrency", str(HUGE), "--pattern", "ramp"]  # fmt: skip
    done = cli_in_process(*cmd)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    said = f"--max-concurrency: must be between 1 and {MAX_CONCURRENCY}, got {HUGE}"
    assert done.stderr.strip() == f"error: {said}"


def test_a_profile_out_that_cannot_be_written_is_said_before_the_sweep(tmp_path: Path) -> None:
    # it was found at the end of the sweep (a folder), or made silently (a missing folder)
    for out, said in ((tmp_path, "is a folder, not a file"), (tmp_path / "no" / "p.json", "does not exist")):
        cmd = ["bench", "sweep", "--server", "http://127.0.0.1:9", "--profile-out", str(out),
               "--db", str(tmp_path / "db.sqlite")]  # fmt: skip
        done = cli_in_process(*cmd)
        assert done.returncode == 2 and done.stderr.startswith("error: --profile-out: "), done.stderr
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1
