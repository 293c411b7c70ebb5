"""benchmarks/gpu/replay_lag.py: each replay run's delivered output against a reference run's over time, on
the H100 replay of 2026-12-05 (data/gpu-runs/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "gpu"))
import replay_lag

RUN = REPO_ROOT / "data/gpu-runs/h100-8b-pair-triton-replay-2026-12-05c/1-policies"


def test_learn_at_16_lagged_always_off_by_about_one_percent_and_held_more_requests() -> None:
    off = replay_lag.read_records(RUN / "replay-off.json")
    learn = replay_lag.lag("learn-2", replay_lag.read_records(RUN / "replay-learn-2.json"), off, 20.0, 30.0)
    assert learn.marks_s[:3] == [20.0, 40.0, 60.0]
    assert learn.lowest_ratio is not None and 0.985 < learn.lowest_ratio < 1.0
    assert all(r is not None and r < 1.0 for r in learn.delivered_ratio)  # behind at every mark
    assert (learn.in_flight_more_median, learn.in_flight_more_max) == (5, 19)
    itself = replay_lag.lag("off", off, off, 20.0, 30.0)
    assert set(itself.delivered_ratio) == {1.0} and itself.in_flight_more_max == 0


def test_delivered_spreads_a_requests_tokens_over_its_decode_time() -> None:
    spans = [(0.0, 1.0, 11.0, 101)]  # sent at 0, first token at 1 s, the last at 11 s
    assert replay_lag.delivered(spans, 0.5) == 0
    assert replay_lag.delivered(spans, 1.0) == 1
    assert replay_lag.delivered(spans, 6.0) == pytest.approx(51)
    assert replay_lag.delivered(spans, 11.0) == 101
    assert replay_lag.in_flight(spans, 0.0) == 1 and replay_lag.in_flight(spans, 11.0) == 0


def test_runs_of_other_arrivals_or_without_records_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((RUN / "replay-off.json").read_text())
    doc["records"] = {k: v[:-1] if isinstance(v, list) else v for k, v in doc["records"].items()}
    shorter = tmp_path / "replay-short.json"
    shorter.write_text(json.dumps(doc))
    assert replay_lag.main([str(RUN / "replay-off.json"), str(shorter)]) == 2
    assert "same arrivals" in capsys.readouterr().err
    bare = tmp_path / "replay-bare.json"
    bare.write_text(json.dumps({"goodput_rps": 1.0}))
    assert replay_lag.main([str(bare)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "replay-bare.json" in err and "records" in err
    assert replay_lag.main([str(RUN / "replay-learn.json"), "--reference", "off"]) == 2
    assert "--reference" in capsys.readouterr().err


def test_the_table_and_its_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lag.json"
    files = [str(RUN / f"replay-{name}.json") for name in ("off", "threshold-47", "learn", "learn-2")]
    assert replay_lag.main([*files, "--json", str(out)]) == 0
    assert "over off's" in capsys.readouterr().out
    rows = {row["run"]: row for row in json.loads(out.read_text())}
    assert rows["threshold-47"]["lowest_ratio"] < rows["learn-2"]["lowest_ratio"] < 1.0
