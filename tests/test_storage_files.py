"""storage.files: the one atomic write (exports, sweep profiles, SGLang configs, the console's sweep
records): a failure halfway leaves the old file whole and no temporary file behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectower.storage.files import atomic_path, atomic_write_text


def test_write_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "cfg.json"
    target.write_text("old\n")
    assert atomic_write_text(target, "new\n") == target
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["cfg.json"]


def test_a_failure_halfway_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "profile.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_a_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "x.json", "{}")
