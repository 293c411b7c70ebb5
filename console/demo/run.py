"""What `spectower demo` starts, in which order, with which settings, and how it stops.

Children (each `python -m ...` of this same interpreter, so the demo works from a plain checkout):

1. ``sim``, ``sim2``, ``sim3``: three simulated replicas (a fleet), the first with its dcgm-exporter style
   GPU metrics, the admin key from a 0600 file;
2. ``router``: a simulated SGLang router in front of them (its worker list, ``GET /workers``, names the fleet
   ``demo``: the demo's marker carries it, so ``control set --fleet demo`` finds the replicas);
3. ``collect``: engine samples of every replica every second and the simulated GPUs through the dcgm endpoint;
4. ``policy``: ``control auto --policy learn`` on every replica, one policy each (admin key through
   SPECTOWER_ADMIN_KEY_FILE, never argv);
5. ``load``: ``bench load --pattern day`` through the router, a compressed day with bursts;
6. ``console``: Streamlit, pre-authorised for a local operator (SPECTOWER_OPERATOR + the key file);
7. ``bench`` and ``sweep``: a fourth simulated server of the same stack, outside the fleet and its load, and
   one ``bench sweep --save`` of it (about two minutes), so the Benchmarks page has a run and the
   Speculation page a benchmark crossover beside the live one. It runs while the database holds fewer than
   ``DEMO_SWEEPS`` of the demo's runs: the second start gives two runs to compare. The sweep is the one
   child that ends by itself; a failed one is named with its log, and the demo goes on.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ...storage.locate import DemoMarker
from ..commands.load import MMAP_THRESHOLD_BYTES
from .ports import choose_port
from .supervisor import Child, Supervisor

if TYPE_CHECKING:
    from ...storage import Database

DEFAULT_PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
DEFAULT_DIR = Path("spectower-demo")
DEFAULT_DB_NAME = "spectower.db"
DEFAULT_CONSOLE_PORT = 8501
DEFAULT_SIM_PORT = 30000
DEFAULT_GPU_METRICS_PORT = 9400  # dcgm-exporter's port
DEFAULT_ROUTER_PORT = 30080
DEFAULT_BENCH_PORT = 30090
DEMO_REPLICAS = 3
DEMO_FLEET = "demo"
# The demo's tuning: a day compressed into 4 minutes (night, ramp, plateau above the glm5 crossover of
# about 15, evening peak, bursts); the policy decides every 5 s so its first exploration shows in ~30 s.
DEMO_PERIOD = "240s"
DEMO_MAX_CONCURRENCY = 40
DEMO_OUTPUT_LEN = 128
COLLECT_INTERVAL = "1s"
POLICY_INTERVAL = "5s"
# The demo's day is compressed into minutes: learn keeps a counters snapshot every 5 s (15 s on a real
# server), so its first decision comes within the first minute or so, not two.
POLICY_SAMPLE = "5s"
OPERATOR = "demo-operator"
# The demo's sweep: eight levels, one 5-s round a mode, mixed lengths (about 130 s on a 2-core machine).
DEMO_SWEEP_TAG = "demo sweep"
DEMO_SWEEPS = 2
DEMO_SWEEP_ARGS = ("--concurrency", "1,4,8,16,24,32,48,64", "--duration-per-level", "5s", "--rounds", "1",
                   "--output-len", "64-256", "--warmup", "1")  # fmt: skip
KEY_FILE_NAME = "admin_key"
PIDS_FILE_NAME = "pids.json"
START_TIMEOUT_S = 120.0  # Streamlit's first start on a loaded 2-core machine
POLL_S = 0.5
# Stop the traffic and the decisions first, then the readers/writers, the simulator last.
STOP_ORDER = (("load", "policy", "sweep"), ("collect", "console", "router"), ("sim", "sim2", "sim3", "bench"))
# Inherited variables that would override the demo's own key or database.
SCRUBBED_ENV = (
    "SPECTOWER_ADMIN_KEY", "SPECTOWER_ADMIN_KEY_FILE", "SPECTOWER_API_KEY", "SPECTOWER_API_KEY_FILE",
    "SPECTOWER_SIM_ADMIN_API_KEY", "SPECTOWER_SIM_API_KEY", "SPECTOWER_DB", "SPECTOWER_OPERATOR",
)  # fmt: skip

Say = Callable[[str], None]


class DemoError(RuntimeError):
    """A child died or never came up; the message names it and its log."""


@dataclass
class DemoConfig:
    profile: str = DEFAULT_PROFILE
    console_port: int = DEFAULT_CONSOLE_PORT
    db_path: Path = DEFAULT_DIR / DEFAULT_DB_NAME
    duration_s: float | None = None
    sim_port: int = DEFAULT_SIM_PORT
    gpu_metrics_port: int = DEFAULT_GPU_METRICS_PORT
    period: str = DEMO_PERIOD
    policy_interval: str = POLICY_INTERVAL
    router_port: int = DEFAULT_ROUTER_PORT
    bench_port: int = DEFAULT_BENCH_PORT
    replicas: int = DEMO_REPLICAS
    notes: list[str] = field(default_factory=list)
    # the ports of replicas 2..N, chosen by assign_ports (the first is sim_port)
    more_sim_ports: list[int] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.db_path.parent

    @property
    def sim_url(self) -> str:
        return f"http://127.0.0.1:{self.sim_port}"

    @property
    def sim_ports(self) -> list[int]:
        """Every replica's port: as assign_ports chose them, else the ones after ``sim_port``."""
        more = self.more_sim_ports or [self.sim_port + i for i in range(1, self.replicas)]
        return [self.sim_port, *more]

    @property
    def sim_urls(self) -> list[str]:
        """Every replica, the first (``sim_url``, with the GPU metrics) first."""
        return [f"http://127.0.0.1:{port}" for port in self.sim_ports]

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router_port}"

    @property
    def bench_url(self) -> str:
        """The simulated server the demo's sweep measures (not in the fleet, no load on it)."""
        return f"http://127.0.0.1:{self.bench_port}"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"

    @property
    def key_file(self) -> Path:
        return self.folder / KEY_FILE_NAME

    @property
    def pids_file(self) -> Path:
        return self.folder / PIDS_FILE_NAME

    def assign_ports(self) -> None:
        """Each port as asked if free, else the next free one (noted). PortError when none is near."""
        taken: set[int] = set()

        def choose(wanted: int, what: str) -> int:
            choice = choose_port(wanted, what, taken)
            taken.add(choice.port)
            if choice.note:
                self.notes.append(choice.note)
            return choice.port

        for attr, what in (("console_port", "console (--port)"), ("sim_port", "simulator"),
                           ("gpu_metrics_port", "simulator GPU metrics"),
                           ("router_port", "simulated router"),
                           ("bench_port", "simulator for the sweep")):  # fmt: skip
            setattr(self, attr, choose(getattr(self, attr), what))
        self.more_sim_ports = [
            choose(self.sim_port + i, f"simulator {i + 1}") for i in range(1, self.replicas)
        ]


