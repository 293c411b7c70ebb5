"""Files spectower writes whole (exports, sweep profiles, SGLang adaptive configs), and files a user names
for it to read (a key file, a profile, a trace). Standard library only: the simulator reads its profiles
and traces through it too.

Writing: the content goes to a temporary file beside the target, which is then renamed over it, so a
failure (a full disk, Ctrl-C, an exception halfway) never leaves half a file behind, and a reader sees the
old file or the new one, never a mix.

Reading: at most a cap of bytes, UTF-8, and JSON whose every parser failure is one ``ValueError`` line
(a whole file's, or one line of a JSON Lines file: ``bench_serving.parse_lines``).
``Path.read_text`` reads a device such as ``/dev/zero`` for ever and raises ``UnicodeDecodeError`` on a
binary file; ``json.loads`` raises ``RecursionError`` on deeply nested input and a plain ``ValueError`` on
an integer of over 4300 digits: each of those reached the CLI as a traceback.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def check_out(out: str | os.PathLike[str], flag: str = "--out") -> Path:
    """``out`` as a Path, if it is a new file in an existing folder or an existing regular file (never a
    symlink, a device, a FIFO or a socket: the rename that completes a write would replace those; it once
    replaced /dev/full with a regular file). ``ValueError`` naming ``flag`` otherwise."""
    dest = Path(out)
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ValueError(f"{flag}: cannot use {dest}: {exc.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise ValueError(f"{flag}: {dest} is a folder, not a file")
        if stat.S_ISLNK(st.st_mode):
            raise ValueError(f"{flag}: {dest} is a symbolic link; give the real file (it is not replaced)")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{flag}: {dest} is not a regular file (a device, FIFO or socket); not replaced")
    if not dest.parent.is_dir():
        raise ValueError(f"{flag}: folder {dest.parent} does not exist")
    return dest


def _new_file_mode(target: Path) -> int:
    """The mode a written file gets: the replaced file's, else what the umask gives a new file (mkstemp's
    0600 would leave a config unreadable to the SGLang server running as another user)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path in ``dest``'s folder: renamed over ``dest`` when the block ends normally, removed
    when it raises. OSError (no such folder, no permission) comes through as raised."""
    target = Path(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    os.fchmod(fd, _new_file_mode(target))
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(dest: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``dest`` atomically; returns ``dest`` as a Path."""
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(dest)


# A key file holds one line: past this it is the wrong file (the CLI's key readers and the simulator's).
MAX_KEY_FILE_BYTES = 64 * 1024


class FileReadError(ValueError):
    """A file that cannot be used; the message says why, the caller says which file and setting."""


def read_text_capped(path: str | os.PathLike[str], max_bytes: int) -> str:
    """The file's text (UTF-8), refused past ``max_bytes``, whatever kind of file it is."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise FileReadError(f"cannot read ({exc.strerror or exc})") from None
    if len(raw) > max_bytes:
        raise FileReadError(f"more than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileReadError(f"not UTF-8 text (byte {exc.start})") from None


def parse_json_text(text: str, *, jsonl_line: bool = False) -> Any:
    """``json.loads`` with every failure as a ``FileReadError`` whose message is the one-line reason. NaN
    and +-Infinity are accepted (Python's json writes them; the caller decides which may stay).

    ``jsonl_line``: ``text`` is one line of a JSON Lines file, whose caller names the line, so a syntax
    error says its column (``not JSON (... at column C)``) where a whole file's says its line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if jsonl_line:
            raise FileReadError(f"not JSON ({exc.msg} at column {exc.colno})") from None
        raise FileReadError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise FileReadError("not usable JSON (nested too deeply)") from None
    except ValueError:
        # json's one failure besides JSONDecodeError: int() refusing an integer of more digits than
        # Python converts (its message would point at sys.set_int_max_str_digits, no help to a user)
        limit = sys.get_int_max_str_digits()
        raise FileReadError(f"not usable JSON (an integer of over {limit} digits)") from None


def finite_or_null(obj: Any) -> Any:
    """``obj`` with every NaN and +-Infinity (in dicts, lists and tuples too) as None, for JSON that any
    parser reads: Python's json writes them as bare ``NaN`` / ``Infinity`` tokens, which jq, JavaScript
    and Go refuse (and with them the whole line)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_null(v) for v in obj]
    return obj


def is_file_path(name_or_path: str) -> bool:
    """Whether a name given where a built-in name or a path is accepted means a path."""
    path = Path(name_or_path)
    return path.suffix == ".json" or path.exists() or "/" in name_or_path
