"""The measured GPU runs as data (data/gpu-runs/): each run folder keeps its README.md and the files tests
replay (a database as ``NAME.db.xz``); the rest of the run is one archive, ``archive/<run>.tar.xz``;
``MANIFEST.csv`` lists every file of every run (path, bytes, sha256, where it is stored) and ``INDEX.md`` is
one table of the runs, made from the ``## Index`` block at the end of each run's README.md.

    python3 benchmarks/gpu/runs.py archive data/gpu-runs/RUN [--keep RELATIVE/PATH ...]
    python3 benchmarks/gpu/runs.py index [--check] [--root data/gpu-runs]
    python3 benchmarks/gpu/runs.py check [--root data/gpu-runs]

``archive`` packs every file of RUN but its README.md and the ``--keep`` paths (relative to RUN) into
``archive/RUN.tar.xz`` (members named ``RUN/...``, so ``tar -C data/gpu-runs -xJf archive/RUN.tar.xz``
puts them back where they were), records all of them in the manifest, then removes the packed files. A kept
SQLite database (``NAME.db``) stays in the tree as ``NAME.db.xz`` (xz -9, about a fifth of its bytes: every
device call ships the tree): read it through ``spectower.storage.database.recorded_copy`` (or
``open_recorded``), which decompresses a copy, or ``xz -dc NAME.db.xz > COPY``. The archive is reproducible:
members sorted, times and owners zeroed. ``check`` compares the manifest with the files in the tree and the
archives' members and prints one line per difference (exit 1), an uncompressed database in the tree too.
Bad input: one ``error:`` line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import lzma
import os
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "data" / "gpu-runs"
MANIFEST = "MANIFEST.csv"
INDEX = "INDEX.md"
ARCHIVES = "archive"
README = "README.md"
TREE = "tree"
COLUMNS = ("path", "bytes", "sha256", "stored")
# The ``## Index`` block of a run's README.md: these keys, one ``- key: value`` line each, in this order.
INDEX_KEYS = ("date", "backend", "pair", "measured", "figure", "command")
INDEX_HEADINGS = ("date", "run", "backend", "pair", "what was measured", "the figure", "the command")
DB = ".db"  # a SQLite database, kept in the tree as NAME.db.xz (XZ)
XZ = ".xz"


class RunsError(ValueError):
    """Bad input, as one line."""


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the root: RUN/...
    bytes: int
    sha256: str
    stored: str  # "tree", or the archive's path relative to the root


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != ARCHIVES)


def _run_files(run: Path) -> Iterator[Path]:
    for path in sorted(run.rglob("*")):
        if path.is_file() and path.relative_to(run).as_posix() != README:
            yield path


def read_manifest(root: Path) -> list[Entry]:
    path = root / MANIFEST
    if not path.exists():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise RunsError(f"{path}: the header must be {','.join(COLUMNS)}")
        return [Entry(r["path"], int(r["bytes"]), r["sha256"], r["stored"]) for r in reader]


def _write_atomically(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these are files of the checkout
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def manifest_text(entries: Iterable[Entry]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for e in sorted(entries, key=lambda e: e.path):
        writer.writerow((e.path, e.bytes, e.sha256, e.stored))
    return out.getvalue()


def _kept_xz(path: Path) -> Path:
    """Where a kept file stays in the tree: a database as ``NAME.db.xz``, anything else as it is."""
    return path.with_name(path.name + XZ) if path.suffix == DB else path


def _tar_xz(root: Path, files: list[Path]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", preset=9) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def archive(run: Path, keep: Iterable[str] = ()) -> Path:
    """Pack ``run`` (a folder of the root) but its README.md and ``keep`` into ``archive/<run>.tar.xz``;
    returns the archive's path."""
    run = run.resolve()
    root = run.parent
    if not run.is_dir():
        raise RunsError(f"{run}: no such run folder")
    if not (run / README).is_file():
        raise RunsError(f"{run}: a run needs its {README} (the calls, the commands, an ## Index block)")
    kept = set(keep)
    missing = sorted(k for k in kept if not (run / k).is_file())
    if missing:
        raise RunsError(f"--keep {missing[0]}: no such file in {run.name}/")
    clashes = sorted(k for k in kept if _kept_xz(run / k) != run / k and _kept_xz(run / k).exists())
    if clashes:
        raise RunsError(f"--keep {clashes[0]}: {clashes[0]}{XZ} exists in {run.name}/")
    target = root / ARCHIVES / f"{run.name}.tar.xz"
    if target.exists():
        raise RunsError(f"{target} exists: unpack it (tar -C {root} -xJf {target}) and remove it first")
    files = list(_run_files(run))
    packed = [p for p in files if p.relative_to(run).as_posix() not in kept]
    if not packed:
        raise RunsError(f"{run.name}/: nothing to archive")
    stored = f"{ARCHIVES}/{target.name}"
    entries = [e for e in read_manifest(root) if not e.path.startswith(f"{run.name}/")]
    compressed: dict[Path, bytes] = {}  # a kept database -> its .xz bytes
    for path in files:
        data = path.read_bytes()
        where = stored if path in packed else TREE
        if where == TREE and _kept_xz(path) != path:
            path, data = _kept_xz(path), lzma.compress(data, preset=9)
            compressed[path] = data
        entries.append(Entry(path.relative_to(root).as_posix(), len(data), _digest(data), where))
    blob = _tar_xz(root, packed)
    target.parent.mkdir(exist_ok=True)
    _write_atomically(target, blob)
    for path, data in compressed.items():
        _write_atomically(path, data)
    _write_atomically(root / MANIFEST, manifest_text(entries).encode())
    for path in [*packed, *(p.with_suffix("") for p in compressed)]:
        path.unlink()
    for folder in sorted({p.parent for p in packed}, key=lambda p: len(p.parts), reverse=True):
        while folder != run and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
    return target


