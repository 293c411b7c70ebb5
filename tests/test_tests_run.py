"""tests/run, the README's test command: what it hands pytest (a stand-in python3 and nproc print it), and
what tests/conftest.py sets up in each test process to spend less CPU."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import settings

from tests.conftest import REPO_ROOT, UNIT_LANE_PROFILE, examples


def _run(tmp_path: Path, cores: int, *args: str, **env: str) -> list[str]:
    """tests/run ARGS on a machine of ``cores`` cores: the python3 command line it ends in, and the
    PYTHONDONTWRITEBYTECODE that command sees (``-`` for unset)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nproc").write_text(f"#!/bin/sh\necho {cores}\n")
    (bin_dir / "python3").write_text('#!/bin/sh\necho "${PYTHONDONTWRITEBYTECODE--}" "$@"\n')
    # the whole suite's setup finds everything there, so it installs nothing, even on a fresh machine where
    # this test runs before any setup did (apt-get stands in for PostgreSQL's initdb, which it looks for
    # by path); and the SGLang venv is one whose build is marked complete
    stubs = ("prometheus", "chromium", "docker-compose", "apt-get")
    for name in stubs:
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    venv = tmp_path / "sglang-venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 0\n")
    marker = re.search(r'MARKER="\$VENV/([^"]+)"', (REPO_ROOT / "tests/sglang_env.sh").read_text())
    assert marker is not None, "tests/sglang_env.sh names its marker file MARKER=\"$VENV/...\""
    (venv / marker.group(1)).write_text("")
    for path in [*(bin_dir / name for name in ("nproc", "python3", *stubs)), venv / "bin" / "python"]:
        path.chmod(0o755)
    environ = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               "SPECTOWER_SGLANG_VENV": str(venv), **env}  # fmt: skip
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
    assert f"--hypothesis-profile={UNIT_LANE_PROFILE}" in argv


def test_the_whole_suite_draws_every_example(tmp_path: Path) -> None:
    argv = _run(tmp_path, 2, "-x")
    assert argv[-1] == "-x" and not [arg for arg in argv if arg.startswith("--hypothesis-profile")]


def test_the_unit_lane_profile_draws_a_quarter_of_each_property_tests_examples_never_below_10() -> None:
    loaded = settings.get_current_profile_name()
    try:
        settings.load_profile("default")
        assert [examples(n) for n in (300, 120, 30)] == [300, 120, 30]
        settings.load_profile(UNIT_LANE_PROFILE)
        assert [examples(n) for n in (300, 120, 30)] == [75, 30, 10]
        assert settings().max_examples == 25  # a property test that names no count
    finally:
        settings.load_profile(loaded)


def _tls_context(client: httpx.Client) -> ssl.SSLContext:
    transport = client._transport
    assert isinstance(transport, httpx.HTTPTransport) and transport._pool._ssl_context is not None
    return transport._pool._ssl_context


def test_clients_in_a_test_process_share_one_verifying_tls_context() -> None:
    """Each client built its own (46 ms of CPU loading the CA bundle): 50 of the unit lane's 390 CPU-s."""
    with httpx.Client() as one, httpx.Client(timeout=3) as other:
        shared = _tls_context(one)
        assert _tls_context(other) is shared
        assert shared.verify_mode == ssl.CERT_REQUIRED
        assert shared.check_hostname and shared.cert_store_stats()["x509_ca"] > 0  # certifi's bundle
    own = ssl.create_default_context()
    with httpx.Client(verify=False) as unverified, httpx.Client(verify=own) as given:
        assert _tls_context(unverified).verify_mode == ssl.CERT_NONE
        assert _tls_context(given) is own


def test_workers_can_be_set_and_bytecode_is_cached_whatever_the_environment_says(
    tmp_path: Path,
) -> None:
    """PYTHONDONTWRITEBYTECODE made every worker and each process a test starts compile the modules again
    (a worker's collection: 13 CPU-s against 5)."""
    argv = _run(tmp_path, 2, "--fast", PYTHONDONTWRITEBYTECODE="1", SPECTOWER_TEST_WORKERS="3")
    assert argv[0] == "-" and argv[3:5] == ["-n", "3"]


@pytest.fixture(scope="module")
def _built_once_a_module() -> str:
    return "shared"


def test_the_tests_on_a_module_fixture_are_their_modules_group(
    request: pytest.FixtureRequest, _built_once_a_module: str
) -> None:
    """One worker runs them (--dist loadgroup), so the fixture is built once, not once per worker."""
    group = request.node.get_closest_marker("xdist_group")
    assert group is not None and group.args == ("test_tests_run",)
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@test_tests_run"), request.node.nodeid


def test_a_test_on_its_own_fixtures_goes_to_any_worker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    assert request.node.get_closest_marker("xdist_group") is None
    assert "@" not in request.node.nodeid
