"""A fleet: the replicas one command acts on, named once.

Three ways to name them, one rule for all commands (`control get/set/release/auto/events`, the console):

- ``--server URL`` repeated;
- ``--fleet NAME``: a ``[fleets.NAME]`` table of the config file the database is found in
  (``storage.locate``: ``./spectower.toml``, then the user's ``config.toml``, then the running demo's
  marker), holding exactly one of ``servers = ["http://...", ...]``, ``router = "http://router:30000"``
  (SGLang's router, the SGLang Model Gateway: its worker list ``GET /workers``) or ``prometheus =
  "http://prometheus:9090"`` with ``job = "sglang"`` (the job's active scrape targets);
- both: the fleet's replicas and the extra ``--server``s, each once.

Discovery reads are bounded (a total deadline and a byte cap: ``collectors.http.request_bounded_sync``).
Every mistake is one ``FleetError`` line naming the flag or the config key.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..collectors.http import BodyTooLarge, check_http_url, request_bounded_sync
from ..storage.locate import FleetEntry, fleet_entries

DISCOVERY_TIMEOUT_S = 5.0
# A router's worker list or Prometheus' targets of a large fleet are well under this.
MAX_DISCOVERY_BYTES = 8 * 1024 * 1024
MAX_REPLICAS = 1024
# The SGLang Model Gateway's worker registry (docs/advanced_features/sgl_model_gateway.md, "Worker
# Management APIs"): {"workers": [{"id", "url", "model_id", "worker_type", "is_healthy", ...}], "total",
# "stats"}.
ROUTER_WORKERS_PATH = "/workers"
PROMETHEUS_TARGETS_PATH = "/api/v1/targets"
FLEET_KEYS = ("servers", "router", "prometheus", "job")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class FleetError(ValueError):
    """A fleet that cannot be resolved: the message is one line naming the flag or config key."""


@dataclass(frozen=True)
class Fleet:
    """The replicas (normalised base URLs, in order, each once) and where they came from."""

    name: str | None
    replicas: tuple[str, ...]
    source: str

    @property
    def label(self) -> str:
        return self.name or ("--server" if len(self.replicas) == 1 else f"{len(self.replicas)} servers")


def replica_hosts(url: str) -> tuple[str, ...]:
    """The host names a replica's GPUs are stored under: its URL's host, and for a loopback URL this
    machine's name too (NVML and dcgm-exporter name the host by its hostname)."""
    host = urlsplit(url).hostname or ""
    return (host, socket.gethostname()) if host in LOOPBACK else (host,)


def _normal(url: str, where: str) -> str:
    return check_http_url(str(url).strip().rstrip("/"), where, FleetError)


def resolve(
    servers: Sequence[str],
    fleet: str | None,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Fleet:
    """The replicas of ``--fleet`` (when given) followed by the ``--server``s, each once."""
    if fleet is None and not servers:
        raise FleetError("give --server URL (repeatable) or --fleet NAME")
    found: list[str] = []
    name, source = None, "--server"
    if fleet is not None:
        resolved = named(fleet, cwd=cwd, env=env, transport=transport)
        found.extend(resolved.replicas)
        name, source = resolved.name, resolved.source
    for url in servers:
        found.append(_normal(url, "--server"))
    unique = tuple(dict.fromkeys(found))
    if len(unique) > MAX_REPLICAS:
        raise FleetError(f"{source}: {len(unique)} replicas; at most {MAX_REPLICAS}")
    return Fleet(name, unique, source if not (fleet and servers) else f"{source} and --server")


def defined(*, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, FleetEntry]:
    """Every fleet the config files (and the running demo) define, by name; a bad file is a FleetError."""
    try:
        return fleet_entries(cwd=cwd, env=env)
    except ValueError as exc:
        raise FleetError(str(exc)) from None


def named(
    name: str,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Fleet:
    """``--fleet NAME`` resolved to its replicas (discovered now for a router or Prometheus fleet)."""
    text = (name or "").strip()
    if not text:
        raise FleetError("--fleet: empty; give the name of a [fleets.NAME] table in spectower.toml")
    entries = defined(cwd=cwd, env=env)
    entry = entries.get(text)
    if entry is None:
        known = ", ".join(sorted(entries)) or "none is defined"
        raise FleetError(
            f"--fleet {text}: no [fleets.{text}] in ./spectower.toml, the user config.toml or the running "
            f"demo (known: {known})"
        )
    return from_entry(entry, transport=transport)


def from_entry(entry: FleetEntry, *, transport: httpx.BaseTransport | None = None) -> Fleet:
    """A config table checked (exactly one of servers / router / prometheus+job) and resolved."""
    table, where = entry.table, entry.where
    if not isinstance(table, Mapping):
        raise FleetError(f"{where}: must be a table (servers = [...], router = URL or prometheus = URL)")
    unknown = sorted(set(table) - set(FLEET_KEYS))
    if unknown:
        raise FleetError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(FLEET_KEYS)})")
    given = [key for key in ("servers", "router", "prometheus") if key in table]
    if len(given) != 1:
        raise FleetError(f"{where}: give exactly one of servers, router, prometheus (got {given or 'none'})")
    kind = given[0]
    if kind == "servers":
        urls = table["servers"]
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) for u in urls):
            raise FleetError(f"{where}.servers: must be a non-empty list of URLs in quotes, got {urls!r}")
        replicas = [_normal(u, f"{where}.servers") for u in urls]
        return Fleet(entry.name, tuple(dict.fromkeys(replicas)), where)
    if "job" in table and kind != "prometheus":
        raise FleetError(f"{where}.job: only a prometheus fleet has a job")
    url = table[kind]
    if not isinstance(url, str):
        raise FleetError(f"{where}.{kind}: must be a URL in quotes, got {url!r}")
    base = _normal(url, f"{where}.{kind}")
    if kind == "router":
        replicas = router_workers(base, transport=transport)
        return Fleet(entry.name, tuple(replicas), f"{where} (router {base}{ROUTER_WORKERS_PATH})")
    job = table.get("job")
    if not isinstance(job, str) or not job.strip():
        raise FleetError(f'{where}.job: a prometheus fleet needs job = "NAME" (the scrape job of SGLang)')
    replicas = prometheus_targets(base, job.strip(), transport=transport)
    return Fleet(entry.name, tuple(replicas), f"{where} (Prometheus {base}, job {job.strip()})")


