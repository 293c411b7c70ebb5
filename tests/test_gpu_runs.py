"""data/gpu-runs/ as data (benchmarks/gpu/runs.py): the manifest lists every file of every run with its bytes
and sha256, in the tree or in its run's archive; INDEX.md is the table the runs' README.md files make; a run
archived and put back is the run it was; a database it keeps stays in the tree as NAME.db.xz, read back
through storage's recorded_copy."""

from __future__ import annotations

import importlib.util
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from spectower.storage import open_database, queries
from spectower.storage.database import open_recorded, recorded_copy

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "runs.py"
ROOT = REPO_ROOT / "data" / "gpu-runs"
_spec = importlib.util.spec_from_file_location("gpu_runs", SCRIPT)
assert _spec is not None and _spec.loader is not None
runs = importlib.util.module_from_spec(_spec)
sys.modules["gpu_runs"] = runs
_spec.loader.exec_module(runs)


def test_the_manifest_matches_the_files_in_the_tree_and_in_the_archives() -> None:
    assert runs.check(ROOT) == []
    entries = runs.read_manifest(ROOT)
    stored = {e.stored for e in entries}
    assert "tree" in stored and len(stored - {"tree"}) == len(runs.run_folders(ROOT)) > 10
    # what the tests replay is in the tree, e.g. the two-GPU check's database, compressed
    assert any(e.path == "h200-2gpu-tp2/collect.db.xz" and e.stored == "tree" for e in entries)
    assert not [e.path for e in entries if e.stored == "tree" and e.path.endswith(".db")]


def test_the_index_is_the_table_the_readmes_make() -> None:
    assert (ROOT / "INDEX.md").read_text(encoding="utf-8") == runs.index_text(ROOT)
    body = (ROOT / "INDEX.md").read_text(encoding="utf-8")
    assert all(f"[{run.name}]({run.name}/README.md)" in body for run in runs.run_folders(ROOT))


