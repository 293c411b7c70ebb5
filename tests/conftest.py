"""Shared test fixtures: where the real captures live, free ports."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SPECTOWER_SHARED", REPO_ROOT.parent / "shared"))
REAL_DATA = SHARED / "data" / "real"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def real_data() -> Path:
    if not REAL_DATA.is_dir():
        pytest.fail(f"the real captures are missing: {REAL_DATA} (set SPECTOWER_SHARED)")
    return REAL_DATA
