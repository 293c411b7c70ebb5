"""`spectower control get|set|release|auto|events|freeze-gc`: the speculation knob of a running SGLang server.

Keys come from the environment or a file (SPECTOWER_ADMIN_KEY[_FILE], SPECTOWER_API_KEY[_FILE]), never from
an argument. Heavy imports stay inside the commands so ``spectower --help`` is fast.
"""

from __future__ import annotations

import functools
import getpass
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec

import typer
from rich.console import Console
from rich.markup import escape

from ...control.policy.learn import DEFAULT_WINDOW_S as LEARN_WINDOW_S
from ...plugin.knob_contract import MAX_HOLD_S, MIN_OPERATOR_HOLD_S
from ..errors import fail, is_user_error, strict_json
from . import control_fleet as fleets
from . import control_gc, control_get
from .control_fleet import FLEET_HELP, SERVERS_HELP
from .options import (
    AS_HELP,
    DB_HELP,
    MAX_EVENTS_SHOWN,
    POLICY_HELP,
    chosen_database,
    duration_option,
    int_option,
    say_database,
)
from .rank_lines import explore_lines, gc_lines, launcher_lines, off_path, stall_lines
from .rank_lines import when_text as _when

if TYPE_CHECKING:
    from ...control.fleet_ops import ReplicaOutcome
    from ...control.knob import KnobClient
    from ...control.knob_state import KnobState, SetResult
    from ...control.runner import PolicyRunner
    from ...storage import Database

app = typer.Typer(
    no_args_is_help=True,
    help="Read and move the speculation knob (spectower_spec_max_bs) of a running SGLang server.",
)
out = Console(highlight=False)

P = ParamSpec("P")

WARM_START_HELP = (
    "learn: start at the crossover of the newest stored sweep (or --warm-profile) of this server's stack "
    "(model, draft, SGLang version, GPUs); --no-warm-start: the ceiling the server holds now"
)
WARM_PROFILE_HELP = "learn: a measured profile (bench sweep --profile-out) to consider too (repeatable)"
WARM_GPU_METRICS_HELP = (
    "learn's warm start: dcgm-exporter /metrics URL of the server's host, naming its GPUs (default: NVML "
    "when the server runs on this host)"
)


def _user_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Our refusals (bad key, no plugin, unreachable, bad value) end as one ``error:`` line, exit 2."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except Exception as exc:
            if is_user_error(exc):
                fail(str(exc))
            raise

    return wrapper


def _say_plain(line: str) -> None:
    out.print(line, markup=False, soft_wrap=True)


def _stdin_is_tty() -> bool:
    return sys.stdin.isatty()


def _client(server: str) -> KnobClient:
    from ...control.credentials import load_credentials
    from ...control.knob import KnobClient

    creds = load_credentials()
    return KnobClient(server, creds.admin_key, api_key=creds.api_key)


def _open_db(db: str | None, existing: bool = False) -> Database:
    """The database (``existing``: one that is there, for a command that only reads it)."""
    from ...storage.database import default_db_url, open_database

    return open_database(default_db_url(db), existing=existing)


def _open_for_writing(db: str | None) -> tuple[Database, Callable[[], None]]:
    """The database a command writes its audit to, and what says which one it is and why (called once the
    command has written there: a refusal of bad input stays its one ``error:`` line)."""
    from ...storage.database import open_database

    url, why = chosen_database(db)
    return open_database(url), functools.partial(say_database, url, why)


def _fleet_write(db: str | None, write: Callable[[Database], Sequence[ReplicaOutcome]]) -> None:
    """A fleet write on the audit database, the line naming that database, then the fleet's exit code
    (0 all confirmed, 3 partial, 1 none: ``control_fleet.finish``)."""
    database, say_which = _open_for_writing(db)
    try:
        outcomes = write(database)
    finally:
        database.close()
    say_which()
    fleets.finish(outcomes)


def _describe(value: int | None, max_running: int | None) -> str:
    """The knob's value with how it reads (``control.knob.knob_mode``'s rule), e.g. ``0 (off)``."""
    from ...control.knob_state import knob_mode

    mode = knob_mode(value, max_running)
    if mode == "unknown":
        return mode
    return f"{value} ({f'draft while running batch <= {value}' if mode == 'threshold' else mode})"


