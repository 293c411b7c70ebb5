"""Which database a command uses when ``--db`` is not given, and why: the one rule every command follows.

Precedence (first found wins):

1. ``--db`` (the command's own flag);
2. the environment variable ``SPECTOWER_DB``;
3. a config file: ``spectower.toml`` in the working directory, then ``config.toml`` in the user's config
   folder (``$XDG_CONFIG_HOME/spectower/``, else ``~/.config/spectower/``); key ``db = "..."``, a URL or a
   path (a relative path is relative to the file's folder);
4. the running ``spectower demo``'s database: the demo holds a lock on ``demo.json`` in the user's config
   folder while it runs and names its database there; a marker no demo holds (a demo killed with -9, the
   OS dropped its lock) is ignored, so a stale one never redirects a command;
5. ``./spectower.db``.

``locate_database`` answers with the URL and the reason, so a command that writes can say which database
it used and why (``database: spectower-demo/spectower.db (the running demo's)``).

The same files (``read_config``, the one reader) and the running demo's marker also name fleets:
``[fleets.NAME]`` tables, returned unchecked by ``fleet_entries`` (control/fleet.py checks and resolves them).
"""

from __future__ import annotations

import contextlib
import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DB_ENV_VAR = "SPECTOWER_DB"
DEFAULT_DB_PATH = "spectower.db"
PROJECT_CONFIG_NAME = "spectower.toml"
USER_CONFIG_NAME = "config.toml"
DEMO_MARKER_NAME = "demo.json"
CONFIG_DB_KEY = "db"
CONFIG_FLEETS_KEY = "fleets"
# A config file or marker is a few lines; past this it is not one (and /dev/zero is never read for ever).
MAX_CONFIG_BYTES = 1 << 20


class DatabaseURLError(ValueError):
    """The --db / SPECTOWER_DB value (or a config file's ``db``) is not a usable database URL or path."""


@dataclass(frozen=True)
class DatabaseChoice:
    """The database a command uses (``url``: as given, not yet normalised) and why (``why``: words a
    user reads, e.g. ``--db``, ``$SPECTOWER_DB``, ``spectower.toml``, ``the running demo's``)."""

    value: str
    why: str


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/spectower`` when set (an absolute path, as the XDG spec asks), else
    ``~/.config/spectower``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "spectower"


def demo_marker_path(env: Mapping[str, str] | None = None) -> Path:
    return user_config_dir(env) / DEMO_MARKER_NAME


