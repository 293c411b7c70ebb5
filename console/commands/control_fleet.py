"""`spectower control get/set/release/events --fleet NAME` (or several `--server`): one action, every
replica, one table.

A write asks once, writes every replica concurrently (``control.fleet_ops``), reads each back, audits each
and prints one row per replica: replica, before, after, owner, confirmed or why not. The exit code says
how it went: 0 every replica confirmed, 3 partial (some confirmed, some not), 1 none confirmed, 2 bad
input (nothing sent).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from ..errors import fail, stderr, strict_json

if TYPE_CHECKING:
    from ...control.fleet import Fleet
    from ...control.fleet_ops import Preview, ReplicaOutcome
    from ...control.knob import KnobClient
    from ...control.knob_state import KnobState, Target
    from ...control.runner import PolicyRunner
    from ...storage import Database

FLEET_HELP = (
    "a fleet: the [fleets.NAME] table of ./spectower.toml or the user config.toml (servers = [...], "
    "router = URL, or prometheus = URL with job = NAME), or the running demo's"
)
SERVERS_HELP = "SGLang server URL, e.g. http://127.0.0.1:30000 (repeatable: several replicas at once)"
out = Console(highlight=False)
say = functools.partial(out.print, markup=False, soft_wrap=True)


def resolve(servers: Sequence[str], fleet: str | None) -> Fleet:
    """``--server``s and ``--fleet`` as one list of replicas; a mistake is the one ``error:`` line."""
    from ...control.fleet import FleetError, resolve

    try:
        return resolve(list(servers), fleet)
    except FleetError as exc:
        fail(str(exc))


def is_fleet(servers: Sequence[str], fleet: str | None) -> bool:
    """Whether a command acts on a fleet (``--fleet``, or ``--server`` more than once)."""
    return fleet is not None or len(servers) > 1


def client_for(replica: str) -> KnobClient:
    from ...control.credentials import load_credentials
    from ...control.knob import KnobClient

    creds = load_credentials()
    return KnobClient(replica, creds.admin_key, api_key=creds.api_key)


def _value(value: int | None, max_running: int | None) -> str:
    from ...control.knob_state import knob_mode

    mode = knob_mode(value, max_running)
    return "?" if mode == "unknown" else f"{value} ({mode})"


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        say("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def _introduce(fleet: Fleet) -> None:
    named = f"fleet {fleet.name}: " if fleet.name else ""
    say(f"{named}{len(fleet.replicas)} replica(s) from {fleet.source}")


# ------------------------------------------------------------------------------------------------ get


def get(fleet: Fleet, db: str | None, as_json: bool) -> None:
    """Every replica's knob, owner and lock holder (the person, from this database's audit)."""
    from ...control.fleet_ops import read_all

    states = read_all(fleet.replicas, client_for)
    holders = _holders([s for _, s in states if not isinstance(s, BaseException)], db)
    if as_json:
        docs = [
            {"replica": r, "error": str(s)}
            if isinstance(s, BaseException)
            else {"replica": r, **s.to_dict(), "lock_holder": holders.get(r)}
            for r, s in states
        ]
        print(strict_json({"fleet": fleet.name, "source": fleet.source, "replicas": docs}))
        return
    _introduce(fleet)
    rows: list[list[str]] = []
    for replica, state in states:
        if isinstance(state, BaseException):
            rows.append([replica, "-", "-", "-", f"NOT ANSWERING: {state}"])
            continue
        holder = holders.get(replica)
        held = f"{holder['actor']}: {holder['reason']}" if holder else ""
        knob = _value(state.spec_max_bs, state.max_running_requests)
        plugin = "plugin " + (state.plugin_version or "?") if state.plugin_installed else "NO PLUGIN"
        rows.append([replica, knob, state.owner or "unknown", held, plugin])
    _table(rows, ["replica", "knob", "owner", "held by", "state"])
    down = sum(1 for _, s in states if isinstance(s, BaseException))
    if down:
        raise typer.Exit(1)


def _holders(states: Sequence[KnobState], db: str | None) -> dict[str, dict[str, Any]]:
    """Who holds each manual lock (``control.audit.lock_holder``), by replica; {} without a database."""
    from ...control.audit import lock_holder
    from ...storage.database import default_db_url
    from .. import data

    store = data.open_store(default_db_url(db))
    if store is None:
        return {}
    try:
        found = {}
        for state in states:
            event = lock_holder(store, state)
            if event is not None:
                found[state.server_url] = {"actor": event.actor, "since": event.ts, "reason": event.reason}
        return found
    finally:
        store.close()


# --------------------------------------------------------------------------------------------- writes


def set_knob(
    fleet: Fleet, database: Database, target: Target, reason: str, actor: str, hold_s: float | None, yes: bool
) -> list[ReplicaOutcome]:
    """The fleet set: preview and ask once (unless ``yes``), then every replica at once."""
    from ...control.fleet_ops import ReplicaOutcome, preview, set_all, timed

    _introduce(fleet)
    replicas = list(fleet.replicas)
    skipped: list[ReplicaOutcome] = []
    if not yes:
        previews = preview(database, replicas, client_for, target, reason, actor)
        _show_preview(previews, hold_s)
        replicas = [p.replica for p in previews if p.problem is None]
        skipped = [
            ReplicaOutcome(p.replica, None, None, None, False, p.problem) for p in previews if p.problem
        ]
        if not replicas:
            say("no replica can be set (each is named above); nothing was sent")
            raise typer.Exit(1)
        if not typer.confirm(f"Apply to {len(replicas)} replica(s)?", default=False):
            say("aborted: nothing was sent")
            raise typer.Exit(1)
    written, seconds = timed(lambda: set_all(database, replicas, client_for, target, reason, actor,
                                             hold_s=hold_s))  # fmt: skip
    by_replica = {o.replica: o for o in [*written, *skipped]}
    return _report([by_replica[r] for r in fleet.replicas], seconds, "set")


def _show_preview(previews: Sequence[Preview], hold_s: float | None) -> None:
    lock = "until released" if hold_s is None else f"for {hold_s:g} s"
    rows = []
    for p in previews:
        if p.state is None:
            rows.append([p.replica, "-", f"CANNOT SET: {p.problem}"])
            continue
        limit = p.state.max_running_requests
        lock_now = f" (replaces its {p.state.owner} lock)" if p.state.locked else ""
        rows.append([p.replica, _value(p.state.spec_max_bs, limit), _value(p.new, limit) + lock_now])
    _table(rows, ["replica", "now", "new"])
    say(f"each replica set is locked against any policy {lock}")


def release(fleet: Fleet, database: Database, actor: str, reason: str) -> list[ReplicaOutcome]:
    from ...control.fleet_ops import release_all, timed

    _introduce(fleet)
    outcomes, seconds = timed(lambda: release_all(database, fleet.replicas, client_for, actor, reason))
    return _report(outcomes, seconds, "release")


def _report(outcomes: Sequence[ReplicaOutcome], seconds: float, action: str) -> list[ReplicaOutcome]:
    rows = []
    for o in outcomes:
        result = "confirmed" if o.confirmed else f"NOT confirmed: {o.why}"
        rows.append([o.replica, _value(o.before, o.max_running_requests),
                     _value(o.after, o.max_running_requests), o.owner or "-", result])  # fmt: skip
    _table(rows, ["replica", "before", "after", "owner", "result"])
    good = sum(1 for o in outcomes if o.confirmed)
    say(f"{action}: confirmed on {good} of {len(outcomes)} replica(s) in {seconds:.2f} s")
    return list(outcomes)


def finish(outcomes: Sequence[ReplicaOutcome]) -> None:
    """Leave with the fleet write's exit code (0 all, 3 partial, 1 none), naming what was not set."""
    from ...control.fleet_ops import EXIT_ALL_CONFIRMED, exit_code

    code = exit_code(outcomes)
    if code != EXIT_ALL_CONFIRMED:
        names = ", ".join(o.replica for o in outcomes if not o.confirmed)
        word = "partial" if any(o.confirmed for o in outcomes) else "failed"
        stderr.print(f"{word}: not confirmed on {names} (exit {code})", markup=False, soft_wrap=True)
        raise typer.Exit(code)


# --------------------------------------------------------------------------------------------- events


def events(database: Database, replicas: Sequence[str], limit: int) -> list[Any]:
    """The newest ``limit`` audit rows of these replicas together, newest first."""
    from ...control import audit

    rows = [row for url in replicas for row in audit.list_events(database, url, limit=limit)]
    rows.sort(key=lambda row: row.ts, reverse=True)
    return rows[:limit]


def stamp(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


# ----------------------------------------------------------------------------------------------- auto


def runners(fleet: Fleet, build: Callable[[str, Callable[[str], None]], PolicyRunner]) -> list[PolicyRunner]:
    """One policy runner per replica (``build(url, say)``); a replica that cannot start one is named and
    left out, the others run. None at all is the one ``error:`` line."""
    from ..errors import is_user_error

    _introduce(fleet)
    built: list[PolicyRunner] = []
    for url in fleet.replicas:

        def prefixed(line: str, url: str = url) -> None:
            say(f"{url}: {line}")

        try:
            built.append(build(url, prefixed))
        except Exception as exc:
            if not is_user_error(exc):
                raise
            say(f"{url}: no policy: {exc}")
    if not built:
        fail(f"no replica of {fleet.label} can run a policy (each is named above)")
    return built
