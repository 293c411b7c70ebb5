"""benchmarks/drain_whatif.py and ``simulate_open_loop(keep_extend_within=...)``: the what-if that keeps the
draft extend for batches gated near the ceiling, against the plugin's drain, under Azure's replayed
arrivals."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import drain_whatif


def test_keeping_the_extend_near_the_ceiling_leaves_less_to_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where drafting pays below the ceiling (the fitted pair without its context cost), a burst above
    threshold:32 leaves holed requests that drain gated; keeping the extend within 2x the ceiling drafts more
    of the time and serves the median request sooner."""
    monkeypatch.chdir(REPO_ROOT)
    drain, keep = drain_whatif.run("data/profiles/h200-8b-pair-triton.json", ["threshold:32"], 2.0, 0.75, 3.0,
                                   90.0, no_context_cost=True)  # fmt: skip
    assert drain["rule"] == "drain" and keep["rule"] == "keep within 2x"
    assert float(keep["drafting_time"]) > float(drain["drafting_time"]) + 0.1
    assert float(keep["e2e_p50_s"]) < float(drain["e2e_p50_s"])


def test_a_band_not_above_the_ceiling_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert drain_whatif.main(["--within", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["--within: must be above 1 (a band above the ceiling), got 1"]