def _get_json(base: str, path: str, what: str, transport: httpx.BaseTransport | None) -> Any:
    """One bounded GET (deadline and byte cap) decoded as JSON; every failure one FleetError line."""
    try:
        with httpx.Client(base_url=base, transport=transport) as client:
            response = request_bounded_sync(client, "GET", path, timeout_s=DISCOVERY_TIMEOUT_S,
                                            max_bytes=MAX_DISCOVERY_BYTES)  # fmt: skip
    except BodyTooLarge:
        raise FleetError(f"{what}: {base}{path} answered more than {MAX_DISCOVERY_BYTES} bytes") from None
    except httpx.HTTPError as exc:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise FleetError(
            f"{what}: {base}{path} did not answer within {DISCOVERY_TIMEOUT_S:g} s ({why})"
        ) from None
    if response.status_code != 200:
        raise FleetError(f"{what}: {base}{path} answered HTTP {response.status_code}")
    try:
        return json.loads(response.content)
    except ValueError:
        raise FleetError(f"{what}: {base}{path} did not answer JSON") from None


def router_workers(base: str, *, transport: httpx.BaseTransport | None = None) -> list[str]:
    """The HTTP workers a router lists (``GET /workers``), each once, in its order. Prefill workers are
    left out (the knob lives on the decode side); a gRPC worker has no /server_info and is refused."""
    what = "router"
    doc = _get_json(base, ROUTER_WORKERS_PATH, what, transport)
    workers = doc.get("workers") if isinstance(doc, Mapping) else None
    if not isinstance(workers, list):
        raise FleetError(f'{what}: {base}{ROUTER_WORKERS_PATH} has no "workers" list: not SGLang\'s router?')
    urls: list[str] = []
    for index, worker in enumerate(workers):
        url = worker.get("url") if isinstance(worker, Mapping) else None
        if not isinstance(url, str):
            raise FleetError(f"{what}: {base}{ROUTER_WORKERS_PATH}: workers[{index}].url: missing")
        if worker.get("worker_type") == "prefill":
            continue
        if not url.startswith(("http://", "https://")):
            raise FleetError(f"{what}: workers[{index}].url {url!r}: only HTTP workers have the knob")
        urls.append(_normal(url, f"{what} workers[{index}].url"))
    if not urls:
        raise FleetError(f"{what}: {base}{ROUTER_WORKERS_PATH} lists no HTTP worker")
    return list(dict.fromkeys(urls))


def prometheus_targets(base: str, job: str, *, transport: httpx.BaseTransport | None = None) -> list[str]:
    """The base URLs of the active scrape targets of ``job`` (``/api/v1/targets``: each target's
    ``scrapeUrl`` without its path), each once, sorted: Prometheus lists its targets in no fixed order, and a
    fleet's replicas keep theirs from one command to the next."""
    what = "prometheus"
    doc = _get_json(base, f"{PROMETHEUS_TARGETS_PATH}?state=active", what, transport)
    data = doc.get("data") if isinstance(doc, Mapping) else None
    targets = data.get("activeTargets") if isinstance(data, Mapping) else None
    if not isinstance(targets, list):
        raise FleetError(
            f"{what}: {base}{PROMETHEUS_TARGETS_PATH} has no data.activeTargets: not Prometheus?"
        )
    urls: list[str] = []
    for target in targets:
        if not isinstance(target, Mapping):
            continue
        labels = target.get("labels")
        if not isinstance(labels, Mapping) or labels.get("job") != job:
            continue
        scrape = target.get("scrapeUrl")
        if not isinstance(scrape, str):
            continue
        parts = urlsplit(scrape)
        urls.append(_normal(f"{parts.scheme}://{parts.netloc}", f"{what} target of job {job}"))
    if not urls:
        raise FleetError(f"{what}: {base} has no active target of job {job!r}")
    return sorted(set(urls))
