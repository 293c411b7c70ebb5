"""benchmarks/gpu/server_log.py: the pauses an SGLang server log tells of, the plugin watch's held-Python
lines and SGLang's long-collection warnings, read with their times so a replay's tail can be set against them.

The lines are the H200 replay's of 2026-12-05 (plugin 0.4.7, SGLang's launcher pid 637), and one the watch
itself writes here, so a change to its message that the reader would miss fails here.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spectower.plugin import stall_watch

from benchmarks.gpu import server_log
from benchmarks.gpu.server_log import LauncherHold
from tests.test_engine_counters import FakeClock as Clock

HELD = ("[2026-12-05 01:58:57] spectower watch: pid 637: this process's Python was held 0.35 s (the GIL, a "
        "collection or the CPU), to 01:58:57.9 UTC")  # fmt: skip
GC = ("[2026-12-05 01:58:58] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.3938s | "
      "# Objects: gen0=4, gen1=0, gen2=790217 | This may cause latency jitter. Consider calling the "
      "freeze_gc API after sending a few warmup requests.")  # fmt: skip


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_a_held_line_and_a_collection_line_read_as_pauses_ending_at_their_times() -> None:
    assert server_log.parse_line(HELD) == LauncherHold(utc("2026-12-05 01:58:57.9"), 0.35, "held", pid=637)
    # a collection's line is logged just after it ends: it ends at the line's time (to the second), and its
    # objects are the collected generation's
    assert server_log.parse_line(GC) == LauncherHold(utc("2026-12-05 01:58:58"), 0.3938, "gc", generation=2,
                                                     objects=790_217)  # fmt: skip
    gen1 = GC.replace("Generation 2", "Generation 1").replace("gen1=0", "gen1=12")
    assert server_log.parse_line(gen1) == LauncherHold(utc("2026-12-05 01:58:58"), 0.3938, "gc", generation=1,
                                                       objects=12)  # fmt: skip
    hold = server_log.parse_line(HELD)
    assert hold is not None and hold.began == pytest.approx(utc("2026-12-05 01:58:57.55"))


def test_the_watch_line_the_plugin_writes_is_read(caplog: pytest.LogCaptureFixture) -> None:
    """plugin/stall_watch.py's own line behind SGLang's bracket: its pid, seconds and end to the tenth."""
    clock = Clock()
    ends = utc("2026-12-05 09:30:29.5")
    watch = stall_watch.StallWatch(None, threading.get_ident(), clock=clock, wall=lambda: ends)
    with caplog.at_level(logging.WARNING):
        watch.watch_once(clock(), late_s=0.6)
    (record,) = [r for r in caplog.records if "spectower watch:" in r.getMessage()]
    line = f"[2026-12-05 09:30:29] {record.getMessage()}"
    assert server_log.parse_line(line) == LauncherHold(ends, 0.6, "held", pid=os.getpid())


@pytest.mark.parametrize(
    ("bracket", "stamped"),
    [
        ("[2026-12-05 01:58:57 TP0]", "2026-12-05 01:58:57"),
        ("[2026-12-05 01:58:57 DP1 TP3]", "2026-12-05 01:58:57"),
        ("[2026-12-05 01:58:57.412 TP0 EP0]", "2026-12-05 01:58:57.412"),  # SGLANG_LOG_MS
    ],
)
def test_a_rank_tag_or_milliseconds_in_the_bracket_and_a_prefix_before_it_are_read(
    bracket: str, stamped: str
) -> None:
    line = "scheduler | " + HELD.replace("[2026-12-05 01:58:57]", bracket) + " (and more)"
    assert server_log.parse_line(line) == LauncherHold(utc("2026-12-05 01:58:57.9"), 0.35, "held", pid=637)
    gc = server_log.parse_line(GC.replace("[2026-12-05 01:58:58]", bracket))
    assert gc == LauncherHold(utc(stamped), 0.3938, "gc", generation=2, objects=790_217)


def test_a_held_line_across_midnight_takes_the_day_its_clock_time_falls_on() -> None:
    """The watch stamps its end itself; the bracket is the log's own time a moment later, or earlier (cut to
    the second): their days differ when midnight falls between them."""
    for stamped, ends, day in (("2026-12-05 23:59:59", "00:00:00.1", "2026-12-06"),
                               ("2026-12-06 00:00:00", "23:59:59.9", "2026-12-05")):  # fmt: skip
        line = HELD.replace("2026-12-05 01:58:57", stamped).replace("01:58:57.9", ends)
        assert server_log.parse_line(line) == LauncherHold(utc(f"{day} {ends}"), 0.35, "held", pid=637)


def test_other_lines_are_skipped() -> None:
    lines = [
        "[2026-12-05 01:58:57] Decode batch, #running-req: 48, #token: 52000, gen throughput (token/s): 2800",
        HELD.split("] ", 1)[1],  # the watch printed to stderr before logging was set up: no date to place it
        HELD.replace("0.35 s", "a while"),
        HELD.replace("01:58:57.9 UTC", "01:58 UTC"),
        GC.replace("Generation 2", "Generation ?"),
        GC.replace("Duration: 0.3938s", "Duration: longs"),
        "[transformers] spectower watch: pid 637",
        "",
        "\ufffd\ufffd garbage",
        HELD,
        GC,
    ]
    holds = server_log.parse_server_log(lines)
    assert [hold.kind for hold in holds] == ["held", "gc"]


def _holds(path: Path, **cap: int) -> tuple[server_log.LauncherHold, ...]:
    """The pauses a log file tells of, read as replay_table.py reads it."""
    return server_log.parse_server_log(server_log.read_log_lines(path, **cap))


def test_a_plain_or_gzip_log_reads_the_same_and_a_broken_byte_does_not_stop_it(tmp_path: Path) -> None:
    text = "\n".join(["starting", HELD, "[2026-12-05 01:58:58] a line with a cut character: \u00e9", GC, ""])
    raw = text.encode().replace("\u00e9".encode(), b"\xc3")  # a log copied while a line was written
    (tmp_path / "spec-server.log").write_bytes(raw)
    (tmp_path / "spec-server.log.gz").write_bytes(gzip.compress(raw))
    plain = _holds(tmp_path / "spec-server.log")
    assert [hold.kind for hold in plain] == ["held", "gc"]
    assert _holds(tmp_path / "spec-server.log.gz") == plain


def test_a_log_past_the_cap_missing_or_damaged_is_a_value_error_naming_it(tmp_path: Path) -> None:
    plain, packed = tmp_path / "spec-server.log", tmp_path / "spec-server.log.gz"
    plain.write_text(HELD + "\n")
    packed.write_bytes(gzip.compress((HELD + "\n").encode() * 100))  # small on disk, large inflated
    size = len(HELD) + 1
    assert len(_holds(plain, max_bytes=size)) == 1
    with pytest.raises(ValueError, match=rf"^{re.escape(str(plain))}: more than {size - 1} bytes$"):
        _holds(plain, max_bytes=size - 1)
    assert packed.stat().st_size < 10 * size
    with pytest.raises(ValueError, match=rf"^{re.escape(str(packed))}: more than {10 * size} bytes$"):
        _holds(packed, max_bytes=10 * size)
    gone = tmp_path / "gone.log"
    with pytest.raises(ValueError, match=rf"^{re.escape(str(gone))}: cannot read \(No such file"):
        _holds(gone)
    (tmp_path / "cut.log.gz").write_bytes(gzip.compress(HELD.encode())[:-12])
    with pytest.raises(ValueError, match=r"cut\.log\.gz: cannot read \(a damaged gzip file"):
        _holds(tmp_path / "cut.log.gz")
    (tmp_path / "not.log.gz").write_text(HELD)
    with pytest.raises(ValueError, match=r"not\.log\.gz: cannot read \("):
        _holds(tmp_path / "not.log.gz")
    assert server_log.MAX_LOG_BYTES == 64 * 1024 * 1024


def test_a_pause_meets_a_stretch_within_its_lines_slack() -> None:
    """A watch line's end is cut to the tenth of a second (0.1 s either side); a collection's line is stamped
    to the second after it ended (1 s either side)."""
    held = LauncherHold(1000.0, 0.4, "held", pid=637)  # 999.6-1000.0
    gc = LauncherHold(1000.0, 0.4, "gc", generation=2, objects=790_000)
    assert server_log.holds_during([held, gc], 1000.05, 1002.0) == [held, gc]
    assert server_log.holds_during([held, gc], 1000.5, 1002.0) == [gc]  # within the collection's second
    assert server_log.holds_during([held, gc], 1001.5, 1002.0) == []
    assert server_log.holds_during([held, gc], 990.0, 999.55) == [held, gc]
    assert server_log.holds_during([held, gc], 990.0, 999.45) == [gc]
    assert server_log.holds_during([held, gc], 990.0, 998.5) == []
    early = LauncherHold(999.0, 0.2, "held", pid=8)
    assert server_log.holds_during([held, early], 990.0, 1010.0) == [early, held]  # by when each began