def locate_database(
    explicit: str | None = None, *, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> DatabaseChoice:
    """The database by the precedence above. Raises ``DatabaseURLError`` (one line naming the file and
    the key) for a config file that is no TOML or whose ``db`` is not a non-empty string."""
    if explicit is not None:
        return DatabaseChoice(explicit, "--db")
    env = os.environ if env is None else env
    if env.get(DB_ENV_VAR):
        return DatabaseChoice(env[DB_ENV_VAR], f"${DB_ENV_VAR}")
    here = Path.cwd() if cwd is None else cwd
    for config in config_paths(here, env):
        value = _config_db(config)
        if value is not None:
            return DatabaseChoice(value, shown_config(config, here))
    demo_db = running_demo_db(env)
    if demo_db is not None:
        return DatabaseChoice(demo_db, "the running demo's")
    return DatabaseChoice(str(here / DEFAULT_DB_PATH), f"the default ./{DEFAULT_DB_PATH}")


def _config_db(path: Path) -> str | None:
    """The ``db`` of a config file (a path made absolute against the file's folder); None when there is
    no such file or it has no ``db`` key."""
    doc = read_config(path)
    if doc is None:
        return None
    value = doc.get(CONFIG_DB_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DatabaseURLError(
            f"{path}: {CONFIG_DB_KEY}: must be a database URL or path in quotes, got {value!r}"
        )
    if "://" in value:
        return value
    return str(path.parent / Path(value).expanduser())


def config_paths(cwd: Path, env: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """The config files every command reads, first found wins: ``./spectower.toml``, then the user's."""
    return cwd / PROJECT_CONFIG_NAME, user_config_dir(env) / USER_CONFIG_NAME


def shown_config(path: Path, cwd: Path) -> str:
    """How a config file is named in a line a user reads (``spectower.toml`` for the working directory's)."""
    return PROJECT_CONFIG_NAME if path.parent == cwd else str(path)


def read_config(path: Path) -> dict[str, Any] | None:
    """A config file's TOML document, None when there is no such file. ``DatabaseURLError`` (one line naming
    the file) when it cannot be read or is no TOML. The one reader of spectower's config files: the
    database (``db``) and the fleets (``[fleets.NAME]``) both come from it."""
    from .files import FileReadError, read_text_capped

    if not path.is_file():
        return None
    try:
        return tomllib.loads(read_text_capped(path, MAX_CONFIG_BYTES))
    except FileReadError as exc:
        raise DatabaseURLError(f"{path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DatabaseURLError(f"{path}: not TOML ({exc})") from None


@dataclass(frozen=True)
class FleetEntry:
    """A fleet's table as a config file (or the running demo) defines it, not yet checked (control/fleet.py
    checks and resolves it); ``where``: the file, e.g. ``spectower.toml: fleets.prod``."""

    name: str
    table: Any
    where: str


def fleet_entries(*, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, FleetEntry]:
    """Every fleet defined where the database is looked for (``[fleets.NAME]`` of the config files, then the
    running demo's marker); a name defined twice is the first one's, as for ``db``."""
    here = Path.cwd() if cwd is None else cwd
    found: dict[str, FleetEntry] = {}
    sources: list[tuple[Any, str]] = []
    for config in config_paths(here, env):
        doc = read_config(config)
        if doc is not None:
            sources.append((doc.get(CONFIG_FLEETS_KEY), shown_config(config, here)))
    marker = running_demo_marker(env)
    if marker is not None:
        sources.append((marker.get(CONFIG_FLEETS_KEY), "the running demo"))
    for fleets, shown in sources:
        if fleets is None:
            continue
        if not isinstance(fleets, dict):
            raise DatabaseURLError(f"{shown}: {CONFIG_FLEETS_KEY}: must be a table of fleets, got {fleets!r}")
        for name, table in fleets.items():
            found.setdefault(str(name), FleetEntry(str(name), table, f"{shown}: {CONFIG_FLEETS_KEY}.{name}"))
    return found


def running_demo_db(env: Mapping[str, str] | None = None) -> str | None:
    """The database of the ``spectower demo`` running now on this machine for this user (its marker, locked
    while it runs), else None. A marker nobody holds, or one that cannot be read, counts as no demo."""
    marker = running_demo_marker(env)
    db = None if marker is None else marker.get("db")
    return db if isinstance(db, str) and db else None


def running_demo_marker(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The running demo's marker document (``db``, ``pid``, ``fleets``), else None."""
    import fcntl

    try:
        fd = os.open(demo_marker_path(env), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # the demo holds it: it runs
            raw = os.read(fd, MAX_CONFIG_BYTES)
        else:  # nobody holds it: a demo that stopped without removing it
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw)
    except ValueError:  # being written right now, or not ours
        return None
    return doc if isinstance(doc, dict) else None


class DemoMarker:
    """The running demo's marker (``demo.json`` in the user's config folder): created and locked for as
    long as the demo runs, naming its database; ``release`` removes it. The lock is the proof the demo
    runs: the OS drops it when the demo's process ends, however it ends."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = demo_marker_path() if path is None else path
        self._fd: int | None = None

    def claim(self, db_path: Path, fleets: Mapping[str, Any] | None = None) -> str | None:
        """Take the marker for ``db_path``; None when done, else why not (another demo holds it, the config
        folder cannot be written): the demo runs on, and commands without --db just do not find it."""
        import fcntl

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            return f"cannot write {self.path} ({exc.strerror})"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return f"another spectower demo runs (it holds {self.path})"
        doc: dict[str, Any] = {"db": str(db_path.resolve()), "pid": os.getpid()}
        if fleets:
            doc[CONFIG_FLEETS_KEY] = dict(fleets)
        body = json.dumps(doc) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, body.encode(), 0)
        self._fd = fd
        return None

    def release(self) -> None:
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while the lock holds: no other demo has written it meanwhile
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
