"""`spectower bench sweep --fleet NAME` (or several `--server`): every replica swept, one at a time.

Each replica gets exactly the single sweep (``bench.py``'s steps: the knob of THAT replica borrowed under a
sweep lock and given back, the same measurements, its own run saved with ``--save``, its ``server_url``
naming the replica), and the next replica starts only after the previous one's knob was given back: while
one replica is swept, no other replica's knob is read for writing, moved or audited. A replica that fails
(down, busy, locked, no plugin) is named with why, and the others are still swept. One summary table at
the end (or one JSON object with ``--json``).

Exit codes as the fleet's control commands (``control.fleet_ops.exit_code_of``): 0 every replica swept, 3
partial (some swept, some not), 1 none, 2 bad input (nothing sent), 130 interrupted (the replica being
swept keeps its finished points and gets its knob back; the replicas after it are not swept).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import typer

from ..errors import fail, is_user_error, stderr, strict_json
from . import bench
from .options import chosen_database, say_database

if TYPE_CHECKING:
    from ...collectors.bench.sweep import SweepConfig, SweepResult
    from ...control.credentials import Credentials
    from ...control.fleet import Fleet
    from ...storage.database import Database
    from .bench import SweepOptions


@dataclass
class ReplicaSweep:
    """One replica's part: its result (None when it never measured), where it was kept, or why not."""

    replica: str
    result: SweepResult | None = None
    run_id: int | None = None
    profile: Path | None = None
    why: str | None = None
    borrowed: bool = False  # the sweep borrowed this replica's knob (before it failed, if it did)

    @property
    def interrupted(self) -> bool:
        return self.why == INTERRUPTED or (self.result is not None and self.result.interrupted)

    @property
    def swept(self) -> bool:
        return self.result is not None and self.why is None and not self.result.interrupted


INTERRUPTED = "interrupted"
NOT_REACHED = "not swept: the fleet sweep was interrupted before this replica"


def sweep_fleet(group: Fleet, config: SweepConfig, options: SweepOptions) -> int:
    """Sweep every replica of ``group`` in turn; the exit code (0 all, 3 partial, 1 none, 130 stopped)."""
    from ...control.credentials import load_credentials
    from ...control.fleet_ops import exit_code_of
    from ...storage import open_database

    if options.gpu_metrics is not None:
        fail("--gpu-metrics names one host's GPUs: not with a fleet (each replica's GPUs come through NVML)")
    configs = [_replica_config(group, config, replica) for replica in group.replicas]
    profiles = [_profile_path(options.profile_out, replica) for replica in group.replicas]
    creds = load_credentials()
    url, why = chosen_database(options.db)
    database = open_database(url)
    say_database(url, why)
    named = f"fleet {group.name}: " if group.name else ""
    _say(options, f"{named}{len(group.replicas)} replica(s) from {group.source}, swept one at a time")
    sweeps: list[ReplicaSweep] = []
    try:
        for index, (replica_config, profile) in enumerate(zip(configs, profiles, strict=True), 1):
            _say(options, f"\nreplica {index}/{len(configs)}: {replica_config.server}")
            sweep = _sweep_replica(replica_config, profile, creds, database, options)
            sweeps.append(sweep)
            if not options.as_json and sweep.result is not None:
                _show_replica(sweep, database)
            elif not options.as_json:
                bench._out().print(f"{sweep.replica}: NOT swept: {sweep.why}", markup=False)
            if sweep.interrupted:
                break
    finally:
        database.close()
    sweeps += [ReplicaSweep(r, why=NOT_REACHED) for r in group.replicas[len(sweeps) :]]
    stopped = any(s.interrupted for s in sweeps)
    code = bench.EXIT_INTERRUPTED if stopped else exit_code_of([s.swept for s in sweeps])
    if options.as_json:
        print(strict_json(_fleet_json(group, sweeps, code)))
    else:
        _summary(sweeps)
    _finish(sweeps, code)
    return code


def _say(options: SweepOptions, line: str) -> None:
    if not options.as_json:
        bench._out().print(line, markup=False, highlight=False)


def _replica_config(group: Fleet, config: SweepConfig, replica: str) -> SweepConfig:
    """The single sweep's config for one replica; a named fleet's runs are tagged with it unless --tag
    says otherwise. A replica the config refuses (``--plain-server`` is one of them) is bad input."""
    from ...collectors.bench.errors import BenchError

    tag = config.tag if config.tag is not None or group.name is None else f"fleet {group.name}"
    try:
        return dataclasses.replace(config, server=replica, tag=tag).validate()
    except BenchError as exc:
        fail(f"{replica}: {exc}")


def _profile_path(profile_out: Path | None, replica: str) -> Path | None:
    """``--profile-out`` for one replica: the file name with the replica's host and port in it (``out.json``
    -> ``out-10.0.0.1-30000.json``), checked before anything is sent."""
    from ...storage.files import check_out

    if profile_out is None:
        return None
    parts = urlsplit(replica)
    where = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{parts.hostname}-{parts.port or parts.scheme}")
    path = profile_out.with_name(f"{profile_out.stem}-{where}{profile_out.suffix}")
    try:
        return check_out(path, "--profile-out")
    except ValueError as exc:
        fail(str(exc))