def write_key_file(path: Path) -> None:
    """A fresh random admin key, readable by this user only (created 0600, never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secrets.token_urlsafe(32) + "\n")


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    # Long-running asyncio servers and clients: keep glibc's mmap threshold fixed so 256 KiB receive buffers
    # do not fragment the heap (see console/commands/load.py); the soak's memory figures depend on it.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(MMAP_THRESHOLD_BYTES))
    return env


def build_children(config: DemoConfig) -> list[Child]:
    db = str(config.db_path.resolve())
    folder = config.folder.resolve()
    py = sys.executable
    cli = [py, "-m", "spectower.console.cli"]
    base = _base_env()
    base["SPECTOWER_DB"] = db
    key_env = {**base, "SPECTOWER_ADMIN_KEY_FILE": str(config.key_file.resolve())}

    def child(name: str, argv: list[str], env: dict[str, str], ends: bool = False) -> Child:
        return Child(name=name, argv=argv, env=env, log_path=folder / f"{name}.log", ends=ends)

    servers = [arg for url in config.sim_urls for arg in ("--server", url)]
    key_file = str(config.key_file.resolve())

    def simulator(name: str, port: int, seed: int, *extra: str) -> Child:
        return child(name, [py, "-m", "spectower.simulator", "serve", "--profile", config.profile,
                            "--host", "127.0.0.1", "--port", str(port), "--seed", str(seed),
                            "--admin-api-key-file", key_file, *extra], base)  # fmt: skip

    sims = [
        simulator(name, port, index,
                  *(["--gpu-metrics-port", str(config.gpu_metrics_port)] if index == 0 else []))
        for index, (name, port) in enumerate(zip(sim_names(config), config.sim_ports, strict=True))
    ]  # fmt: skip
    return [
        *sims,
        child("router", [*cli, "sim", "router", "--port", str(config.router_port),
                         *[arg for url in config.sim_urls for arg in ("--worker-url", url)]], base),
        child("collect", [*cli, "collect", *servers,
                          "--gpu", f"dcgm=http://127.0.0.1:{config.gpu_metrics_port}/metrics",
                          "--interval", COLLECT_INTERVAL, "--db", db, "--log-level", "WARNING"], base),
        child("policy", [*cli, "control", "auto", *servers, "--policy", "learn",
                         "--interval", config.policy_interval, "--sample", POLICY_SAMPLE, "--db", db],
              key_env),
        child("load", [*cli, "bench", "load", "--server", config.router_url, "--pattern", "day",
                       "--period", config.period,
                       "--max-concurrency", str(DEMO_MAX_CONCURRENCY * config.replicas),
                       "--output-len", str(DEMO_OUTPUT_LEN)], base),
        child("console", [*cli, "console", "--db", db, "--port", str(config.console_port)],
              {**key_env, "SPECTOWER_OPERATOR": OPERATOR}),
        simulator("bench", config.bench_port, config.replicas),
        child("sweep", [*cli, "bench", "sweep", "--server", config.bench_url, *DEMO_SWEEP_ARGS,
                        "--tag", DEMO_SWEEP_TAG, "--save", "--db", db, "--as", OPERATOR], key_env, ends=True),
    ]  # fmt: skip


def sim_names(config: DemoConfig) -> list[str]:
    """The replicas' child names: ``sim``, ``sim2``, ``sim3``."""
    return ["sim"] + [f"sim{i + 1}" for i in range(1, config.replicas)]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_healthy(sup: Supervisor, child: Child, url: str, stop: threading.Event) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        _check_alive(sup)
        if _healthy(url):
            return
        time.sleep(POLL_S)
    if not stop.is_set():
        raise DemoError(
            f"{child.name} did not answer {url} within {START_TIMEOUT_S:g} s; see {child.log_path}"
        )


