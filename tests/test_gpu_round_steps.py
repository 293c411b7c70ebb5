"""benchmarks/gpu/round_steps.py: each round of a knob_max_ab.py run read from the servers' own decode lines
(benchmarks/gpu/server_log.decode_lines). The lines are the H200's of 2026-12-07 (a policy's 0 against plain
at 32, SGLang 0.5.17): the speculative server's carry an accepted length, the plain server's none."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks.gpu import round_steps, server_log
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "round_steps.py"
SPEC = [
    "[2026-12-07 13:07:23] Prefill batch, #new-seq: 30, #new-token: 1920, #cached-token: 0, "
    "token usage: 0.01, #running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: True, "
    "input throughput (token/s): 63255.16",
    *(f"[2026-12-07 13:07:{second}] Decode batch, #running-req: {running}, #token: {tokens}, "
      f"token usage: 0.02, accept len: {accept}, accept rate: 0.00, cuda graph: True, "
      f"gen throughput (token/s): {tok_s}, #queue-req: 0"
      for second, running, tokens, accept, tok_s in (
          ("23", 32, 2368, "1.00", "289.40"), ("23", 32, 3648, "1.00", "6089.70"),
          ("24", 30, 5390, "1.00", "5084.97"), ("24", 29, 6576, "1.00", "4551.70"),
          ("25", 32, 7382, "1.00", "3261.34"), ("25", 31, 7506, "2.75", "3457.97"),
      )),
]  # fmt: skip
PLAIN = [
    f"[2026-12-07 13:07:{second}] Decode batch, #running-req: {running}, #token: 6385, token usage: 0.02, "
    f"cuda graph: True, gen throughput (token/s): {tok_s}, #queue-req: 0"
    for second, running, tok_s in (("34", 31, "5278.49"), ("34", 28, "5394.02"), ("35", 30, "4786.29"))
]


def utc(clock: str) -> float:
    return datetime.fromisoformat(f"2026-12-07T{clock}").replace(tzinfo=UTC).timestamp()


def test_a_decode_line_reads_with_its_batch_and_accept_and_a_plain_one_without_accept() -> None:
    spec = server_log.parse_decode_line(SPEC[-1])
    assert spec == server_log.DecodeLine(utc("13:07:25"), 31, 7506, 2.75, 3457.97)
    plain = server_log.parse_decode_line(PLAIN[0])
    assert plain == server_log.DecodeLine(utc("13:07:34"), 31, 6385, None, 5278.49)
    assert server_log.parse_decode_line(SPEC[0]) is None  # a prefill line is no decode line
    assert len(server_log.decode_lines([*SPEC, *PLAIN])) == 9


@pytest.fixture
def saved_run(tmp_path: Path) -> tuple[Path, Path, Path]:
    spec_log, plain_log = tmp_path / "spec-server.log.gz", tmp_path / "plain-server.log"
    spec_log.write_bytes(gzip.compress("\n".join(SPEC).encode()))
    plain_log.write_text("\n".join(PLAIN))
    times = {"gated": [[utc("13:07:23.4"), utc("13:07:25.9")]],
             "ungated": [[utc("13:07:33.8"), utc("13:07:35.8")]]}  # fmt: skip
    run = {"rounds": 1, "levels": [{"concurrency": 32, "round_times": times}]}
    result = tmp_path / "rounds.json"
    result.write_text(json.dumps(run))
    return result, spec_log, plain_log


def test_each_round_reads_its_servers_steps_batch_throughput_and_drafting(saved_run: tuple[Path, ...]
                                                                          ) -> None:  # fmt: skip
    result, spec_log, plain_log = saved_run
    logs = ["--log", f"gated={spec_log}", "--log", f"ungated={plain_log}"]
    argv = [sys.executable, str(SCRIPT), str(result), *logs]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # 6 lines of 40 steps over 2.5 s; the lines at the level (29+ of 32) after the first (whose span began
    # before the round: 289 tok/s), median 4551.70; one drafted. The plain server's: 30 of 31, 28, 30.
    assert done.stdout.splitlines() == [
        "C=32 round 1 gated [13:07:23-13:07:25 UTC]: 6 decode lines, 96 steps/s, running 32, "
        "4552 tok/s at the level (SGLang's), accept up to 2.75",
        "C=32 round 1 ungated [13:07:33-13:07:35 UTC]: 3 decode lines, 60 steps/s, running 30, "
        "4786 tok/s at the level (SGLang's), accept up to -",
    ]


def test_a_run_without_round_times_or_a_bad_log_argument_is_one_line(saved_run: tuple[Path, ...]) -> None:
    result, spec_log, _ = saved_run
    run = json.loads(result.read_text())
    del run["levels"][0]["round_times"]
    result.write_text(json.dumps(run))
    with pytest.raises(SystemExit) as raised:
        round_steps.main([str(result), "--log", f"gated={spec_log}"])
    assert str(raised.value) == (f"error: {result}: not a knob_max_ab.py result with round times (level 32 "
                                 "keeps no round_times (a run saved before 2026-12-07))")  # fmt: skip
    with pytest.raises(SystemExit) as raised:
        round_steps.main([str(result), "--log", f"gated={result.parent / 'none.log'}"])
    assert str(raised.value).startswith("error: ") and "none.log: cannot read" in str(raised.value)