def _print_state(state: KnobState, holder: dict[str, Any] | None = None) -> None:
    out.print(f"server           {state.server_url}  (SGLang {state.server_version or '?'})")
    out.print(
        f"speculation      {state.speculative_algorithm or 'none'}, adaptive="
        f"{'yes' if state.speculative_adaptive else 'no'}, bands allow 0="
        f"{ {True: 'yes', False: 'no', None: 'unknown'}[state.bands_allow_zero] }"
    )
    out.print(f"max_running_reqs {state.max_running_requests}")
    if not state.plugin_installed:
        out.print("plugin           [bold red]not installed[/]")
    else:
        out.print(f"plugin           spectower {state.plugin_version or '(version not reported)'}")
        knob = _describe(state.spec_max_bs, state.max_running_requests)
        out.print(f"knob             {knob}, mode {state.mode}")
        _print_ownership(state, holder)
    for rank in state.ranks:
        owner = f" owner={rank.owner}" if rank.owner else ""
        out.print(
            f"  dp_rank {rank.dp_rank}: spec_max_bs={rank.spec_max_bs}{owner} drafted={rank.batches_drafted} "
            f"gated={rank.batches_gated} active_steps={rank.active_num_steps} accept_length="
            f"{'-' if rank.accept_length is None else f'{rank.accept_length:.2f}'}",
            markup=False,
        )
    lines, warnings = off_path(state.ranks)
    lines += explore_lines(state.ranks)
    lines += gc_lines(state.ranks)
    lines += stall_lines(state.ranks)
    lines += launcher_lines(state.ranks)
    for line in lines:
        out.print(line, markup=False)
    for problem in [*state.problems(), *warnings]:
        out.print(f"[yellow]warning:[/] {escape(problem)}")


def _print_ownership(state: KnobState, holder: dict[str, Any] | None) -> None:
    """Owner, lock, expiry, last writer and the policy's last decision, as the server reports them; who holds
    a manual lock (``holder``: the audit row of the set that took it)."""
    from ...control.audit import lock_text

    say = functools.partial(out.print, markup=False, soft_wrap=True)
    say(f"owner            {state.owner or 'unknown'} ({lock_text(state)})")
    lock = state.lock
    if lock:
        expires = lock.get("expires_at")
        say(f"lock             {lock.get('writer')} since {_when(lock.get('since'))}, expires "
            + ("never (until released)" if expires is None else _when(expires)))  # fmt: skip
        if holder is not None:
            say(f"held by          {holder['actor']} since {_when(holder['since'])}: {holder['reason']}")
        elif lock.get("writer") == "manual":
            say("held by          unknown: no set of this lock in this database's audit (--db)")
    write = state.last_write
    if write:
        what = "release" if write.get("release") else f"{write.get('previous')} -> {write.get('value')}"
        say(f"last writer      {write.get('writer')} at {_when(write.get('ts'))}: {what}")
    decision = state.policy_last
    if decision:
        applied = "applied" if decision.get("applied") else "REFUSED (a lock held)"
        say(f"policy's last    set {decision.get('value')} at {_when(decision.get('ts'))}: {applied}")
    elif state.ownership_supported:
        say("policy's last    none since the server started")


@app.command("get")
@_user_errors
def get(
    servers: list[str] = typer.Option([], "--server", help=SERVERS_HELP),
    fleet: str | None = typer.Option(None, "--fleet", help=FLEET_HELP),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    db: str | None = typer.Option(
        None, "--db", help=DB_HELP + "; the speedup comes from its stored counters when it has them"
    ),
    window_s: float = duration_option(
        "1h",
        "--window",
        # At least a minute: the collector reads the counters with /server_info every 5 s, and a shorter
        # window holds too few intervals for an estimate (control.speedup wants 3 per bin and mode).
        minimum_s=60.0,
        maximum_s=30 * 86400.0,
        help="the speedup over this much of the stored counters (15m, 1h, 6h; the console's "
        "default range is 1h)",
    ),
) -> None:
    """Show the knob per DP rank, whether this server can take it, and the speedup speculation gives per
    batch size (the engine's counters, the estimate the console and the policy use). With --fleet (or
    several --server): one row per replica, its knob, owner and who holds its lock."""
    if fleets.is_fleet(servers, fleet):
        fleets.get(fleets.resolve(servers, fleet), db, as_json)
        return
    server = fleets.resolve(servers, fleet).replicas[0]
    with _client(server) as client:
        state = client.read()
    speed, holder, said = control_get.from_database(state, db, window_s)
    if as_json:
        print(strict_json({**state.to_dict(), "speedup": speed, "lock_holder": holder, "policy_said": said}))
        return
    _print_state(state, holder)
    if said is not None:
        control_get.print_said(out, said)
    control_get.print_speedup(out, speed)


