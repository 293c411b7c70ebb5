"""`spectower bench replay`: send a request trace open-loop (collectors/bench/replay.py) and score it.

Registered in the ``bench`` group beside `sweep`, `compare` and `load`; a module of its own so bench.py stays
under the size a module may have.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from .options import (
    API_DEFAULT,
    API_HELP,
    DB_HELP,
    SERVER_HELP,
    duration_option,
    factor_option,
    int_option,
    slo_option,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ...collectors.bench.records import RequestRecord
    from ...collectors.bench.replay import ReplayResult
    from ...storage.database import Database

EXIT_INTERRUPTED = 130


class _RichReplayProgress:
    """On stderr: one bar of requests answered out of the schedule's, with what is in flight and failed."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]replay[/]"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f}"),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console if console is not None else Console(stderr=True),
            transient=False,
        )
        self._task: Any = None
        self._sent = self._failed = self._tokens = 0
        self._in_flight = self._shed = 0

    def __enter__(self) -> _RichReplayProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def _detail(self) -> str:
        shed = f", {self._shed} shed" if self._shed else ""
        return f"{self._sent} sent, {self._in_flight} in flight, {self._failed} failed{shed}"

    def started(self, arrivals: int) -> None:
        self._task = self.progress.add_task("replay", total=arrivals, detail=self._detail())

    def sent(self, in_flight: int, shed: int) -> None:
        self._sent, self._in_flight, self._shed = self._sent + 1, in_flight, shed
        if shed:  # a shed arrival is answered at once: by nobody
            self.progress.update(self._task, completed=self._sent - self._in_flight, detail=self._detail())
        else:
            self.progress.update(self._task, detail=self._detail())

    def request_done(self, record: RequestRecord, in_flight: int) -> None:
        self._in_flight = in_flight
        self._failed += 0 if record.success else 1
        self.progress.update(self._task, advance=1, detail=self._detail())


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def _print_replay(result: ReplayResult, figures: dict[str, Any]) -> None:
    from rich.table import Table

    from .bench import _out

    out = _out()
    cfg = result.config
    out.print(f"[bold]spectower bench replay[/]: {cfg.server}, {Path(cfg.trace).name} "
              f"(speedup {cfg.speedup:g}, rate scale {cfg.rate_scale:g})")  # fmt: skip
    table = Table()
    for col in ("latency ms", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for name, key in (("TTFT", "ttft"), ("ITL (per token)", "itl"), ("end to end", "e2e")):
        table.add_row(name, *(_ms(figures[f"{key}_p{q}_s"]) for q in (50, 90, 99)))
    out.print(table)
    out.print(
        f"requests: {figures['completed']} completed, {figures['failed']} failed of {figures['requests']} "
        f"over {figures['span_s']:.1f} s (offered {figures['offered_rps'] or 0:.2f} req/s)"
    )
    out.print(
        f"output {figures['output_tok_s']:.1f} tok/s, {figures['request_rps']:.2f} req/s; goodput "
        f"{figures['goodput_rps']:.2f} req/s ({figures['slo_met']} met {cfg.slo.text()})"
    )
    if figures["cut_prompts"]:
        out.print(
            f"{figures['cut_prompts']} prompts cut to fit the server's context (max_req_input_len "
            f"{figures['server_max_input']}) or --max-context"
        )
    if figures["shed"]:
        out.print(
            f"[yellow]{figures['shed']} arrivals not sent: {cfg.max_in_flight} requests were in flight "
            "(--max-in-flight); scored as failures[/]"
        )
    if figures["most_late_s"] > 1.0:
        out.print(f"[yellow]the client sent a request up to {figures['most_late_s']:.1f} s after its time[/]")
    if figures["first_error"]:
        out.print(f"first error: {figures['first_error']}")
    out.print(f"knob when the replay started: {result.knob if result.knob is not None else 'no plugin'}")
    if result.interrupted:
        out.print("[yellow]interrupted: scored what finished[/]")


TRACE_HELP = ("a request trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens: Azure's LLM inference trace "
              "format), e.g. data/traces/AzureLLMInferenceTrace_conv_first30min.csv")
MAX_IN_FLIGHT_HELP = "safety limit: an arrival finding this many in flight is not sent (counted as failed)"
RATE_SCALE_HELP = "send about X times the trace's requests (0.5 thins, 2 thickens; seeded)"
JSON_HELP = ("Print one JSON object instead of the table: the figures, then every arrival's outcome "
             "(records: one list per field)")
MAX_CONTEXT_HELP = "cut prompts to this many tokens (always: so prompt and output fit the server's context)"


def replay(
    server: str = typer.Option(..., "--server", help=SERVER_HELP),
    trace: Path = typer.Option(..., "--trace", help=TRACE_HELP),
    speedup: float = factor_option(1.0, "--speedup", hi=1e6,
                                   help="divide every arrival time by X (3: a 30-minute trace plays in 10)"),
    rate_scale: float = factor_option(1.0, "--rate-scale", hi=100.0,
                                      help=RATE_SCALE_HELP),
    slo: Any = slo_option(),
    duration: float | None = duration_option(None, "--duration", minimum_s=1.0, maximum_s=30 * 86400.0,
                                             help="send only the arrivals of this long (after --speedup)"),
    max_context: int | None = int_option(None, "--max-context", lo=1, hi=1 << 20,
                                         help=MAX_CONTEXT_HELP),
    api: str = typer.Option(API_DEFAULT, "--api", help=API_HELP),
    seed: int = typer.Option(1, "--seed", help="seed of the prompts and of --rate-scale's choice"),
    max_in_flight: int = int_option(1024, "--max-in-flight", lo=1, hi=4096, help=MAX_IN_FLIGHT_HELP),
    request_deadline: float = duration_option("600s", "--request-deadline", minimum_s=1.0, maximum_s=86400.0,
                                              help="a request's whole time, connect to last token"),
    tag: str | None = typer.Option(None, "--tag", help="A label kept with the saved run."),
    save: bool = typer.Option(False, "--save", help="Save the run in the database (like a sweep)."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:  # fmt: skip
    """Send a request trace open-loop: each request at its time, its prompt length, its output forced.

    Prints TTFT, ITL and end-to-end percentiles, tokens/s, requests/s and goodput (requests/s within
    --slo). The API key of an --api-key server comes from SPECTOWER_API_KEY or SPECTOWER_API_KEY_FILE."""
    from ...collectors.auth import load_api_key
    from ...collectors.bench.errors import BenchError
    from ...collectors.bench.replay import ReplayConfig, run_replay
    from ...collectors.http import ServerUnreachable
    from ...control.knob_state import normalize_server_url
    from ...storage.request_traces import load_request_trace, schedule
    from ..errors import fail
    from .bench import _honour_sigint

    try:
        config = ReplayConfig(
            server=normalize_server_url(server), trace=str(trace), speedup=speedup, rate_scale=rate_scale,
            slo=slo, duration_s=duration, max_context=max_context, api=api,  # type: ignore[arg-type]
            seed=seed, max_in_flight=max_in_flight, request_deadline_s=request_deadline, tag=tag,
        ).validate()  # fmt: skip
        arrivals = schedule(load_request_trace(str(trace)), speedup, rate_scale, seed, duration)
        api_key = load_api_key()
    except ValueError as exc:  # BenchError, RequestTraceError, a key file: one line
        fail(str(exc))
    if not arrivals:
        fail("--trace: no arrivals to send (--duration or --rate-scale left none)")
    database = None
    if save:  # opened before the replay: a database that cannot be written fails now, not after it
        from ...storage import default_db_url, open_database

        database = open_database(default_db_url(db))
    _honour_sigint()
    try:
        with _RichReplayProgress() as progress:
            result = asyncio.run(run_replay(config, arrivals, progress=progress, api_key=api_key))  # type: ignore[arg-type]
    except (ServerUnreachable, BenchError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted", code=EXIT_INTERRUPTED)
    _report(result, database, as_json)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def _with_records(figures_json: str, records: dict[str, Any]) -> str:
    """``figures_json`` (an indented object) with the ``records`` block added last, one line per column:
    indented entry by entry, 1 738 requests would take 20 000 lines."""
    from ..errors import strict_json

    columns = ",\n".join(f"    {strict_json(name)}: {strict_json(column, indent=None)}"
                          for name, column in records.items())  # fmt: skip
    return f'{figures_json.removesuffix("}").rstrip()},\n  "records": {{\n{columns}\n  }}\n}}'


def _report(result: ReplayResult, database: Database | None, as_json: bool) -> None:
    """Save the run (when a database is given) and print its figures, as a table or one JSON object."""
    from ..errors import strict_json

    figures = result.figures()
    run_id = None
    if database is not None:
        from ...collectors.bench.persist import replay_to_models

        run, points = replay_to_models(result)
        run_id = int(database.save_bench_run(run, points))
        database.close()
    if as_json:
        from ...collectors.bench.replay_records import replay_records

        cfg = result.config
        head = {"server": cfg.server, "run_id": run_id, "params": cfg.params(), "knob": result.knob,
                "interrupted": result.interrupted, "started_at": result.started_at}  # fmt: skip
        print(_with_records(strict_json({**head, **figures}), replay_records(result).to_json()))
        return
    _print_replay(result, figures)
    if run_id is not None and database is not None:
        print(f"saved as run {run_id} in {database.url}")