def _check_alive(sup: Supervisor) -> None:
    dead = sup.first_dead()
    if dead is not None:
        raise DemoError(
            f"{dead.name} exited early (code {dead.returncode()}); its log is {dead.log_path}:\n"
            f"{dead.log_tail()}"
        )


def what_to_look_at(config: DemoConfig) -> str:
    return "\n".join([
        f"spectower demo is up: open {config.console_url}",
        f"  simulated SGLang server {config.sim_url} (profile {config.profile}), GPU metrics on port "
        f"{config.gpu_metrics_port}, and {len(config.sim_urls) - 1} more replicas "
        f"({', '.join(config.sim_urls[1:])}), all behind the simulated SGLang router {config.router_url}",
        f"  database {config.db_path.resolve()}; logs and pids in {config.folder.resolve()}/",
        "What to look at:",
        "  Overview     throughput, running requests and the knob over time as the load walks through a day",
        f"               compressed into {config.period} (night, morning ramp, midday plateau, evening",
        "               peak, bursts).",
        "  Speculation  spec-on vs spec-off throughput by concurrency: the crossover (about 15 on glm5) and",
        "               where the knob sits.",
        "  Control      the policy's decisions (actor policy:learn, with its reasons) and the flip buttons:",
        f"               you are pre-authorised as operator '{OPERATOR}'; a manual flip pauses the policy",
        "               until you release it there.",
        "  GPUs         the simulated GPUs from the dcgm-exporter style endpoint.",
        f"  Benchmarks   a sweep of a fourth simulated server ({config.bench_url}, outside the fleet), saved",
        "               about two minutes after the start, on the first two starts only: start the demo",
        "               again for two runs to compare.",
        "  Fleet        every replica on one screen, and one flip for all of them (the fleet",
        f"               {DEMO_FLEET!r}: the router's worker list, {config.router_url}/workers).",
        "From a shell (the admin key is in the demo folder, never on a command line):",
        f"  SPECTOWER_ADMIN_KEY_FILE={config.key_file.resolve()} spectower control set --server "
        f"{config.sim_url} --off --reason 'demo' --yes   (without --db: this demo's database while it runs)",
        f"  SPECTOWER_ADMIN_KEY_FILE={config.key_file.resolve()} spectower control set --fleet {DEMO_FLEET} "
        "--off --reason 'demo incident'   (every replica at once)",
        "Ctrl-C stops everything; running the demo again reuses the database.",
    ])  # fmt: skip


