"""`spectower collect`: the collection daemon (spectower.collectors.daemon)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ..errors import fail
from .control_fleet import FLEET_HELP
from .control_fleet import resolve as resolve_fleet
from .options import (
    DB_HELP,
    chosen_database,
    duration_option,
    run_duration_option,
    say_database,
)

if TYPE_CHECKING:
    from ...collectors.daemon import DaemonConfig
    from ...storage.retention import RetentionPolicy


def collect(
    server: list[str] = typer.Option(
        [], "--server", help="SGLang server base URL (repeatable), e.g. http://127.0.0.1:30000"
    ),
    fleet: str | None = typer.Option(None, "--fleet", help="every replica of this fleet too: " + FLEET_HELP),
    gpu: str = typer.Option(
        "none", "--gpu", help="GPU source: nvml (local GPUs), dcgm=URL (dcgm-exporter), none"
    ),
    prometheus: str | None = typer.Option(
        None, "--prometheus", help="Prometheus base URL: read SGLang and DCGM series of every instance"
    ),
    # At least 100 ms: every interval reads /metrics, /server_info and /v1/loads of each server, and NVML
    # and SGLang refresh what they report only about once a second (daemon.interval_warnings), so faster
    # only loads the server. At most an hour: the coarsest rollup (1 h) still gets a sample each.
    interval: float = duration_option(
        "1s", "--interval", minimum_s=0.1, maximum_s=3600.0, help="Collection interval (1s, 500ms, 2m)"
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    duration: float | None = run_duration_option("until SIGTERM/SIGINT"),
    # At most a minute: a source that has not answered in a minute is down, and the collector should
    # record the gap rather than wait on it.
    timeout: float | None = duration_option(
        None,
        "--timeout",
        minimum_s=0.1,
        maximum_s=60.0,
        help="Per-request timeout (default: 2 intervals, 0.5-5 s)",
    ),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING, ERROR"),
    raw_days: float = typer.Option(14.0, "--raw-days", help="Keep raw (1 Hz) samples this many days"),
    rollup_days: float = typer.Option(180.0, "--rollup-days", help="Keep 1-minute rollups this many days"),
    hourly_days: float = typer.Option(3650.0, "--hourly-days", help="Keep 1-hour rollups this many days"),
) -> None:
    """Run the collection daemon: scrape SGLang servers, GPUs and Prometheus into the database.

    The API key of an --api-key server comes from SPECTOWER_API_KEY or the file named by
    SPECTOWER_API_KEY_FILE (never the command line). Older samples are deleted hourly per --raw-days /
    --rollup-days / --hourly-days (audit rows, gaps and benchmark runs are kept)."""
    from ...collectors.auth import load_api_key
    from ...collectors.daemon import DaemonConfig
    from ...storage.retention import RetentionPolicy

    _log_at(log_level)
    try:
        config = DaemonConfig(
            servers=list(server) if fleet is None else list(resolve_fleet(server, fleet).replicas),
            gpu=gpu,
            prometheus=prometheus,
            interval_s=interval,
            duration_s=duration,
            timeout_s=timeout,
            api_key=load_api_key(),
        )
        retention = RetentionPolicy(raw_days, rollup_days, hourly_days)
    except ValueError as exc:
        fail(_flag_names(str(exc)))
    _run_collector(config, db, retention)


def _log_at(log_level: str) -> None:
    """The collector's log on stderr at ``--log-level``; httpx's request lines only from WARNING up."""
    import logging

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"--log-level: unknown level {log_level!r}")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: at 1 Hz per source that drowns the collector's own health lines.
    logging.getLogger("httpx").setLevel(max(level, logging.WARNING))


def _run_collector(config: DaemonConfig, db: str | None, retention: RetentionPolicy) -> None:
    """Open the chosen database (one error line for a bad --db, a second collector, a failing server) and
    collect into it until the run ends."""
    import asyncio

    from sqlalchemy.exc import SQLAlchemyError

    from ...collectors.daemon import Collector
    from ...collectors.sink import StorageSink
    from ...storage import open_database
    from ...storage.database import CollectorConflictError
    from ...storage.dialect import error_line

    url, why = chosen_database(db)
    try:
        database = open_database(url)
    except ValueError as exc:  # DatabaseURLError, SchemaError: one line naming the --db value
        fail(str(exc))
    say_database(url, why)
    database.retention = retention
    try:
        database.maintain()  # old samples go now, not an hour into the run (then hourly, on the writer)
        sink = StorageSink(database)
        asyncio.run(Collector(config, sink).run())
    except CollectorConflictError as exc:
        fail(str(exc))
    except SQLAlchemyError as exc:
        fail(f"--db: {database!r}: {error_line(exc)}")
    finally:
        database.close()


def _flag_names(message: str) -> str:
    """storage names retention fields as Python does; the user typed flags."""
    for field in ("raw_days", "rollup_days", "hourly_days"):
        message = message.replace(field, "--" + field.replace("_", "-"))
    return message