def _archive_members(path: Path) -> dict[str, tuple[int, str]]:
    members: dict[str, tuple[int, str]] = {}
    with tarfile.open(path, mode="r:xz") as tar:
        for info in tar:
            handle = tar.extractfile(info) if info.isfile() else None
            if handle is not None:
                data = handle.read()
                members[info.name] = (len(data), _digest(data))
    return members


def check(root: Path) -> list[str]:
    """One line per difference between the manifest and the files (in the tree and in the archives)."""
    problems: list[str] = []
    entries = {e.path: e for e in read_manifest(root)}
    if not entries:
        return [f"{root / MANIFEST}: missing or empty"]
    for run in run_folders(root):
        if not (run / README).is_file():
            problems.append(f"{run.name}/{README}: missing")
        for path in _run_files(run):
            rel = path.relative_to(root).as_posix()
            entry = entries.get(rel)
            data = path.read_bytes()
            if entry is None or entry.stored != TREE:
                problems.append(f"{rel}: in the tree but not listed as stored there")
            elif path.suffix == DB:
                problems.append(f"{rel}: a database kept uncompressed: keep it as {path.name}{XZ} (xz -9)")
            elif (len(data), _digest(data)) != (entry.bytes, entry.sha256):
                problems.append(f"{rel}: bytes or sha256 differ from the manifest")
    tree_rows = [e for e in entries.values() if e.stored == TREE]
    gone = [e for e in tree_rows if not (root / e.path).is_file()]
    problems += [f"{e.path}: listed in the tree, not there" for e in gone]
    archives = {f"{ARCHIVES}/{p.name}": p for p in sorted((root / ARCHIVES).glob("*.tar.xz"))}
    for stored in sorted({e.stored for e in entries.values()} - {TREE} - set(archives)):
        problems.append(f"{stored}: listed in the manifest, no such archive")
    for stored, path in archives.items():
        members = _archive_members(path)
        listed = {e.path: (e.bytes, e.sha256) for e in entries.values() if e.stored == stored}
        unlisted, absent = sorted(set(members) - set(listed)), sorted(set(listed) - set(members))
        problems += [f"{stored}: {name} not in the manifest" for name in unlisted]
        problems += [f"{stored}: {name} listed, not in the archive" for name in absent]
        problems += [
            f"{stored}: {name}: bytes or sha256 differ from the manifest"
            for name in sorted(set(members) & set(listed))
            if members[name] != listed[name]
        ]
    return problems


def index_fields(readme: Path) -> dict[str, str]:
    """The ``## Index`` block of a run's README.md as ``{key: value}``, every key of INDEX_KEYS there."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Index")
    except ValueError:
        raise RunsError(f"{readme}: no '## Index' block (its six '- key: value' lines)") from None
    fields: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("- ") and ":" in line:
            key, _, value = line[2:].partition(":")
            fields[key.strip()] = value.strip()
    missing = [k for k in INDEX_KEYS if not fields.get(k)]
    if missing:
        raise RunsError(f"{readme}: the '## Index' block has no {missing[0]}")
    return {k: fields[k] for k in INDEX_KEYS}


def index_text(root: Path) -> str:
    rows = []
    for run in run_folders(root):
        fields = index_fields(run / README)
        rows.append((fields["date"], run.name, fields))
    head = (
        "# The measured GPU runs\n\n"
        "One row per run folder, made from the `## Index` block of each run's README.md by\n"
        "`python3 benchmarks/gpu/runs.py index` (tests/test_gpu_runs.py fails when this table is stale).\n"
        "The calls and files of a run: its README.md; the reading of the figures: NOTEBOOK.md.\n\n"
    )
    table = ["| " + " | ".join(INDEX_HEADINGS) + " |", "|" + "---|" * len(INDEX_HEADINGS)]
    for date, name, f in sorted(rows):
        cells = [date, f"[{name}]({name}/README.md)", *(f[k] for k in INDEX_KEYS[1:])]
        table.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return head + "\n".join(table) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("archive", help="pack a run into archive/RUN.tar.xz and list it in the manifest")
    pack.add_argument("run", type=Path)
    pack.add_argument("--keep", action="append", default=[], help="a file (relative to the run) to keep")
    for name in ("index", "check"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--root", type=Path, default=ROOT)
        if name == "index":
            cmd.add_argument("--check", action="store_true", help="exit 1 when INDEX.md is not current")
    args = parser.parse_args(argv)
    try:
        if args.command == "archive":
            print(archive(args.run, args.keep))
            return 0
        if args.command == "check":
            problems = check(args.root)
            print("\n".join(problems) if problems else f"{args.root / MANIFEST}: every file as listed")
            return 1 if problems else 0
        text = index_text(args.root)
        if args.check:
            current = (args.root / INDEX).read_text(encoding="utf-8") if (args.root / INDEX).exists() else ""
            if current != text:
                print(f"{args.root / INDEX}: not current; run python3 benchmarks/gpu/runs.py index")
                return 1
            return 0
        _write_atomically(args.root / INDEX, text.encode())
        print(args.root / INDEX)
        return 0
    except (ValueError, OSError, tarfile.TarError) as exc:  # RunsError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