def _copy_run(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "runs"
    run = root / "h200-test-run-2026-12-03"
    (run / "1-call").mkdir(parents=True)
    (run / "README.md").write_text(
        "# A run\n\n## Index\n\n- date: 2026-12-03\n- backend: triton, 1 H200\n- pair: 8B-shaped\n"
        "- measured: a | b\n- figure: 0.99\n- command: `bash benchmarks/gpu/measure_off.sh`\n"
    )
    (run / "1-call" / "measure.log").write_text("measured\n")
    (run / "1-call" / "sweep.json").write_text('{"points": []}\n')
    (run / "kept.json").write_text("{}\n")
    return root, run


def test_a_run_archived_keeps_what_is_named_and_comes_back_whole(tmp_path: Path) -> None:
    root, run = _copy_run(tmp_path)
    before = {p.relative_to(root): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    target = runs.archive(run, ["kept.json"])
    assert target == root / "archive" / f"{run.name}.tar.xz"
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == ["README.md", "kept.json"]
    assert runs.check(root) == []
    assert "| 2026-12-03 | [h200-test-run-2026-12-03]" in runs.index_text(root)
    assert "a \\| b" in runs.index_text(root)  # a cell's | does not split the table
    with tarfile.open(target, "r:xz") as tar:
        tar.extractall(root, filter="data")
    assert {p.relative_to(root): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # the same files archive to the same bytes: members sorted, times and owners zeroed
    first = target.read_bytes()
    target.unlink()
    (root / "MANIFEST.csv").unlink()
    assert runs.archive(run, ["kept.json"]).read_bytes() == first


def test_the_check_names_a_changed_a_missing_and_an_unlisted_file(tmp_path: Path) -> None:
    root, run = _copy_run(tmp_path)
    runs.archive(run, ["kept.json"])
    (run / "kept.json").write_text('{"changed": true}\n')
    (run / "stray.log").write_text("not listed\n")
    shutil.copy(root / "archive" / f"{run.name}.tar.xz", tmp_path / "saved.tar.xz")
    with tarfile.open(root / "archive" / f"{run.name}.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "saved.tar.xz", arcname=f"{run.name}/other.bin")
    problems = runs.check(root)
    name = run.name
    assert f"{name}/kept.json: bytes or sha256 differ from the manifest" in problems
    assert f"{name}/stray.log: in the tree but not listed as stored there" in problems
    assert f"archive/{name}.tar.xz: {name}/other.bin not in the manifest" in problems
    assert f"archive/{name}.tar.xz: {name}/1-call/measure.log listed, not in the archive" in problems


def _kept_database(tmp_path: Path) -> tuple[Path, Path, bytes]:
    """A run archived with its 1-call/policy.db (a spectower database) kept: the root, the run, its bytes."""
    root, run = _copy_run(tmp_path)
    with open_database(run / "1-call" / "policy.db") as db:
        db.server_id("http://gpu-1:30000", ts=1.0)
    recorded = (run / "1-call" / "policy.db").read_bytes()
    runs.archive(run, ["kept.json", "1-call/policy.db"])
    return root, run, recorded


def test_a_kept_database_stays_in_the_tree_as_xz_and_the_check_names_one_left_plain(tmp_path: Path) -> None:
    root, run, recorded = _kept_database(tmp_path)
    kept = run / "1-call" / "policy.db.xz"
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()) == [
        "1-call/policy.db.xz", "README.md", "kept.json"]  # fmt: skip
    assert lzma.decompress(kept.read_bytes()) == recorded and len(kept.read_bytes()) < len(recorded) / 2
    (entry,) = [e for e in runs.read_manifest(root) if e.path.startswith(f"{run.name}/1-call/policy.db")]
    assert (entry.path, entry.bytes) == (f"{run.name}/1-call/policy.db.xz", kept.stat().st_size)
    assert entry.stored == "tree"
    assert runs.check(root) == []
    # a database kept uncompressed (as runs.py kept them before) is one line of the check
    kept.unlink()
    (run / "1-call" / "policy.db").write_bytes(recorded)
    plain = runs.Entry(entry.path.removesuffix(".xz"), len(recorded), runs._digest(recorded), "tree")
    entries = [plain if e == entry else e for e in runs.read_manifest(root)]
    (root / "MANIFEST.csv").write_text(runs.manifest_text(entries))
    assert runs.check(root) == [
        f"{run.name}/1-call/policy.db: a database kept uncompressed: keep it as policy.db.xz (xz -9)",
    ]


def test_one_function_hands_a_reader_a_kept_database_named_either_way(tmp_path: Path) -> None:
    """storage's recorded_copy: NAME.db or NAME.db.xz, whichever is there (the one named first), copied and
    decompressed into the folder given; open_recorded opens it so; the kept file keeps its bytes."""
    _root, run, recorded = _kept_database(tmp_path)
    kept = run / "1-call" / "policy.db.xz"
    packed = kept.read_bytes()
    for name in ("policy.db", "policy.db.xz"):
        copy = recorded_copy(run / "1-call" / name, tmp_path / "read" / name)
        assert copy == tmp_path / "read" / name / "policy.db" and copy.read_bytes() == recorded
    with open_recorded(run / "1-call" / "policy.db") as db:
        assert [s.url for s in queries.servers(db)] == ["http://gpu-1:30000"]
    assert kept.read_bytes() == packed and sorted(p.name for p in kept.parent.iterdir()) == ["policy.db.xz"]
    both = tmp_path / "both"
    both.mkdir()
    (both / "a.db").write_bytes(b"plain")
    (both / "a.db.xz").write_bytes(lzma.compress(b"packed"))
    assert recorded_copy(both / "a.db", tmp_path / "p").read_bytes() == b"plain"
    assert recorded_copy(both / "a.db.xz", tmp_path / "x").read_bytes() == b"packed"
    with pytest.raises(FileNotFoundError, match=r"none\.db: no such database file \(nor none\.db\.xz\)"):
        recorded_copy(run / "none.db", tmp_path)
    # a committed run's database: the two-GPU check's, read as tests/test_gpu_results.py reads it
    committed = ROOT / "h200-2gpu-tp2" / "collect.db.xz"
    before = committed.read_bytes()
    copy = recorded_copy(ROOT / "h200-2gpu-tp2" / "collect.db", tmp_path / "tp2")
    with open_database(copy, existing=True) as db:
        assert len(queries.servers(db)) == 1
    assert committed.read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["archive", "{root}/no-such-run"], "no such run folder"),
        (["archive", "{run}", "--keep", "nope.json"], "--keep nope.json: no such file"),
        (["index", "--root", "{tmp}"], "no '## Index' block"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    root, run = _copy_run(tmp_path)
    bare = tmp_path / "bare"
    (bare / "run-without-index").mkdir(parents=True)
    (bare / "run-without-index" / "README.md").write_text("# no index\n")
    argv = [a.format(root=root, run=run, tmp=bare) for a in args]
    done = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr
    assert not (root / "archive").exists() and not (root / "MANIFEST.csv").exists()
    assert not (bare / "INDEX.md").exists()
