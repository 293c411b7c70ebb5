"""Benchmark runs: saving runs with their points atomically."""

from __future__ import annotations

from sqlmodel import Session

from . import models
from .redact import redact_json_text


def save_bench_runs(s: Session, runs: list[tuple[models.BenchRun, list[models.BenchPoint]]]) -> list[int]:
    """Add several runs with their points (their run_id is set here) to the transaction of ``s`` (a
    ``Database.session(write=True)``: a file holding several runs is one transaction); their ids.
    On any error the caller's transaction rolls back and nothing is written."""
    ids: list[int] = []
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
