"""Files spectower writes whole (exports, sweep profiles, SGLang adaptive configs): one atomic write.

The content goes to a temporary file beside the target, which is then renamed over it, so a failure (a full
disk, Ctrl-C, an exception halfway) never leaves half a file behind, and a reader sees the old file or the
new one, never a mix.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path in ``dest``'s folder: renamed over ``dest`` when the block ends normally, removed
    when it raises. OSError (no such folder, no permission) comes through as raised."""
    target = Path(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
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