def demo_sweeps(db: Database) -> int:
    """How many of the demo's own sweeps the database holds (tag ``DEMO_SWEEP_TAG``)."""
    from ...storage import records

    return sum(run.tag == DEMO_SWEEP_TAG for run in records.bench_runs(db))


def _sweep_ended(sweep: Child, config: DemoConfig) -> str:
    code = sweep.returncode()
    if code == 0:
        return ("the demo's benchmark sweep is saved: the Benchmarks page lists it, and the Speculation page "
                "draws its curve and crossover beside the live estimate")
    return (f"note: the demo's benchmark sweep of {config.bench_url} failed (code {code}); the rest of the "
            f"demo goes on. Its log is {sweep.log_path}:\n{sweep.log_tail()}")


def run_demo(config: DemoConfig, say: Say, cwd: Path) -> int:
    """Start everything, wait for Ctrl-C / SIGTERM / ``duration_s``, stop everything; the exit code."""
    from ...storage import open_database

    config.folder.mkdir(parents=True, exist_ok=True)
    config.assign_ports()
    for note in config.notes:
        say(f"note: {note}")
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    sup = Supervisor(cwd, config.pids_file)
    marker = DemoMarker()
    children = {c.name: c for c in build_children(config)}
    code = 0
    try:
        # Create (or migrate) the schema once here, so the children never race to create tables.
        try:
            with open_database(str(config.db_path.resolve())) as db:
                sweep = demo_sweeps(db) < DEMO_SWEEPS
        except Exception as exc:  # not a database, a newer schema, a read-only folder: say which file
            raise DemoError(f"--db {config.db_path}: cannot open it ({type(exc).__name__}: {exc})") from None
        write_key_file(config.key_file)
        # Commands run without --db while the demo runs use its database (storage.locate), so an
        # operator's audit lands where the console reads it.
        not_marked = marker.claim(config.db_path, {DEMO_FLEET: {"router": config.router_url}})
        if not_marked:
            say(f"note: {not_marked}; commands without --db will not find this demo's database")
        more = config.replicas - 1
        say(f"starting the simulator ({config.profile}) on {config.sim_url} and {more} more replicas ...")
        sims = [*sim_names(config), *(["bench"] if sweep else [])]
        for name in sims:
            sup.start(children[name])
        for name, url in zip(sims, [*config.sim_urls, *([config.bench_url] if sweep else [])], strict=True):
            _wait_healthy(sup, children[name], f"{url}/health", stop)
        sup.start(children["router"])
        _wait_healthy(sup, children["router"], f"{config.router_url}/readiness", stop)
        for name in ("collect", "policy", "load", "console", *(["sweep"] if sweep else [])):
            if not stop.is_set():
                sup.start(children[name])
        if not stop.is_set():
            say(f"starting the console on {config.console_url} ...")
        _wait_healthy(sup, children["console"], f"{config.console_url}/_stcore/health", stop)
        if not stop.is_set():
            say(what_to_look_at(config))
        deadline = None if config.duration_s is None else time.monotonic() + config.duration_s
        sweeping = children["sweep"] if sweep else None
        while not stop.is_set():
            _check_alive(sup)
            if sweeping is not None and not sweeping.running():
                say(_sweep_ended(sweeping, config))
                sup.retire(["bench"])  # its server has nothing more to do
                sweeping = None
            if deadline is not None and time.monotonic() >= deadline:
                say(f"--duration reached ({config.duration_s:g} s)")
                break
            stop.wait(POLL_S)
    except DemoError as exc:
        say(f"error: {exc}")
        code = 1
    finally:
        why = f" ({received[0]})" if received else ""
        say(f"stopping every child{why} ...")
        sup.stop_all(STOP_ORDER)
        marker.release()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        say(f"stopped; the database stays at {config.db_path.resolve()}")
    return code
