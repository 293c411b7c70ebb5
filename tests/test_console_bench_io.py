"""console/bench_io.py: an uploaded bench_serving file imports as one run; a bad one is refused in a line that
names the upload, not the temporary file it was written to on the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.console import bench_io
from spectower.storage import open_database, queries


def test_a_bad_upload_is_refused_by_its_own_name_and_nothing_is_stored(tmp_path: Path) -> None:
    with open_database(tmp_path / "bench.db") as db:
        with pytest.raises(ValueError) as refused:
            bench_io.import_upload(db, "/home/op/runs/day1.jsonl", b'{"request_rate": 4, "max_conc\n')
        line = str(refused.value)
        assert line.startswith("day1.jsonl") and "\n" not in line
        assert "spectower-import-" not in line and "/home/op" not in line
        assert queries.bench_runs(db) == []


def test_an_upload_that_parses_is_stored_under_its_own_name(tmp_path: Path) -> None:
    real = Path(__file__).parent / "fixtures/real/bench_serving"
    sample = real / "TonyLi15__sglang-benchmark__agg_n100_in512_out128_c8.jsonl"
    with open_database(tmp_path / "bench.db") as db:
        got = bench_io.import_upload(db, "../day1.jsonl", sample.read_bytes())
        assert got.name == "day1.jsonl" and got.run_id is not None and got.points >= 1
        (run,) = queries.bench_runs(db)
        assert run.id == got.run_id and "spectower-import-" not in json.dumps(run.model_dump(), default=str)
