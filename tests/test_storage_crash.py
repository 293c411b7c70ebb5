"""A writer process killed with SIGKILL mid-ingestion leaves a sound database that lost at most the rows
it had not committed yet; committed batches are whole and in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spectower.storage import open_database
from sqlalchemy import text

from tests.conftest import REPO_ROOT

WRITER = r"""
import sys, time
from spectower.storage import open_database
from spectower.storage.models import EngineSample
db = open_database(sys.argv[1])
sid = db.server_id("http://127.0.0.1:1")
w = db.writer(batch_size=2000, max_delay_s=0.05, maintenance=None)
seq = 0
while True:
    w.put(*[EngineSample(server_id=sid, ts=1.7e9 + seq + i, num_running_reqs=float(seq + i))
            for i in range(500)])
    seq += 500
    if seq % 5000 == 0:
        w.flush()
        print(f"flushed {seq}", flush=True)
"""


def test_sigkill_mid_ingestion_keeps_every_flushed_row_and_a_sound_file(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    open_database(path).close()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    flushed = 0
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while flushed < 15_000 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            flushed = int(line.split()[1])
        assert flushed >= 15_000, "the writer process did not get going"
        time.sleep(0.13)  # land somewhere in the middle of the next batches
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    db = open_database(path)  # recovers the WAL
    try:
        assert db.integrity_check() == "ok"
        with db.engine.connect() as conn:
            n, lo, hi = conn.execute(
                text("SELECT count(*), min(num_running_reqs), max(num_running_reqs) FROM engine_sample")
            ).one()
        # every row the writer reported as flushed is there
        assert n >= flushed
        # committed rows form a prefix of what was put: no hole, so no batch was half-written
        assert lo == 0 and hi == n - 1
        # and the file still takes writes
        w = db.writer(maintenance=None)
        from spectower.storage.models import EngineSample

        w.put(EngineSample(server_id=1, ts=1.0))
        assert w.flush(30)
        assert w.stats().written == 1
    finally:
        db.close()
