"""Shared test fixtures: where the real captures live (tests/fixtures/), free ports."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# The installed CLI, run as a module so tests need no `spectower` on PATH.
SPECTOWER_CLI = (sys.executable, "-m", "spectower.console.cli")
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# Files real tools wrote (SGLang servers, its benchmark client, NVML), byte for byte: real/SOURCES.md.
REAL_DATA = FIXTURES / "real"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def real_data() -> Path:
    return REAL_DATA


# ---- the SGLang simulator as a real subprocess (tests/simulator_process.py) ----------------------------
from typing import TYPE_CHECKING, Any  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.simulator_process import SimulatorProcess


@pytest.fixture
def simulator_factory() -> Iterator[Callable[..., SimulatorProcess]]:
    """A callable ``(profile="glm5-nvfp4-8x-rtx-pro-6000", admin_key=None, api_key=None, **flags)`` that
    starts a ``tests.simulator_process.SimulatorProcess`` (healthy on return); all are stopped at teardown."""
    # Imported here: tests.simulator_process imports this module (free_port).
    from tests.simulator_process import DEFAULT_PROFILE, SimulatorProcess

    started: list[SimulatorProcess] = []

    def factory(profile: str = DEFAULT_PROFILE, admin_key: str | None = None, api_key: str | None = None,
                **flags: Any) -> SimulatorProcess:
        sim = SimulatorProcess(profile=profile, admin_key=admin_key, api_key=api_key, **flags)
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.close()
