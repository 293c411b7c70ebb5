"""Issue #34 item 1: one way to find the database everywhere (storage.locate), and every command that writes
says which database it used and why.

Precedence: --db, $SPECTOWER_DB, ./spectower.toml, the user's config.toml, the running demo's, ./spectower.db.
The running demo is found through its marker, locked while the demo runs: a demo killed with -9 leaves a
marker the OS unlocked, which redirects nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from spectower.console.cli import app
from spectower.storage import DatabaseURLError
from spectower.storage.locate import DemoMarker, demo_marker_path, locate_database, running_demo_db
from typer.testing import CliRunner

from tests.conftest import db_rows


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), **extra}


def test_precedence_flag_env_project_file_user_file_demo_default(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = _env(tmp_path)
    user_config = tmp_path / "config" / "spectower" / "config.toml"
    marker = DemoMarker(demo_marker_path(env))
    assert locate_database(cwd=work, env=env) == locate_database(None, cwd=work, env=env)
    assert locate_database(cwd=work, env=env).value == str(work / "spectower.db")
    assert locate_database(cwd=work, env=env).why == "the default ./spectower.db"

    assert marker.claim(tmp_path / "demo" / "spectower.db") is None
    try:
        found = locate_database(cwd=work, env=env)
        assert (found.value, found.why) == (str(tmp_path / "demo" / "spectower.db"), "the running demo's")

        user_config.parent.mkdir(parents=True, exist_ok=True)
        user_config.write_text('db = "user.db"\n')
        found = locate_database(cwd=work, env=env)
        assert (found.value, found.why) == (str(user_config.parent / "user.db"), str(user_config))

        (work / "spectower.toml").write_text('# the project\'s\ndb = "postgresql://me@db.internal/st"\n')
        found = locate_database(cwd=work, env=env)
        assert (found.value, found.why) == ("postgresql://me@db.internal/st", "spectower.toml")

        found = locate_database(cwd=work, env={**env, "SPECTOWER_DB": "/srv/env.db"})
        assert (found.value, found.why) == ("/srv/env.db", "$SPECTOWER_DB")

        found = locate_database("flag.db", cwd=work, env={**env, "SPECTOWER_DB": "/srv/env.db"})
        assert (found.value, found.why) == ("flag.db", "--db")
    finally:
        marker.release()
    assert not demo_marker_path(env).exists()
    (work / "spectower.toml").unlink()
    user_config.unlink()
    assert locate_database(cwd=work, env=env).why == "the default ./spectower.db"


def test_a_config_file_without_db_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "spectower.toml").write_text("[console]\nport = 8501\n")
    assert locate_database(cwd=tmp_path, env=_env(tmp_path)).why == "the default ./spectower.db"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("db = 3\n", "spectower.toml: db: must be a database URL or path in quotes, got 3"),
        ('db = ""\n', "spectower.toml: db: must be a database URL or path in quotes, got ''"),
        ('db = "unclosed\n', "spectower.toml: not TOML"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "spectower.toml").write_text(text)
    with pytest.raises(DatabaseURLError, match=message):
        locate_database(cwd=tmp_path, env=_env(tmp_path))


def test_a_marker_no_demo_holds_redirects_nothing(tmp_path: Path) -> None:
    env = _env(tmp_path)
    path = demo_marker_path(env)
    path.parent.mkdir(parents=True)
    path.write_text('{"db": "/old/demo.db", "pid": 1}\n')  # left behind, unlocked
    assert running_demo_db(env) is None
    path.write_text("not json")
    assert running_demo_db(env) is None


def test_a_demo_killed_with_9_leaves_no_redirect(tmp_path: Path) -> None:
    env = _env(tmp_path)
    script = (
        "import sys, time\nfrom pathlib import Path\nfrom spectower.storage.locate import DemoMarker\n"
        f"assert DemoMarker().claim(Path({str(tmp_path / 'd.db')!r})) is None\n"
        "print('claimed', flush=True)\ntime.sleep(600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "claimed"
        assert running_demo_db(env) == str(tmp_path / "d.db")
        # a second demo does not take over the marker of the running one
        assert "another spectower demo runs" in (
            DemoMarker(demo_marker_path(env)).claim(tmp_path / "e.db") or ""
        )
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert demo_marker_path(env).exists()  # kill -9: never removed ...
    assert running_demo_db(env) is None  # ... but the OS dropped its lock


GPU_CSV = "timestamp, index, utilization.gpu [%]\n2025/11/20 10:00:00.100, 0, 35 %\n"


def test_a_writing_command_says_which_database_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "gpu.csv").write_text(GPU_CSV)
    monkeypatch.chdir(work)
    monkeypatch.delenv("SPECTOWER_DB", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    demo_db = work / "spectower-demo" / "spectower.db"
    demo_db.parent.mkdir()
    marker = DemoMarker()
    assert marker.claim(demo_db) is None
    try:
        res = CliRunner().invoke(app, ["import", "gpu-csv", "gpu.csv", "--host", "node1"])
    finally:
        marker.release()
    assert res.exit_code == 0, res.output
    assert "database: spectower-demo/spectower.db (the running demo's)" in res.output
    assert db_rows(demo_db, "select count(*) from gpu_sample") == [(1,)]
    assert not (work / "spectower.db").exists()

    res = CliRunner().invoke(app, ["import", "gpu-csv", "gpu.csv", "--host", "node2"])  # the demo stopped
    assert res.exit_code == 0, res.output
    assert "database: spectower.db (the default ./spectower.db)" in res.output
    res = CliRunner().invoke(app, ["import", "gpu-csv", "gpu.csv", "--host", "node3", "--db", "x.db"])
    assert "database: x.db (--db)" in res.output
