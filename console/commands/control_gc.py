"""`spectower control freeze-gc`: SGLang's ``/freeze_gc`` on one server, confirmed, read back and audited
(control/gc_freeze.py); registered on `spectower control` by console/commands/control.py."""

from __future__ import annotations

import getpass

import typer
from rich.console import Console

from .options import AS_HELP, DB_HELP, chosen_database, say_database

out = Console(highlight=False)


def freeze_gc(
    server: str = typer.Option(..., "--server", help="the SGLang server's URL"),
    reason: str = typer.Option(..., "--reason", help="why (required; goes to the audit trail)"),
    as_name: str | None = typer.Option(None, "--as", help=AS_HELP),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    yes: bool = typer.Option(False, "--yes", "-y", help="do not ask for confirmation"),
) -> None:
    """Freeze the server's garbage collectors (SGLang's /freeze_gc): the objects its launcher and scheduler
    hold now leave the collector's scans, so the long full collections that pause every request's output
    stop (`control get` shows them on its `launcher` line). Do it after some warm-up requests. Needs the
    admin key; read back from the objects each process reports frozen (plugin 0.4.8); audited."""
    from ...control import audit, gc_freeze
    from ...storage.database import open_database
    from .control import _client

    actor = audit.operator_actor(as_name or getpass.getuser())
    reason = audit.validate_reason(reason)
    with _client(server) as client:
        state = client.read()
        before = gc_freeze.check_readable(state)  # a freeze that cannot be read back: one line, nothing sent
        listed = ", ".join(f"{where} {count}" for where, count in before.items())
        out.print(f"{client.base_url}: frozen objects now: {listed}", markup=False)
        if not yes and not typer.confirm("Freeze its garbage collectors?", default=False):
            out.print("not frozen")
            raise typer.Exit(1)
        url, why = chosen_database(db)
        database = open_database(url)
        try:
            result = gc_freeze.freeze(database, client, actor, reason, before=state)
        finally:
            database.close()
    say_database(url, why)
    if not result.confirmed:
        out.print(f"[bold red]freeze not confirmed[/]: {result.error}", highlight=False)
        raise typer.Exit(1)
    out.print(f"frozen, confirmed by read-back: {result.text()}", markup=False)
