"""`spectower export bench|samples --fleet NAME` (or several `--server`): what is stored for every replica
of a fleet, in one file, each row naming the replica it came from.

- ``export bench``: every run stored for each replica (``server_url`` on every CSV/Parquet row, and as
  JSONL every line's ``spectower_run.server_url``, even for a single run);
- ``export samples --kind engine|control``: the replicas' rows (``server_url`` on every row);
- ``export samples --kind gpu``: the GPUs of the replicas' hosts (``host`` on every row; replicas that share
  a host share its GPUs, so their rows cannot be told apart).

A replica with nothing stored adds no row and is named on stderr beside the others' counts; a stored row is
an answer, a missing one is news, not a failure of the export (exit 0). Nothing stored for any replica is
the one ``error:`` line, and nothing is written.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import stderr

if TYPE_CHECKING:
    from ...control.fleet import Fleet
    from ...storage import Database


def _say(line: str) -> None:
    stderr.print(line, markup=False, soft_wrap=True, highlight=False)


def export_runs(database: Database, group: Fleet, fmt: str, out: Path) -> None:
    """Every run stored for each replica of ``group``, in one file (run ids ascending per replica)."""
    from ...storage.export import bench_runs_of, export_bench

    by_replica = bench_runs_of(database, group.replicas)
    ids = [run_id for run_ids in by_replica.values() for run_id in run_ids]
    if not ids:
        raise LookupError(f"no benchmark run is stored for any replica of {group.label}; nothing written")
    points = export_bench(database, ids, fmt, out, name_each=True)
    for replica, run_ids in by_replica.items():
        _say(f"{replica}: " + (f"run(s) {', '.join(map(str, run_ids))}" if run_ids else "no run stored"))
    _say(f"wrote {points} point(s) of {len(ids)} run(s) of {len(group.replicas)} replica(s) to {out} ({fmt})")


def export_replica_samples(
    database: Database, group: Fleet, kind: str, fmt: str, out: Path, *, start: float | None,
    end: float | None,
) -> None:  # fmt: skip
    """The replicas' engine samples or control events, or their hosts' GPU samples, in one file."""
    from ...control.fleet import replica_hosts
    from ...storage.export import export_samples

    hosts = {replica: replica_hosts(replica) for replica in group.replicas}
    if not _any_stored(database, kind, group.replicas, hosts):
        raise LookupError(f"no {kind} row is stored for any replica of {group.label}; nothing written")
    tally: Counter[str] = Counter()
    if kind == "gpu":
        every_host = list(dict.fromkeys(h for names in hosts.values() for h in names))
        rows = export_samples(database, kind, fmt, out, hosts=every_host, start=start, end=end, tally=tally)
    else:
        rows = export_samples(database, kind, fmt, out, servers=group.replicas, start=start, end=end,
                              tally=tally)  # fmt: skip
    for replica in group.replicas:
        if kind == "gpu":
            found = {h: tally[h] for h in hosts[replica] if tally[h]}
            where = ", ".join(f"{n} of host {h}" for h, n in found.items())
            _say(f"{replica}: {where or 'no GPU row of host ' + hosts[replica][0]}")
        else:
            _say(f"{replica}: {tally[replica]} row(s)" if tally[replica] else f"{replica}: nothing stored")
    _say(f"wrote {rows} {kind} row(s) of {len(group.replicas)} replica(s) to {out} ({fmt})")


def _any_stored(
    database: Database, kind: str, replicas: tuple[str, ...], hosts: dict[str, tuple[str, ...]]
) -> bool:
    """Whether anything of ``kind`` is stored for any replica at all (checked before the file is written,
    so an export of nothing leaves no file)."""
    from ...control.audit import list_events
    from ...storage import queries

    if kind == "engine":
        return any(server.url.rstrip("/") in replicas for server in queries.servers(database))
    if kind == "gpu":
        wanted = {h for names in hosts.values() for h in names}
        return any(gpu.host in wanted for gpu in queries.gpus(database))
    return any(list_events(database, replica, limit=1) for replica in replicas)
