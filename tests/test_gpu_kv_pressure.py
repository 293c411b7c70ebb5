"""benchmarks/gpu/kv_pressure.py: how full each replay run kept the KV pool, from SGLang's batch lines, on the
H100 replay of 2026-12-05 (data/gpu-runs/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import kv_pressure
from server_log import read_log_lines

RUN = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05c/1-policies"
NAMES = ("off", "threshold-47", "learn", "learn-2")


def rows() -> dict[str, kv_pressure.RunPressure]:
    events = kv_pressure.parse_log(read_log_lines(RUN / "spec-server.log.gz"))
    assert events.max_running == 64
    out = {}
    for name in NAMES:
        start, end = kv_pressure.run_window(RUN / f"replay-{name}.json")
        out[name] = kv_pressure.pressure(name, events, start, end)
    return out


def test_every_run_filled_the_pool_and_the_runs_after_always_off_filled_it_more() -> None:
    found = rows()
    for row in found.values():
        assert row.usage_max is not None and row.usage_max >= 0.99
        assert row.prompts >= 1950 and row.cached_tokens == 0  # the same trace, no prefix reused
    off = found["off"]
    assert off.usage_mean is not None and off.full_share is not None
    for name in NAMES[1:]:
        later = found[name]
        assert later.usage_mean is not None and later.usage_mean > off.usage_mean + 0.05
        assert later.full_share is not None and later.full_share > off.full_share
        assert later.held_back_lines > off.held_back_lines  # queued with fewer than 64 running


def test_the_one_retraction_lies_in_threshold_47s_run() -> None:
    found = rows()
    assert (found["threshold-47"].retractions, found["threshold-47"].retracted_tokens) == (1, 4094)
    assert all(found[name].retractions == 0 for name in ("off", "learn", "learn-2"))


def test_lines_of_a_rank_tagged_log_are_read_and_other_lines_skipped() -> None:
    events = kv_pressure.parse_log([
        "[2026-12-05 05:41:05 TP0] Decode batch, #running-req: 6, #token: 6478, token usage: 0.08, "
        "accept len: 1.00, cuda graph: True, gen throughput (token/s): 313.40, #queue-req: 2",
        "[2026-12-05 05:41:06] Prefill batch, #new-seq: 2, #new-token: 900, #cached-token: 100, "
        "token usage: 0.1,",
        "[2026-12-05 05:41:07] something else entirely",
    ])  # fmt: skip
    assert len(events.decode) == 1 and events.decode[0][1:] == (6, 6478, 0.08, 2)
    assert events.prefill[0][1:] == (2, 900, 100) and events.retract == () and events.max_running is None
    row = kv_pressure.pressure("x", events, events.decode[0][0] - 1, events.prefill[0][0])
    assert row.held_back_lines == 1  # queued, and no limit known to say it was the request limit


def test_a_replay_without_its_window_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "replay-old.json"
    bad.write_text(json.dumps({"goodput_rps": 1.0}))
    assert kv_pressure.main([str(bad), "--server-log", str(RUN / "spec-server.log.gz")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "replay-old.json" in err and "started_at" in err


def test_the_table_in_the_order_the_runs_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "kv.json"
    files = [str(RUN / f"replay-{name}.json") for name in sorted(NAMES)]
    log = str(RUN / "spec-server.log.gz")
    assert kv_pressure.main([*files, "--server-log", log, "--json", str(out)]) == 0
    assert "running < 64" in capsys.readouterr().out
    assert [row["run"] for row in json.loads(out.read_text())] == list(NAMES)


def test_a_run_the_server_log_does_not_reach_says_so_instead_of_a_row_of_zeros(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2026-12-05f: the last run's call handed back no server log, so the launch's log (from the call before)
    ended before that run began, and the table printed it as 0 lines, 0 prompts: an idle pool, to a reader.
    Such a run now says it is not in the log; a run the log ends during is marked as partial."""
    events = kv_pressure.parse_log(read_log_lines(RUN / "spec-server.log.gz"))
    last = events.last_line_at
    assert last is not None
    windows = {"later": (last + 100.0, 150.0), "during": (last - 50.0, 150.0)}
    files = []
    for name, (start, span) in windows.items():
        path = tmp_path / f"replay-{name}.json"
        path.write_text(json.dumps({"started_at": start, "span_s": span}))
        files.append(str(path))
    out = tmp_path / "kv.json"
    assert kv_pressure.main([*files, str(RUN / "replay-off.json"), "--server-log",
                             str(RUN / "spec-server.log.gz"), "--json", str(out)]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "later            not in the server log" in text
    assert "* the server log ends during this run" in text
    by_run = {row["run"]: row for row in json.loads(out.read_text())}
    assert by_run["later"]["covered"] == "none" and by_run["during"]["covered"] == "part"
    assert by_run["off"]["covered"] == "whole" and by_run["off"]["decode_lines"] > 0