def _sweep_replica(
    config: SweepConfig, profile: Path | None, creds: Credentials, database: Database,
    options: SweepOptions,
) -> ReplicaSweep:  # fmt: skip
    """One replica's single sweep (``bench.py``'s steps), kept; its failure is its row, not the fleet's."""
    import httpx

    from ...collectors.bench.errors import BenchError
    from ...collectors.bench.gpu_inventory import server_inventory

    sweep = ReplicaSweep(config.server)
    try:
        inventory = server_inventory(config.server, None)
        if profile is not None and not inventory:
            raise BenchError(
                "--profile-out: the GPU inventory of this replica is unknown (NVML sees only this host's "
                "GPUs: run the sweep on the replica's host, or sweep it alone with --gpu-metrics)"
            )
        knob = bench._sweep_knob(config.server, creds, database, options.operator, options.force)
        try:
            sweep.result = bench._run_with_progress(config, knob, creds, inventory)
        finally:
            sweep.borrowed = knob.found is not None
        sweep.run_id, sweep.profile = bench._keep(sweep.result, database, options.save, profile)
    except KeyboardInterrupt:  # outside the sweep itself (which keeps its points and gives the knob back)
        sweep.why = INTERRUPTED
    except typer.Exit as exc:  # the sweep's own "interrupted" before it started
        sweep.why = INTERRUPTED if exc.exit_code == bench.EXIT_INTERRUPTED else f"exit {exc.exit_code}"
    except Exception as exc:
        if not (is_user_error(exc) or isinstance(exc, httpx.HTTPError | OSError)):
            raise  # not a replica's refusal or silence (a bug, the database): the caller's to show
        sweep.why = str(exc) or type(exc).__name__
    return sweep


def _show_replica(sweep: ReplicaSweep, database: Database) -> None:
    """The replica's own table, as a single sweep prints it, and where its run was kept."""
    assert sweep.result is not None
    bench._print_result(sweep.result)
    if sweep.run_id is not None:
        print(f"saved as run {sweep.run_id} in {database.url}")
    if sweep.profile is not None:
        print(f"profile written to {sweep.profile}")


def _summary(sweeps: list[ReplicaSweep]) -> None:
    """One row per replica: swept or why not, its run, crossover, best knob and the knob given back."""
    from rich.table import Table

    table = Table(title="fleet sweep: every replica", title_justify="left")
    for col in ("replica", "result", "run", "crossover", "best knob", "knob after"):
        table.add_column(col, overflow="fold")
    for sweep in sweeps:
        result = sweep.result
        cross = result.crossover() if result is not None else None
        best = result.best_max_bs() if result is not None else None
        if sweep.swept:
            outcome = "swept"
        elif result is not None and result.interrupted:
            outcome = f"interrupted: kept {len(result.points)} point(s)"
        else:
            outcome = f"NOT swept: {sweep.why}"
        table.add_row(
            sweep.replica, outcome, "-" if sweep.run_id is None else str(sweep.run_id),
            cross.describe() if cross is not None else "-", "-" if best is None else str(best),
            _knob_after(sweep),
        )  # fmt: skip
    bench._out().print(table)


def _knob_after(sweep: ReplicaSweep) -> str:
    """How the sweep left the replica's knob: restored, never touched, or unknown (it failed after it
    borrowed the knob: its audit's sweep-end row says whether the give-back got through)."""
    result = sweep.result
    if result is None:
        return "unknown: failed after borrowing it (see control get)" if sweep.borrowed else "untouched"
    return "restored" if result.knob_restored else (result.knob_note or "not given back")


def _fleet_json(group: Fleet, sweeps: list[ReplicaSweep], code: int) -> dict[str, Any]:
    replicas = [
        {
            "replica": s.replica, "swept": s.swept, "error": None if s.swept else s.why,
            "result": None if s.result is None else bench._result_json(s.result, s.run_id, s.profile),
        }
        for s in sweeps
    ]  # fmt: skip
    return {"fleet": group.name, "source": group.source, "exit_code": code, "replicas": replicas}


def _finish(sweeps: list[ReplicaSweep], code: int) -> None:
    """The one stderr line naming every replica not swept, as `control set --fleet` names those not set."""
    from ...control.fleet_ops import EXIT_NONE_CONFIRMED

    missed = [s for s in sweeps if not s.swept]
    if not missed:
        return
    word = {bench.EXIT_INTERRUPTED: "interrupted", EXIT_NONE_CONFIRMED: "failed"}.get(code, "partial")
    names = ", ".join(s.replica for s in missed)
    stderr.print(f"{word}: not swept: {names} (exit {code})", markup=False, soft_wrap=True)
