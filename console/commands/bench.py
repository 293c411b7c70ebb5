"""`spectower bench sweep` and `spectower bench compare`: measure where speculation stops paying."""

from __future__ import annotations

import asyncio
import getpass
import json
import math
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ...collectors.bench.lengths import OutputLengths
from .control_fleet import FLEET_HELP, is_fleet
from .control_fleet import resolve as resolve_fleet
from .options import (
    API_DEFAULT,
    API_HELP,
    AS_HELP,
    DB_HELP,
    chosen_database,
    duration_option,
    output_len_option,
    run_id_argument,
    say_database,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ...collectors.bench.compare import Comparison
    from ...collectors.bench.ratio import RatioPoint
    from ...collectors.bench.sweep import PointResult, SweepConfig, SweepResult
    from ...control.credentials import Credentials
    from ...control.sweep_audit import SweepKnob
    from ...storage.database import Database

app = typer.Typer(no_args_is_help=True, help="Benchmark sweeps: speculation on vs off at each concurrency.")

DEFAULT_CONCURRENCY_TEXT = "1,2,4,8,16,32,64"
SWEPT_SERVERS_HELP = "SGLang server URL, e.g. http://127.0.0.1:30000 (repeatable: swept one at a time)"
EXIT_INTERRUPTED = 130


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def _out() -> Any:
    """stdout; wide enough for the tables when it is not a terminal (a pipe, a file, a test)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def _print_result(result: SweepResult) -> None:
    from rich.table import Table

    out = _out()
    ratios = {r.concurrency: r for r in result.ratios()}
    plain = result.config.plain_server is not None
    off_plain = {r.concurrency: r for r in result.ratios("off", "plain")}
    on_plain = {r.concurrency: r for r in result.ratios("on", "plain")}
    title = f"spectower bench sweep: {result.config.server}"
    if plain:
        title += f" (plain: {result.config.plain_server})"
    table = Table(title=title, title_justify="left")
    plain_cols = ("plain tok/s", "off/plain", "on/plain") if plain else ()
    for col in (
        "C",
        "on tok/s",
        "off tok/s",
        *plain_cols,
        "on/off",
        "95% CI",
        "accept len",
        "TTFT ms on/off",
        "ITL ms on/off",
    ):
        table.add_column(col, justify="right")
    for c in sorted({p.concurrency for p in result.points}):
        on, off = result.point(c, "on"), result.point(c, "off")
        r = ratios.get(c)

        def pair(key: str, on: PointResult | None = on, off: PointResult | None = off) -> str:
            return (
                f"{_fmt(on.figures.get(key) if on else None)} / {_fmt(off.figures.get(key) if off else None)}"
            )

        pl, op, np_ = result.point(c, "plain"), off_plain.get(c), on_plain.get(c)
        plain_cells = (
            (_fmt(pl.tok_s if pl else None), _fmt(op.ratio if op else None, ".3f"),
             _fmt(np_.ratio if np_ else None, ".3f"))
            if plain
            else ()
        )  # fmt: skip
        table.add_row(
            str(c),
            _fmt(on.tok_s if on else None),
            _fmt(off.tok_s if off else None),
            *plain_cells,
            _fmt(r.ratio if r else None, ".3f"),
            f"{r.lo:.3f}-{r.hi:.3f}" if r else "-",
            _fmt(on.accept_length if on else None, ".2f"),
            pair("median_ttft_ms"),
            pair("median_itl_ms"),
        )
    out.print(table)
    cross = result.crossover()
    out.print(f"crossover: {cross.describe() if cross else 'not measured (needs --modes on,off)'}")
    if cross is not None and cross.bracket is not None:
        out.print(f"  between measured levels {cross.bracket[0]:g} and {cross.bracket[1]:g}")
    if plain:
        _print_vs_plain(out, result, list(off_plain.values()))
    best = result.best_max_bs()
    if best is not None:
        out.print(
            f"best knob: spectower_spec_max_bs = {best} (max_running_requests {result.max_running_requests})"
        )
    given_back = result.knob_note or "not given back"
    out.print(f"knob: found {result.knob_found or result.knob_before}; {given_back}")
    if result.interrupted:
        out.print(f"[yellow]interrupted: kept {len(result.points)} finished point(s)[/]")


def _print_vs_plain(out: Console, result: SweepResult, off_plain: list[RatioPoint]) -> None:
    """With --plain-server: the crossover against it, a model mismatch, and what the knob at 0 gives up."""
    vs_plain = result.crossover_vs_plain()
    out.print(
        "crossover vs plain server (on / plain): "
        + (vs_plain.describe() if vs_plain else "not measured (needs spec on and the plain server)")
    )
    spec_model = result.server_info.get("served_model_name")
    plain_model = (result.plain_server_info or {}).get("served_model_name")
    if spec_model != plain_model:
        out.print(f"[yellow]note: the plain server serves {plain_model!r}, --server {spec_model!r}[/]")
    worst = min(off_plain, key=lambda r: r.ratio, default=None)
    if worst is not None:
        out.print(
            f"knob off serves {worst.ratio:.2f} of the plain server at C={worst.concurrency:g} "
            "(the lowest off/plain measured)"
        )


def _result_json(result: SweepResult, run_id: int | None, profile_out: Path | None) -> dict[str, Any]:
    cross = result.crossover()
    points = []
    for p in result.points:
        figures = {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in p.figures.items()
        }
        # bench_serving's "concurrency" is the mean number in flight; "concurrency" here is the level.
        figures["mean_concurrency"] = figures.pop("concurrency", None)
        points.append(
            {
                **figures,
                "concurrency": p.concurrency,
                "mode": p.mode,
                "knob_value": p.knob_value,
                "accept_length": p.accept_length,
                "accept_length_source": p.accept_length_source,
            }
        )
    return {
        "server": result.config.server,
        "run_id": run_id,
        "params": result.config.params(),
        "sglang_version": result.server_info.get("version"),
        "max_running_requests": result.max_running_requests,
        "points": points,
        "ratios": [
            {"concurrency": r.concurrency, "ratio": r.ratio, "lo": r.lo, "hi": r.hi} for r in result.ratios()
        ],
        "crossover": _crossover_json(cross),
        "plain_server": result.config.plain_server,
        "ratios_vs_plain": None
        if result.config.plain_server is None
        else {
            f"{num}_plain": [
                {"concurrency": r.concurrency, "ratio": r.ratio, "lo": r.lo, "hi": r.hi}
                for r in result.ratios(num, "plain")
            ]
            for num in ("off", "on")
        },
        "crossover_vs_plain": _crossover_json(result.crossover_vs_plain()),
        "best_max_bs": result.best_max_bs(),
        "knob_before": result.knob_before,
        "knob_restored": result.knob_restored,
        "knob_found": result.knob_found,
        "knob_note": result.knob_note,
        "knob_moves": result.knob_moves,
        "interrupted": result.interrupted,
        "prefill": result.prefill.to_json() if result.prefill is not None else None,
        "profile_out": str(profile_out) if profile_out else None,
    }


def _crossover_json(cross: Any) -> dict[str, Any] | None:
    if cross is None:
        return None
    return {
        "status": cross.status,
        "value": cross.value,
        "lo": cross.lo,
        "hi": cross.hi,
        "bracket": list(cross.bracket) if cross.bracket else None,
    }


def _honour_sigint() -> None:
    """SIGINT stops the sweep gracefully (finished points kept, the knob restored) however it was started.
    A process started in the background without job control (``cmd &`` in a script, ``nohup``) inherits
    SIGINT ignored, and Python, and asyncio's Ctrl-C handling, then leave it ignored: the console's Stop
    button (SIGINT to the sweep it started) and an operator's ``kill -INT`` would do nothing.

    SIGTERM (``kill``, a service manager, a CI timeout) stops it the same way: its default would end the
    process at once and leave the server under the sweep's lock, the knob where the last slice put it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))


@app.command("sweep")
def sweep(
    servers: list[str] = typer.Option([], "--server", help=SWEPT_SERVERS_HELP),
    fleet: str | None = typer.Option(
        None, "--fleet", help="sweep every replica of it, one at a time, the others untouched: " + FLEET_HELP
    ),
    concurrency: str = typer.Option(
        DEFAULT_CONCURRENCY_TEXT, "--concurrency", help="Comma-separated levels."
    ),
    modes: str = typer.Option("on,off", "--modes", help="on (knob = max_running_requests), off (knob = 0)."),
    requests_per_level: int | None = typer.Option(None, "--requests-per-level", help="Requests per point."),
    duration_per_level: float | None = duration_option(
        None,
        "--duration-per-level",
        minimum_s=1.0,
        maximum_s=3600.0,  # per point: a sweep has levels x modes x rounds of them
        help="Seconds per point (20, 20s, 1m; default 20 unless --requests-per-level).",
    ),
    input_len: int = typer.Option(128, "--input-len", help="Prompt length (tokens / words)."),
    output_len: OutputLengths = output_len_option("256", minimum=2),  # inter-token latency needs two
    api: str = typer.Option(API_DEFAULT, "--api", help=API_HELP),
    warmup: int = typer.Option(2, "--warmup", help="Warm-up requests before each point."),
    tag: str | None = typer.Option(None, "--tag", help="A label kept with the saved run."),
    save: bool = typer.Option(False, "--save", help="Save the run (BenchRun + BenchPoints) in the database."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    profile_out: Path | None = typer.Option(None, "--profile-out", help="Write a replayable profile JSON."),
    gpu_metrics: str | None = typer.Option(
        None, "--gpu-metrics", help="dcgm-exporter /metrics URL of the server's host (GPU inventory)."
    ),
    rounds: int = typer.Option(
        2, "--rounds", help="Measure each point in this many slices, alternating modes (load drift cancels)."
    ),
    seed: int = typer.Option(1, "--seed", help="Prompt seed."),
    operator: str | None = typer.Option(None, "--as", help=AS_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the table."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Borrow the knob even while the server serves other requests or an operator's "
        "lock holds (the lock and value found are given back at the end).",
    ),
    plain_server: str | None = typer.Option(
        None,
        "--plain-server",
        help="A second SGLang server launched without speculation (same model, same GPU model): measured "
        "the same way at every level, interleaved with on/off, saved in the same run; its knob is never "
        "touched. Adds off/plain, on/plain and the crossover vs plain.",
    ),
) -> None:
    """Measure output throughput with speculation on and off at each concurrency; find the crossover.
    With --fleet (or several --server): one replica at a time, each saved as its own run, one summary."""
    from ...collectors.bench.sweep import SweepConfig, parse_concurrency, parse_modes
    from ...control.knob_state import normalize_server_url

    group = resolve_fleet(servers, fleet)  # one replica for a single --server
    config = SweepConfig(
        server=group.replicas[0],
        concurrency=parse_concurrency(concurrency),
        modes=parse_modes(modes),
        requests_per_level=requests_per_level,
        duration_per_level=_duration_per_level(requests_per_level, duration_per_level),
        input_len=input_len,
        output_len=output_len,
        api=api,  # type: ignore[arg-type]
        warmup=warmup,
        tag=tag,
        seed=seed,
        rounds=rounds,
        plain_server=normalize_server_url(plain_server) if plain_server else None,
    ).validate()
    options = SweepOptions(gpu_metrics, profile_out, operator, force, save, as_json, db)
    if is_fleet(servers, fleet):
        from .bench_fleet import sweep_fleet

        raise typer.Exit(sweep_fleet(group, config, options))
    _sweep_server(config, options)


@dataclass(frozen=True)
class SweepOptions:
    """What a sweep does around its measurements (the ``SweepConfig``): the same for every replica."""

    gpu_metrics: str | None
    profile_out: Path | None
    operator: str | None
    force: bool
    save: bool
    as_json: bool
    db: str | None


def _sweep_server(config: SweepConfig, options: SweepOptions) -> None:
    """One server's sweep, kept and printed; exit 130 when it was interrupted."""
    from ...control.credentials import load_credentials
    from ...storage import open_database

    inventory = _inventory_for(config.server, options.gpu_metrics, options.profile_out)
    creds = load_credentials()
    url, why = chosen_database(options.db)
    database = open_database(url)
    try:
        knob = _sweep_knob(config.server, creds, database, options.operator, options.force)
        result = _run_with_progress(config, knob, creds, inventory)
    except BaseException:
        database.discard_if_unused()  # closes it; a server that never answered leaves no empty database
        raise
    say_database(url, why)  # once it wrote there (the knob's audit rows), as a command that writes says it
    _keep_and_report(result, database, options.save, options.profile_out, options.as_json)
    if result.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)


def _keep_and_report(
    result: SweepResult, database: Database, save: bool, profile_out: Path | None, as_json: bool
) -> None:
    """Save the run (--save) and write the profile (--profile-out) when it measured anything, then print
    the result (table or --json) and where it was kept."""
    from ..errors import strict_json

    run_id, written = _keep(result, database, save, profile_out)
    database.close()
    if as_json:
        print(strict_json(_result_json(result, run_id, written)))
        return
    _print_result(result)
    if run_id is not None:
        print(f"saved as run {run_id} in {database.url}")
    if written is not None:
        print(f"profile written to {written}")


def _keep(
    result: SweepResult, database: Database, save: bool, profile_out: Path | None
) -> tuple[int | None, Path | None]:
    """Save the run (``save``) and write the profile (``profile_out``) when it measured anything: the run's
    id and the profile's path, each None when not kept."""
    run_id = _save(database, result) if save and result.points else None
    if profile_out is None or not result.points:
        return run_id, None
    from ...collectors.bench.profile_out import write_profile

    write_profile(result, profile_out)
    return run_id, profile_out


def _sweep_knob(
    server: str, creds: Credentials, database: Database, operator: str | None, force: bool
) -> SweepKnob:
    """The knob through control's client: one audit row when the sweep borrows it, one when it gives it
    back, in the name of --as (else the login name)."""
    from ...control.audit import operator_actor
    from ...control.sweep_audit import audited_sweep_knob

    actor = operator_actor(operator or getpass.getuser() or "unknown")
    return audited_sweep_knob(server, creds, database, actor, force=force)


def _duration_per_level(requests_per_level: int | None, duration_per_level: float | None) -> float | None:
    """A point lasts a number of requests or of seconds (the default when neither is given), not both."""
    from ...collectors.bench.sweep import DEFAULT_DURATION_S
    from ..errors import fail

    if requests_per_level is not None and duration_per_level is not None:
        fail("--requests-per-level and --duration-per-level: give one, not both")
    if requests_per_level is None and duration_per_level is None:
        return DEFAULT_DURATION_S
    return duration_per_level


def _inventory_for(
    server: str, gpu_metrics: str | None, profile_out: Path | None
) -> list[dict[str, Any]] | None:
    """The swept server's GPU inventory; with --profile-out, refused before the sweep when that file cannot
    be written or the inventory is unknown (the sweep would end writing nowhere)."""
    from ...collectors.bench.gpu_inventory import server_inventory
    from ..errors import fail

    if profile_out is not None:
        from ...storage.files import check_out

        try:
            check_out(profile_out, "--profile-out")
        except ValueError as exc:
            fail(str(exc))
    try:
        inventory = server_inventory(server, gpu_metrics)
    except (ConnectionError, ValueError) as exc:  # --gpu-metrics unreachable or not an exporter: one line
        fail(str(exc))
    if profile_out is not None and not inventory:
        fail(
            "--profile-out: the GPU inventory is unknown; give --gpu-metrics URL (the server host's "
            "dcgm-exporter) or run on the server's host where NVML sees its GPUs"
        )
    return inventory


def _run_with_progress(
    config: SweepConfig, knob: SweepKnob, creds: Credentials, inventory: list[dict[str, Any]] | None
) -> SweepResult:
    """The sweep under a live progress display; Ctrl-C ends it with the knob given back."""
    from ...collectors.bench.sweep import run_sweep
    from ..errors import fail

    _honour_sigint()
    from .bench_progress import SweepProgressLines

    progress = SweepProgressLines(len(config.concurrency) * len(config.measured_modes) * config.rounds)
    try:
        with progress, knob:
            return asyncio.run(
                run_sweep(
                    config,
                    knob=knob,
                    progress=progress,  # type: ignore[arg-type]
                    admin_key=creds.admin_key,
                    api_key=creds.api_key,
                    gpu_inventory=lambda: inventory,
                )
            )
    except KeyboardInterrupt:  # a Ctrl-C before the sweep started (or a second one)
        fail("interrupted", code=EXIT_INTERRUPTED)


def _save(database: Database, result: SweepResult) -> int:
    from ...collectors.bench.persist import to_models

    run, points = to_models(result)
    return int(database.save_bench_run(run, points))


def _print_comparison(comp: Comparison) -> None:
    from rich.table import Table

    out = _out()
    a, b = comp.a.run, comp.b.run
    table = Table(title=f"run {a.id} ({a.tag or '-'}) vs run {b.id} ({b.tag or '-'})", title_justify="left")
    for col in (
        "C or rate",
        "on tok/s A|B",
        "off tok/s A|B",
        "on/off A|B",
        "TTFT ms on/off A|B",
        "ITL ms on/off A|B",
        "e2e ms on/off A|B",
        "accept A|B",
    ):
        table.add_column(col, justify="right")

    def tok(side: dict[str, Any]) -> str:
        # a point of unknown speculation state (an imported run) shows in the on column, marked "?"
        if side.get("on_tok_s") is None and side.get("off_tok_s") is None and side.get("tok_s") is not None:
            return f"{_fmt(side['tok_s'])}?"
        return _fmt(side.get("on_tok_s"))

    def latency(side: dict[str, Any], key: str) -> str:
        by_mode = side.get(key) or {}
        on, off = by_mode.get("on", by_mode.get("?")), by_mode.get("off")
        return _fmt(on) if off is None else f"{_fmt(on)}/{_fmt(off)}"

    def ab(row: dict[str, Any], key: str, spec: str = ".1f") -> str:
        return f"{_fmt(row['a'].get(key), spec)} | {_fmt(row['b'].get(key), spec)}"

    def ab_latency(row: dict[str, Any], key: str) -> str:
        return f"{latency(row['a'], key)} | {latency(row['b'], key)}"

    for row in comp.rows:
        table.add_row(
            row["level"],
            f"{tok(row['a'])} | {tok(row['b'])}",
            ab(row, "off_tok_s"),
            ab(row, "ratio", ".3f"),
            ab_latency(row, "median_ttft_ms"),
            ab_latency(row, "median_itl_ms"),
            ab_latency(row, "median_e2e_latency_ms"),
            ab(row, "accept_length", ".2f"),
        )
    out.print(table)
    if any(side.get("tok_s") is not None and side.get("on_tok_s") is None and side.get("off_tok_s") is None
           for row in comp.rows for side in (row["a"], row["b"])):  # fmt: skip
        out.print("? = an imported run: whether speculation was on is not known")
    out.print(
        f"crossover: A {_fmt(a.crossover)} ({_fmt(a.crossover_lo)}-{_fmt(a.crossover_hi)}), "
        f"B {_fmt(b.crossover)} ({_fmt(b.crossover_lo)}-{_fmt(b.crossover_hi)}); "
        f"best knob A {a.best_max_bs}, B {b.best_max_bs}"
    )
    if not comp.stack:
        out.print("stack: no difference (SGLang version, launch flags, GPUs)")
        return
    stack = Table(title="stack differences", title_justify="left")
    for col in ("what", "A", "B"):
        stack.add_column(col)
    for d in comp.stack:
        stack.add_row(d["what"], json.dumps(d["a"], default=str), json.dumps(d["b"], default=str))
    out.print(stack)


@app.command("compare")
def compare(
    run_a: int = run_id_argument("Id of the first saved run."),
    run_b: int = run_id_argument("Id of the second saved run."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Two saved runs side by side, and what differs in their stacks."""
    from ...collectors.bench.compare import compare_runs, load_run
    from ...storage import default_db_url, open_database
    from ..errors import fail

    try:
        database = open_database(default_db_url(db), existing=True)
    except ValueError as exc:  # DatabaseURLError: no database there, or not spectower's
        fail(str(exc))
    try:
        comp = compare_runs(load_run(database, run_a), load_run(database, run_b))
    finally:
        database.close()
    if as_json:
        from ..errors import strict_json

        print(strict_json(comp.to_json()))  # valid JSON always: NaN / Infinity become null
    else:
        _print_comparison(comp)
