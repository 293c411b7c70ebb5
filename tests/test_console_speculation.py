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


def _live(lo: float, hi: float) -> pd.DataFrame:
    """The live estimate's bins 16 and 32 at x1.14 and x1.10, both with the interval ``lo``-``hi``."""
    return pd.DataFrame({"batch_size": [16, 32], "speedup": [1.14, 1.10], "lo": [lo, lo], "hi": [hi, hi]})


def test_the_verdict_says_is_only_where_the_interval_is_on_one_side_of_break_even() -> None:
    latest = {"num_running_reqs": 24.0, "dp_ranks": 1, "spec_max_bs": 64}
    point, (value, words) = speculation._operating_point(latest, _live(1.05, 1.25), {}, 64)
    assert point is not None and value == "×1.12"
    assert words == "at 24 running requests speculation is paying off (live estimate, 95 % 1.05-1.25)"
    _, (_, words) = speculation._operating_point(latest, _live(0.79, 1.64), {}, 64)
    assert words == ("at 24 running requests speculation may be paying off: break-even lies inside its 95 % "
                     "interval (live estimate, 95 % 0.79-1.64)")
