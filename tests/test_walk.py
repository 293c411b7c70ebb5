"""The load walker (collectors/bench/walk.py): its patterns, and a short real run against the simulator."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.lengths import OutputLengths
from spectower.collectors.bench.prompts import Prompt
from spectower.collectors.bench.records import RequestRecord
from spectower.collectors.bench.stream import RequestShape, stream_request
from spectower.collectors.bench.walk import (
    DEFAULT_MAX_CONCURRENCY,
    HOVER_SPREAD,
    WalkConfig,
    day_base,
    parse_pattern,
    walk,
)
from spectower.collectors.promtext import parse_prometheus_text
from spectower.simulator.profile import load_profile

from benchmarks.simulator_process import SimulatorFactory
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, cli_in_process

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import policy_table  # the reader of a load log's last line

GLM5 = "glm5-nvfp4-8x-rtx-pro-6000"


def _targets(text: str, period_s: float, max_c: int = DEFAULT_MAX_CONCURRENCY, step: float = 0.5,
             seed: int = 1) -> list[int]:  # fmt: skip
    spec = parse_pattern(text, period_s, max_c, seed)
    return [spec.target(i * step) for i in range(int(period_s / step))]


def test_day_visits_both_sides_of_the_glm5_crossover_within_one_period() -> None:
    crossover = load_profile(GLM5).crossover()
    assert crossover is not None
    targets = _targets("day", 240.0, 40)
    assert min(targets) <= 2  # the night
    assert max(targets) == 40  # the evening peak
    above = sum(t > crossover * 1.4 for t in targets) / len(targets)
    below = sum(t < crossover / 1.4 for t in targets) / len(targets)
    assert above > 0.25 and below > 0.25, (above, below)


def test_day_base_shape_night_plateau_peak() -> None:
    assert day_base(0.05, 40) < 2.0
    assert day_base(0.45, 40) == pytest.approx(24.0)  # midday plateau: 60% of the maximum
    assert day_base(0.83, 40) == pytest.approx(40.0)  # evening peak
    assert day_base(0.30, 40) > day_base(0.22, 40)  # the morning ramp rises
    assert day_base(0.95, 40) < day_base(0.88, 40)  # the evening declines


def test_day_has_bursts_that_depend_on_the_seed() -> None:
    period = 240.0
    base = [max(1, min(40, round(day_base(i * 0.5 / period, 40)))) for i in range(int(period / 0.5))]
    with_bursts = _targets("day", period, 40)
    assert any(b > a for a, b in zip(base, with_bursts, strict=True))
    assert all(b >= a for a, b in zip(base, with_bursts, strict=True))
    assert _targets("day", period, 40, seed=1) == _targets("day", period, 40, seed=1)
    assert _targets("day", period, 40, seed=1) != _targets("day", period, 40, seed=2)


def test_hover_stays_within_two_of_its_centre_and_moves() -> None:
    targets = _targets("hover:20", 300.0)
    assert set(targets) <= set(range(20 - HOVER_SPREAD, 20 + HOVER_SPREAD + 1))
    assert len(set(targets)) >= 3
    assert min(_targets("hover:1", 300.0)) == 1  # never below one client


def test_bursty_sits_low_and_jumps_to_the_maximum() -> None:
    targets = _targets("bursty", 120.0, 40)
    low = sum(t == 8 for t in targets) / len(targets)
    assert low > 0.4 and max(targets) == 40 and min(targets) == 8
    jumps = sum(1 for a, b in itertools.pairwise(targets) if b - a >= 30)
    assert jumps >= 3


def test_jump_moves_every_second_across_the_whole_range_and_holds_within_it() -> None:
    targets = _targets("jump", 600.0, 64, step=0.25)
    seconds = [targets[i : i + 4] for i in range(0, len(targets), 4)]
    assert all(len(set(second)) == 1 for second in seconds)  # one level per second
    levels = [second[0] for second in seconds]
    assert min(levels) <= 4 and max(levels) >= 60 and set(levels) <= set(range(1, 65))
    assert sum(a != b for a, b in itertools.pairwise(levels)) > 0.9 * len(levels) - 1
    assert _targets("jump", 60.0, 64, seed=1) == _targets("jump", 60.0, 64, seed=1)
    assert _targets("jump", 60.0, 64, seed=1) != _targets("jump", 60.0, 64, seed=2)


def test_steps_and_ramp() -> None:
    steps = _targets("steps:1,8,32", 30.0, step=1.0)
    assert steps[:10] == [1] * 10 and steps[10:20] == [8] * 10 and steps[20:] == [32] * 10
    ramp = _targets("ramp", 100.0, 33, step=1.0)
    assert ramp[0] == 1 and max(ramp) == 33 and ramp[50] == 33 and ramp[-1] <= 2


@pytest.mark.parametrize(
    ("text", "period", "max_c", "names"),
    [
        ("weekly", 300.0, 48, "--pattern"),
        ("jump:3", 300.0, 48, "--pattern"),
        ("hover:x", 300.0, 48, "hover:N"),
        ("hover:0", 300.0, 48, "hover:N"),
        ("steps:", 300.0, 48, "steps"),
        ("steps:1,-2", 300.0, 48, "steps"),
        ("day", 0.0, 48, "--period"),
        ("day", 300.0, 0, "--max-concurrency"),
    ],
)
def test_bad_pattern_input_names_the_flag(text: str, period: float, max_c: int, names: str) -> None:
    with pytest.raises(BenchError, match=names):
        parse_pattern(text, period, max_c)


def _load_nowhere(*args: str) -> subprocess.CompletedProcess[str]:
    """``bench load`` against a port nothing listens on, in this process (a new interpreter each cost 0.7
    CPU-s): it gives the process its signal handlers back as it found them (``cli_in_process`` checks)."""
    return cli_in_process("bench", "load", "--server", "http://127.0.0.1:9", *args)


def test_bad_cli_input_is_one_error_line_no_traceback() -> None:
    proc = _load_nowhere("--pattern", "hover:abc")
    assert proc.returncode == 2
    assert "error:" in proc.stderr and "hover:N" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_load_command_gives_back_signal_handlers_it_did_not_set() -> None:
    """A test worker whose SIGINT handler is not Python's default (another test's, pytest's) kept it only by
    luck: asyncio's loop closing set the default back, and ``cli_in_process`` failed the test (a full-suite
    run of 2026-12-05)."""
    import signal

    def custom(*_: object) -> None:
        return None

    before = {sig: signal.signal(sig, custom) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc = _load_nowhere("--duration", "5s")
        assert proc.returncode == 2 and "unreachable" in proc.stderr
        assert signal.getsignal(signal.SIGINT) is custom and signal.getsignal(signal.SIGTERM) is custom
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_unreachable_server_is_a_clear_error() -> None:
    proc = _load_nowhere("--duration", "5s")
    assert proc.returncode == 2
    assert "unreachable" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.integration
def test_walk_follows_the_target_against_the_simulator(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile=GLM5, api_key="walk-key")
    statuses: list[str] = []
    config = WalkConfig(
        server=sim.base_url, pattern=parse_pattern("steps:2,12", 8.0), duration_s=8.0, output_len=32,
        status_every_s=1.0,
    )  # fmt: skip
    stats = asyncio.run(walk(config, api_key="walk-key", on_status=statuses.append))
    assert stats.errors == 0, stats.last_error
    assert stats.done > 10 and stats.tokens() > 0
    assert not stats.in_flight  # nothing left streaming after the stop
    targets = {int(line.split("target C=")[1].split()[0]) for line in statuses}
    assert {2, 12} <= targets
    # at some status line while the target was 12, more than 2 requests were streaming at once
    in_flight = [int(line.split("in flight")[1].split()[0]) for line in statuses if "target C=12" in line]
    assert max(in_flight) > 2


@pytest.mark.integration
def test_walk_sends_mixed_output_lengths_by_request_index(simulator_factory: SimulatorFactory) -> None:
    # issue #32: one length for every request finishes in waves; --output-len 8-200 spreads them, each
    # request's length a function of its index (collectors/bench/lengths.py), here across the simulator's
    # generation-length bucket at 100 tokens
    sim = simulator_factory(profile=GLM5)
    lengths = OutputLengths(8, 200)
    config = WalkConfig(server=sim.base_url, pattern=parse_pattern("hover:4", 4.0), duration_s=4.0,
                        output_len=lengths)  # fmt: skip
    stats = asyncio.run(walk(config))
    assert stats.errors == 0, stats.last_error
    name = "sglang:generation_tokens_histogram_bucket"
    body = httpx.get(f"{sim.base_url}/metrics", timeout=10).text
    samples = parse_prometheus_text(body, families=frozenset({name.removesuffix("_bucket")}))
    buckets = {s.labels["le"]: s.value for s in samples if s.name == name}
    finished = buckets["+Inf"]
    assert finished >= 4
    # some finished at 100 tokens or fewer, some above: the lengths differ
    assert 0 < buckets["100.0"] < finished


def test_bad_mixed_output_lengths_are_refused_naming_the_flag() -> None:
    with pytest.raises(BenchError, match="--output-len"):
        WalkConfig(server="http://127.0.0.1:9", pattern=parse_pattern("ramp"),
                   output_len=OutputLengths(50, 10)).validate()  # fmt: skip


@pytest.mark.integration
def test_walk_without_the_api_key_reports_errors_not_a_crash(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile=GLM5, api_key="walk-key")
    config = WalkConfig(server=sim.base_url, pattern=parse_pattern("hover:3", 10.0), duration_s=2.0)
    with pytest.raises(ConnectionError, match="401"):
        asyncio.run(walk(config))  # /server_info refuses: one clear error before any load


@pytest.mark.integration
def test_cli_run_prints_status_and_stops_on_sigint(
    simulator_factory: SimulatorFactory, tmp_path: Path
) -> None:
    import signal
    import time

    sim = simulator_factory(profile=GLM5)
    proc = subprocess.Popen(
        [*SPECTOWER_CLI, "bench", "load", "--server", sim.base_url, "--pattern",
         "hover:4", "--status-every", "1s", "--output-len", "16"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        lines: list[str] = []
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "target C=" in line and "tok/s" in line:
                break
        assert any("target C=" in line for line in lines), "".join(lines)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, rest
    assert "stopped (signal)" in rest and "Traceback" not in rest
    # the last line says how long the load ran, as benchmarks/gpu/counted_runs.py reads it (policy_table)
    log = tmp_path / "load-on.log"
    log.write_text(rest)
    total = policy_table.read_total(log)
    assert total is not None and 0 < total[0] < 120 and total[1] > 0


@pytest.mark.integration
def test_a_worker_whose_cancellation_was_swallowed_sends_nothing_after_the_stop(
    simulator_factory: SimulatorFactory,
) -> None:
    # 2026-12-06 on the H200: at a run's end one worker's cancellation was swallowed under its request (the
    # HTTP stack's teardown), and the worker went on sending a request at a time for five minutes, the load's
    # process never ending. Here the first cancellation is swallowed, as there; nothing may be sent after it.
    sim = simulator_factory(profile=GLM5)
    swallowed: list[int] = []
    sent_after: list[int] = []

    async def send(
        client: httpx.AsyncClient, prompt: Prompt, shape: RequestShape, **kwargs: Any
    ) -> RequestRecord:
        if swallowed:
            sent_after.append(prompt.index)
            raise asyncio.CancelledError  # ends this worker either way, so the test cannot hang
        try:
            return await stream_request(client, prompt, shape, **kwargs)
        except asyncio.CancelledError:
            swallowed.append(prompt.index)
            record: RequestRecord = kwargs["record"]
            record.error = "cancelled (swallowed)"
            return record

    # long answers, so every request is still streaming at the stop
    config = WalkConfig(server=sim.base_url, pattern=parse_pattern("hover:4", 4.0), duration_s=1.0,
                        output_len=4000)  # fmt: skip
    stats = asyncio.run(walk(config, send=send))
    assert swallowed, "no request was streaming at the stop"
    assert sent_after == []
    assert not stats.in_flight
