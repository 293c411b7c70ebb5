"""console/views/speculation.py's data: the benchmark side read once per refresh and cached per choice of
runs gives exactly what the page built before (tests/console_reference.py), for runs with and without a
plain server; a new run is a new choice, never a stale curve."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from spectower.collectors.bench.persist import to_models
from spectower.console.views import speculation
from spectower.storage import open_database

from benchmarks import synthetic
from tests import console_reference as reference
from tests.test_bench_plain_results import _result

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"


def _same(got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]) -> None:
    assert list(got) == list(want)
    for key, frame in want.items():
        pd.testing.assert_frame_equal(got[key], frame)


def test_bench_curves_equal_the_reference(tmp_path: Path) -> None:
    now = time.time()
    with open_database(f"sqlite:///{tmp_path / 's.db'}") as db:
        synthetic.add_bench_run(db, PROFILE, now - 86400, "cuda12", scale_on=0.8)
        db.save_bench_run(*to_models(_result()))  # a sweep with a plain server: three curves
        synthetic.add_bench_run(db, PROFILE, now - 3600, "cuda13")
        ids = [int(i) for i in speculation.data.bench_runs(db)["id"]]
        for run_ids in [(), (ids[0],), tuple(ids), tuple(reversed(ids)), (ids[1], ids[2])]:
            for _ in range(2):  # computed, then from the cache
                got = speculation._bench(db, run_ids)
                curves, crossovers = reference._bench_curves(db, run_ids)
                _same(got.curves, curves)
                assert got.crossovers == crossovers
                pd.testing.assert_frame_equal(got.three_curves, reference._three_curves(db, run_ids))
        assert any(k.endswith("on / plain") for k in speculation._bench(db, tuple(ids)).curves)
        # a run saved later is another choice of runs: its curve shows at once
        synthetic.add_bench_run(db, PROFILE, now - 60, "cuda14")
        newest = int(speculation.data.bench_runs(db)["id"].max())
        assert any(label.startswith(f"#{newest} ") for label in speculation._bench(db, (newest,)).curves)
