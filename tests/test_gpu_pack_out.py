"""benchmarks/gpu/pack_out.sh: the device tool hands back at most 8 files a call, so past ``OUT_MAX_FILES`` a
call's files go back as one archive beside measure.log, and within it they stay as they are."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from tests.conftest import REPO_ROOT


def _pack(out: Path, **env: str) -> str:
    done = subprocess.run(["bash", "benchmarks/gpu/pack_out.sh"], cwd=REPO_ROOT, env={"OUT": str(out), **env,
                          "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout


def _fill(out: Path, names: list[str]) -> None:
    for name in names:
        (out / name).write_text(f"{name}\n")


def test_more_than_eight_files_go_back_as_one_archive_beside_the_log(tmp_path: Path) -> None:
    names = ["measure.log", *(f"load-{i}.log" for i in range(8)), "policy.db"]
    _fill(tmp_path, names)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.json").write_text("{}")
    assert "packed into out.tgz" in _pack(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measure.log", "out.tgz"]
    with tarfile.open(tmp_path / "out.tgz") as archive:
        members = {Path(m.name).as_posix().removeprefix("./") for m in archive.getmembers() if m.isfile()}
        assert members == {*names[1:], "sub/inner.json"}
        extracted = archive.extractfile("./policy.db")
        assert extracted is not None and extracted.read() == b"policy.db\n"


def test_eight_files_or_a_higher_limit_stay_as_they_are(tmp_path: Path) -> None:
    _fill(tmp_path, [f"f{i}" for i in range(8)])
    assert _pack(tmp_path) == ""
    assert len(list(tmp_path.iterdir())) == 8
    _fill(tmp_path, ["f8", "f9"])
    assert _pack(tmp_path, OUT_MAX_FILES="99") == ""
    assert len(list(tmp_path.iterdir())) == 10


def test_a_second_pack_keeps_the_first_archive_inside_the_new_one(tmp_path: Path) -> None:
    _fill(tmp_path, ["measure.log", *(f"a{i}" for i in range(9))])
    _pack(tmp_path)
    _fill(tmp_path, [f"b{i}" for i in range(8)])
    _pack(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measure.log", "out.tgz"]
    with tarfile.open(tmp_path / "out.tgz") as archive:
        inner = archive.extractfile("./out.tgz")
        assert inner is not None
        with tarfile.open(fileobj=inner) as first:
            names = {Path(m.name).name for m in first.getmembers() if m.isfile()}
            assert names == {f"a{i}" for i in range(9)}