def _print_result(result: SetResult) -> None:
    for row in result.per_rank():
        mark = "[green]confirmed[/]" if row["confirmed"] else "[bold red]NOT confirmed[/]"
        owner = f", owner {row['owner']}" if row.get("owner") else ""
        out.print(
            f"  dp_rank {row['dp_rank']}: {mark} (answered {row['accepted']}, reads {row['spec_max_bs']}"
            f"{owner})"
        )


@app.command("set")
@_user_errors
def set_knob(
    servers: list[str] = typer.Option([], "--server", help=SERVERS_HELP),
    fleet: str | None = typer.Option(None, "--fleet", help=FLEET_HELP),
    off: bool = typer.Option(False, "--off", help="switch speculation off (max_bs 0)"),
    on: bool = typer.Option(False, "--on", help="speculation always on (max_bs = max_running_requests)"),
    max_bs: int | None = typer.Option(None, "--max-bs", help="draft while the running batch is <= N"),
    reason: str = typer.Option(..., "--reason", help="why (required; goes to the audit trail)"),
    # The knob contract's range for an operator's hold, the console's Hold field's too.
    hold_s: float | None = duration_option(
        None,
        "--hold",
        minimum_s=MIN_OPERATOR_HOLD_S,
        maximum_s=MAX_HOLD_S,
        help="the manual lock expires after this long (30m, 2h); default: until released",
    ),
    as_name: str | None = typer.Option(None, "--as", help=AS_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
) -> None:
    """Set the knob, read it back per rank, audit it; the server locks it against any policy until
    `control release` (or --hold expires). With --fleet (or several --server): asks once, sets every
    replica at once, one row each; exit 0 all confirmed, 3 partial, 1 none."""
    from ...control import audit
    from ...control.knob_state import Target, check_target

    flags = (("--off", off), ("--on", on), ("--max-bs", max_bs is not None))
    chosen = [flag for flag, given in flags if given]
    if len(chosen) != 1:
        got = f" (got {', '.join(chosen)})" if chosen else ""
        fail(f"give exactly one of --off, --on, --max-bs N{got}")
    # the value and the reason are checked before anything asks or connects: a bad one is one line
    target: Target = check_target("off" if off else "on" if on else int(max_bs), "--max-bs")  # type: ignore[arg-type]
    actor = audit.operator_actor(as_name or getpass.getuser())
    reason = audit.validate_reason(reason)
    if not yes and not _stdin_is_tty():
        fail("stdin is not a terminal, so the change cannot be confirmed: pass --yes")
    group = fleets.resolve(servers, fleet)
    if fleets.is_fleet(servers, fleet):
        _fleet_write(db, lambda store: fleets.set_knob(group, store, target, reason, actor, hold_s, yes))
        return
    server = group.replicas[0]
    database, say_which = _open_for_writing(db)
    try:
        with _client(server) as client:
            state, new = audit.preview_knob(database, client, target, reason, actor)
            limit = state.max_running_requests
            old_text, new_text = _describe(state.spec_max_bs, limit), _describe(new, limit)
            lock = "until released" if hold_s is None else f"for {hold_s:g} s"
            out.print(
                f"{client.base_url}: spec_max_bs {old_text} -> {new_text}, locked against any policy {lock}"
            )
            if state.locked:
                out.print(f"(the server now has a {audit.lock_text(state)}; this set replaces it)")
            if not yes and not typer.confirm("Apply?", default=False):
                out.print("aborted: nothing was sent")
                raise typer.Exit(1)
            result = audit.apply_knob(database, client, target, reason, actor, hold_s=hold_s)
    finally:
        database.close()
    say_which()
    _print_result(result)
    if result.error:
        out.print(f"[yellow]note:[/] {escape(result.error)}")
    if not result.confirmed:
        out.print(
            f"[bold red]{result.outcome}[/]: see the note above; `spectower control get` shows the server now"
        )
        raise typer.Exit(1)
    after = result.after
    lock_now = audit.lock_text(after) if after is not None else "lock unknown"
    out.print(
        f"[green]confirmed[/] on {len(result.per_rank())} rank(s); {escape(lock_now)}; "
        f"`spectower control release --server {result.server_url}` hands it back"
    )


@app.command("release")
@_user_errors
def release(
    servers: list[str] = typer.Option([], "--server", help=SERVERS_HELP),
    fleet: str | None = typer.Option(None, "--fleet", help=FLEET_HELP),
    reason: str = typer.Option(..., "--reason", help="why (required; goes to the audit trail)"),
    as_name: str | None = typer.Option(None, "--as", help=AS_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Clear the server's lock (a manual set's, or a stuck sweep's) so its policy acts again. With --fleet
    (or several --server): every replica at once, one row each; exit codes as `control set`'s."""
    from ...control import audit

    actor = audit.operator_actor(as_name or getpass.getuser())
    reason = audit.validate_reason(reason)
    group = fleets.resolve(servers, fleet)
    if fleets.is_fleet(servers, fleet):
        _fleet_write(db, lambda store: fleets.release(group, store, actor, reason))
        return
    server = group.replicas[0]
    database, say_which = _open_for_writing(db)
    try:
        with _client(server) as client:
            outcome = audit.release(database, client, actor, reason)
    finally:
        database.close()
    say_which()
    result = outcome.result
    url = result.server_url
    if not result.confirmed:
        out.print(f"[bold red]release {result.outcome}[/]: {escape(result.error or '')}")
        raise typer.Exit(1)
    if outcome.was_locked:
        out.print(f"released: no lock on {url} now; its policy acts again at its next interval")
    else:
        out.print(f"{url} held no lock (the policy was free to act); recorded the release anyway")


@app.command("events")
@_user_errors
def events(
    servers: list[str] = typer.Option([], "--server", help="only this server (repeatable)"),
    fleet: str | None = typer.Option(None, "--fleet", help="only this fleet's replicas: " + FLEET_HELP),
    limit: int = int_option(20, "--limit", lo=1, hi=MAX_EVENTS_SHOWN, help="newest N events"),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json", help="print a JSON list"),
) -> None:
    """The audit trail, newest first."""
    import time

    from ...control import audit

    group = fleets.resolve(servers, fleet) if servers or fleet else None
    database = _open_db(db, existing=True)
    try:
        if group is None:
            rows = audit.list_events(database, None, limit=limit)
        else:
            rows = fleets.events(database, group.replicas, limit)
    finally:
        database.close()
    if as_json:
        print(strict_json([row.model_dump() for row in rows]))
        return
    for row in rows:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.ts))
        change = f" {row.old_max_bs} -> {row.new_max_bs}" if row.action == "set" else ""
        status = "ok" if row.confirmed else "NOT confirmed"
        error, note = audit.remarks(row.confirmed, row.error, row.note)
        said = (f" error: {error}" if error else "") + (f" note: {note}" if note else "")
        line = f"{stamp} {row.actor} {row.action}{change} {status} {row.server_url}: {row.reason}{said}"
        out.print(line, markup=False)


def _refuse_learn_options(spec: str, sample_s: float | None, dwell_s: float | None, warm: bool) -> None:
    """One line naming the option that only learn takes, before anything reaches the server."""
    if sample_s is not None:
        fail(f"--sample: only --policy learn keeps counters snapshots (got --policy {spec})")
    if dwell_s is not None:
        fail(f"--dwell: only --policy learn moves on its own (got --policy {spec})")
    if warm:
        fail(f"--warm-profile, --gpu-metrics: only --policy learn starts warm (got --policy {spec})")


@app.command("auto")
@_user_errors
def auto(
    servers: list[str] = typer.Option([], "--server", help=SERVERS_HELP),
    fleet: str | None = typer.Option(None, "--fleet", help=FLEET_HELP),
    policy_spec: str = typer.Option("learn", "--policy", help=POLICY_HELP),
    mode: str | None = typer.Option(None, "--mode", hidden=True, help="old name of --policy"),
    max_bs: int | None = typer.Option(None, "--max-bs", hidden=True, help="old: --mode threshold --max-bs N"),
    # At least 1 s: each decision reads the server's /server_info and the samples the collector stores
    # (every 1 s by default), so a faster one reads the same sample again and only loads the server; the
    # policies move far more slowly anyway (learn: a snapshot per 15 s, a change per 300 s at most). At most
    # 10 min: learn's 30-minute window still gets the few snapshots an estimate needs.
    interval_s: float = duration_option(
        "5s", "--interval", minimum_s=1.0, maximum_s=600.0, help="decision interval (5s, 30s, 1m)"
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    max_flips_per_hour: int | None = typer.Option(None, "--max-flips-per-hour", help="most sets per hour"),
    # From the collector's default interval (1 s) to an hour: older samples are no basis for a decision.
    stale_after_s: float = duration_option(
        "30s", "--stale-after", minimum_s=1.0, maximum_s=3600.0, help="hold when the newest sample is older"
    ),
    # learn refuses a sample_s over half its window (control/policy/learn.py).
    sample_s: float | None = duration_option(
        None,
        "--sample",
        minimum_s=1.0,
        maximum_s=LEARN_WINDOW_S / 2,
        help="learn: keep a counters snapshot this often (default 15s)",
    ),
    # learn's default is 5 min; a load compressed into minutes (a 5-minute day on the GPU) wants less
    dwell_s: float | None = duration_option(
        None, "--dwell", minimum_s=10.0, maximum_s=3600.0, help="learn: at least this long between moves (5m)"
    ),
    warm_start: bool = typer.Option(True, "--warm-start/--no-warm-start", help=WARM_START_HELP),
    warm_profiles: list[Path] = typer.Option([], "--warm-profile", help=WARM_PROFILE_HELP),
    gpu_metrics: str | None = typer.Option(None, "--gpu-metrics", help=WARM_GPU_METRICS_HELP),
) -> None:
    """Run a policy on the server's knob until SIGINT/SIGTERM (the server keeps the last ceiling).

    With --fleet (or several --server): one policy per replica in this one process, each with its own
    counters, lock and audit rows; a replica that cannot start is named and left out.

    It reads what `spectower collect` stores for the server, so run a collector for it too. learn starts
    from the server's own stored counters of the last 30 minutes, else from the newest matching sweep or
    profile, unless --no-warm-start; one line says which (or that its own restored counters decide).

    learn quiets exploring (the server's spectower_explore_share 0.02 -> 0.005) after 2 minutes of holds with
    every busy bin decided (its interval on one side of 1), and restores it as soon as one is not; while the
    load sits in a bin the ceiling gates that has too few intervals to decide, it asks for 0.2 for up to 5
    minutes, which brings the plugin's exploring windows (0.4.16) ten times as often; each such write is read
    back and audited as an `explore` row, and none is made while a lock holds.
    """
    from ...control.runner import DEFAULT_MAX_FLIPS_PER_HOUR, RunnerConfig
    from .control_auto import AutoPlan, profile_known, run_policies, runner_for
    from .control_auto import policy_spec as parse_policy_spec

    spec = parse_policy_spec(policy_spec, mode, max_bs)
    kind = spec.split(":", 1)[0]
    if kind != "learn":
        _refuse_learn_options(spec, sample_s, dwell_s, bool(warm_profiles or gpu_metrics))
    group = fleets.resolve(servers, fleet)
    if gpu_metrics and len(group.replicas) > 1:
        fail("--gpu-metrics names one host's GPUs: not with a fleet (each replica's GPUs come through NVML)")
    profiles = [profile_known(path) for path in warm_profiles]  # a bad file: one line, before the server
    config = RunnerConfig(
        interval_s=interval_s,
        stale_after_s=stale_after_s,
        max_flips_per_hour=DEFAULT_MAX_FLIPS_PER_HOUR if max_flips_per_hour is None else max_flips_per_hour,
    )
    plan = AutoPlan(spec, kind, config, sample_s, warm_start, profiles, gpu_metrics, dwell_s)
    database, say_which = _open_for_writing(db)
    runners: list[PolicyRunner] = []
    try:
        if not fleets.is_fleet(servers, fleet):
            runners.append(runner_for(database, group.replicas[0], plan, _say_plain))
        else:
            runners = fleets.runners(group, lambda url, say: runner_for(database, url, plan, say))
        run_policies(runners, config.interval_s, say_which, out)
    finally:
        for runner in runners:
            runner.client.close()
        database.discard_if_unused()  # closes it; a server that never answered leaves no empty database



# `control freeze-gc` lives in its own module (console/commands/control_gc.py); the refusals read as here
app.command("freeze-gc")(_user_errors(control_gc.freeze_gc))
