"""benchmarks/gpu/explore_ab.py: exploration's cost on a live server, read from the plugin's counters and,
beside them, from SGLang's own decode-token count. Against a simulator of the measured H200 profile under a
steady load: the two counts agree, each mode's tokens per step fit the batch, and the explored share is what
was set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.simulator_process import scaled_profile
from tests.conftest import REPO_ROOT, SPECTOWER_CLI

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "explore_ab.py"
KEY = "explore-ab-admin"
LEVEL = 8


@pytest.mark.integration
def test_counters_and_sglang_count_agree_and_the_share_is_explored(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    profile = scaled_profile("h200-8b-pair-triton", 1 / 3, tmp_path, noise_cv=0.0)
    sim = simulator_factory(profile=profile, admin_key=KEY)
    load = subprocess.Popen(
        [*SPECTOWER_CLI, "bench", "load", "--server", sim.base_url, "--pattern", f"steps:{LEVEL}",
         "--period", "1000s", "--output-len", "64", "--input-len", "8", "--api", "generate"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    out = tmp_path / "explore.json"
    try:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--server", sim.base_url, "--shares", "0,0.2", "--window", "2",
             "--settle", "1", "--rounds", "1", "--label", "sim", "--out", str(out)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "SPECTOWER_ADMIN_KEY": KEY},
        )  # fmt: skip
    finally:
        load.terminate()
        load.wait(timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SGLang's count" in done.stdout
    (result,) = json.loads(out.read_text())
    shares = result["shares"]
    assert set(shares) == {"0.0", "0.2"}
    for share, figures in shares.items():
        (row,) = figures["windows"]
        # the simulator counts each decode token once in both places: the counters must not miscount
        assert row["sglang_tok_s"] == pytest.approx(row["tok_s"], rel=0.15), (share, row)
        assert 0 < row["drafted_tokens_per_step"] <= LEVEL * 4  # 3 draft steps: at most 4 tokens a request
    assert shares["0.0"]["explored_step_share"] == 0
    explored = shares["0.2"]["windows"][0]
    assert explored["explored"] > 0.05 and explored["gated_steps"] > 0, explored
    assert 0 < explored["gated_tokens_per_step"] <= LEVEL  # a gated step: one token a request


@pytest.mark.integration
def test_a_server_with_no_load_is_one_line_not_a_window_of_zeros(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """Started before its load (CI's busy box once started the load generator after the first window), the
    script measured 0 tok/s by both counts and saved it as a result; it now waits for decode steps."""
    sim = simulator_factory(profile=scaled_profile("h200-8b-pair-triton", 1 / 3, tmp_path), admin_key=KEY)
    out = tmp_path / "explore.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--server", sim.base_url, "--shares", "0,0.2", "--window", "1",
         "--settle", "0", "--rounds", "1", "--wait-load", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "SPECTOWER_ADMIN_KEY": KEY},
    )  # fmt: skip
    assert done.returncode != 0 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        f"--wait-load: {sim.base_url} ran no decode step within 1 s: is the load running?"
    ]


@pytest.mark.parametrize(
    ("shares", "said"),
    [("0,x", "expected numbers separated by commas, got '0,x'"), ("0,0.9", "each share must be in 0..0.2"),
     (",", "expected at least one, got ','")],
)  # fmt: skip
def test_a_bad_share_list_is_one_line_naming_the_flag(shares: str, said: str, tmp_path: Path) -> None:
    """`--shares 0,x` and `--shares 0,0.9` ended in tracebacks (float() and the contract's check, after
    argparse); they are now argparse's one line, before any server is asked."""
    out = tmp_path / "explore.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--server", "http://127.0.0.1:9", "--shares", shares,
         "--out", str(out)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and not out.exists() and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"explore_ab.py: error: argument --shares: {said}")
