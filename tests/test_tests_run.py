"""tests/run, the README's test command: what it hands pytest (a stand-in python3 and nproc print it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def _run(tmp_path: Path, cores: int, *args: str, **env: str) -> list[str]:
    """tests/run ARGS on a machine of ``cores`` cores: the python3 command line it ends in, and the
    PYTHONDONTWRITEBYTECODE that command sees (``-`` for unset)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nproc").write_text(f"#!/bin/sh\necho {cores}\n")
    (bin_dir / "python3").write_text('#!/bin/sh\necho "${PYTHONDONTWRITEBYTECODE--}" "$@"\n')
    for name in ("nproc", "python3"):
        (bin_dir / name).chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env}
    environ.pop("SPECTOWER_TEST_WORKERS", None)
    environ.update(env)
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "tests/run"), *args], env=environ, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(("cores", "workers"), [(1, "2"), (2, "3"), (7, "8"), (16, "8")])
def test_the_unit_lane_runs_a_worker_per_core_and_one_more_at_most_8(
    tmp_path: Path, cores: int, workers: str
) -> None:
    argv = _run(tmp_path, cores, "--fast", "-x")
    assert argv[1:6] == ["-m", "pytest", "-n", workers, "--dist"] and argv[-1] == "-x"
    assert "not integration and not slow and not sglang" in " ".join(argv)


def test_workers_can_be_set_and_bytecode_is_cached_whatever_the_environment_says(
    tmp_path: Path,
) -> None:
    """PYTHONDONTWRITEBYTECODE made every worker and each process a test starts compile the modules again
    (a worker's collection: 13 CPU-s against 5)."""
    argv = _run(tmp_path, 2, "--fast", PYTHONDONTWRITEBYTECODE="1", SPECTOWER_TEST_WORKERS="3")
    assert argv[0] == "-" and argv[3:5] == ["-n", "3"]
