"""Benchmark runs: saving a run with its points atomically."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spectower.storage import models
from spectower.storage.redact import redact_json_text

if TYPE_CHECKING:
    from spectower.storage.database import Database


def save_bench_run(db: Database, run: models.BenchRun, points: list[models.BenchPoint]) -> int:
    """Insert ``run`` and ``points`` (their run_id is set here) in one transaction; returns the run id.
    On any error nothing is written."""
    return save_bench_runs(db, [(run, points)])[0]


def save_bench_runs(db: Database, runs: list[tuple[models.BenchRun, list[models.BenchPoint]]]) -> list[int]:
    """Several runs with their points in one transaction (a file holding several runs); their ids.
    On any error nothing is written."""
    ids: list[int] = []
    with db.session(write=True) as s:
        for run, points in runs:
            if run.created_at is None:
                raise ValueError("bench run: created_at is required")
            if not run.source:
                raise ValueError("bench run: source is required")
            run.server_info_json = redact_json_text(run.server_info_json)  # SGLang's /server_info holds keys
            s.add(run)
            s.flush()
            assert run.id is not None
            for p in points:
                p.run_id = run.id
                s.add(p)
            s.flush()
            ids.append(int(run.id))
    return ids
