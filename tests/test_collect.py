"""`spectower collect` (console/commands/collect.py) as a real subprocess."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import collect_cli, db_rows

pytestmark = pytest.mark.integration


def _count(db: Path, table: str) -> int:
    """Rows in ``table``; 0 while the collector has created the file but not its schema yet."""
    rows = db_rows(db, f"select count(*) from {table}")
    return int(rows[0][0]) if rows else 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--server", "http://127.0.0.1:1", "--interval", "soon"], "--interval must be a duration"),
        (["--server", "127.0.0.1:1"], "--server must be an http(s) URL"),
        (["--gpu", "amd"], "--gpu must be nvml, dcgm=URL or none"),
        ([], "nothing to collect"),
        (["--server", "http://127.0.0.1:1", "--raw-days", "0"], "--raw-days: must be a positive number"),
        (["--server", "http://127.0.0.1:1", "--raw-days", "200"], "retention: --raw-days <= --rollup-days"),
    ],
)
def test_bad_arguments_one_clear_line(args: list[str], message: str, tmp_path: Path) -> None:
    p = collect_cli(*args, "--db", str(tmp_path / "x.db"))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2
    assert f"error: {message}" in out and "Traceback" not in out


def test_missing_key_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = {"SPECTOWER_API_KEY_FILE": str(tmp_path / "nope")}
    p = collect_cli("--server", "http://127.0.0.1:1", env=missing)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 2 and "SPECTOWER_API_KEY_FILE: cannot read" in out and "Traceback" not in out


def test_no_nvml_gpu_source_off_others_go_on(simulator_factory: Any, tmp_path: Path) -> None:
    sim = simulator_factory()
    db = tmp_path / "c.db"
    p = collect_cli(
        "--server", sim.base_url, "--gpu", "nvml", "--interval", "500ms", "--duration", "3s", "--db", str(db)
    )
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out
    assert "NVML is not usable on this host" in out and "GPU source is off" in out
    assert "Traceback" not in out
    assert _count(db, "engine_sample") >= 3
    assert "below NVML's own refresh" in out  # 500 ms < NVML's ~1 s averaging: warned, allowed


def test_sigterm_flushes_and_exits_cleanly(simulator_factory: Any, tmp_path: Path) -> None:
    sim = simulator_factory()
    db = tmp_path / "t.db"
    p = collect_cli("--server", sim.base_url, "--gpu", f"dcgm={sim.gpu_metrics_url}", "--db", str(db))
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if db.exists() and _count(db, "gpu_sample") >= 16:
                break
            time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert "collector stopped" in out and "0 buffered left" in out
    con = sqlite3.connect(db)
    try:
        assert con.execute("pragma integrity_check").fetchone()[0] == "ok"
        n_engine = con.execute("select count(*) from engine_sample").fetchone()[0]
        last = con.execute("select max(ts) from engine_sample").fetchone()[0]
    finally:
        con.close()
    assert n_engine >= 2 and last is not None


def test_old_samples_go_by_the_retention_flags(simulator_factory: Any, tmp_path: Path) -> None:
    from spectower.storage import open_database
    from spectower.storage.models import EngineSample

    db = tmp_path / "r.db"
    store = open_database(db)
    sid = store.server_id("http://old")
    now = time.time()
    with store.session() as s:  # one sample a day for 40 days
        s.add_all([EngineSample(server_id=sid, dp_rank=0, ts=now - d * 86400, num_running_reqs=1.0)
                   for d in range(1, 41)])  # fmt: skip
    store.close()
    sim = simulator_factory()
    p = collect_cli("--server", sim.base_url, "--duration", "2s", "--raw-days", "10", "--rollup-days", "30",
                   "--db", str(db))  # fmt: skip
    out, _ = p.communicate(timeout=90)
    assert p.returncode == 0, out
    con = sqlite3.connect(db)
    try:
        old = con.execute("select min(ts) from engine_sample where server_id = ?", (sid,)).fetchone()[0]
        minute = con.execute("select min(bucket_ts) from engine_rollup where res_s = 60").fetchone()[0]
        hourly = con.execute("select min(bucket_ts) from engine_rollup where res_s = 3600").fetchone()[0]
    finally:
        con.close()
    assert old == now - 9 * 86400  # raw: the newest 10 days (day 10 is just past the horizon)
    assert now - 30 * 86400 - 60 < minute <= now - 29 * 86400  # 1-minute rollups: 30 days
    assert hourly < now - 39 * 86400  # 1-hour rollups: all 40 days kept
    assert "retention: deleted" in out


def test_retention_flag_defaults_are_storage_defaults() -> None:
    # the CLI spells the numbers out (importing storage would slow every command's start-up)
    import inspect

    from spectower.console.commands.collect import collect
    from spectower.storage import retention

    params = inspect.signature(collect).parameters
    defaults = {name: params[name].default.default for name in ("raw_days", "rollup_days", "hourly_days")}
    assert defaults == {
        "raw_days": retention.DEFAULT_RAW_DAYS,
        "rollup_days": retention.DEFAULT_ROLLUP_DAYS,
        "hourly_days": retention.DEFAULT_HOURLY_DAYS,
    }
