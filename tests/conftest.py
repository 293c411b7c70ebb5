"""Shared test fixtures: where the real captures live (tests/fixtures/), free ports."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from benchmarks.simulator_process import DEFAULT_PROFILE, SPECTOWER_CLI, SimulatorProcess, free_port

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
# Files real tools wrote (SGLang servers, its benchmark client, NVML), byte for byte: real/SOURCES.md.
REAL_DATA = FIXTURES / "real"


# Ports held bound (never listening) for the test process's life: see dead_url.
_DEAD_PORTS: list[socket.socket] = []


def dead_url() -> str:
    """A URL where nothing listens, and nothing will while the tests run: its port stays bound without
    listening, so a connect there is refused at once, and no server another test starts on a free port of
    its own can take it. (A port from ``free_port`` is free only when asked: under pytest-xdist another
    worker's simulator took one, and a fleet's "down" replica answered "wrong key".)"""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    _DEAD_PORTS.append(sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def collect_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``spectower collect ARGS...`` as a child process from the checkout (stdout and stderr together)."""
    argv = [*SPECTOWER_CLI, "collect", *args]
    env = {**os.environ, **(env or {})}
    out = subprocess.PIPE
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, text=True, env=env)


def cli_in_process(*args: str, module: str = "spectower.console.cli") -> subprocess.CompletedProcess[str]:
    """``spectower ARGS...`` run by the console script's own ``main`` in this process (``module``:
    whose ``main`` runs, ``spectower.simulator.__main__`` for ``python -m spectower.simulator ARGS``): its
    exit code and what it printed to stdout and stderr, as a subprocess would give them, without the ~0.6
    CPU-s of a new interpreter importing the stack (for tests not about the process boundary). An
    exception the command does not turn into an ``error:`` line comes through as raised, as a traceback
    would in a terminal."""
    import contextlib
    import importlib
    import io
    import signal

    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    argv = sys.argv
    sys.argv = [module, *args]  # a main that reads sys.argv (the simulator's) gets the arguments too
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args)) if module == "spectower.console.cli" else main()
            except SystemExit as stop:
                code = stop.code
    finally:
        sys.argv = argv
    changed = [sig.name for sig, handler in handlers.items() if signal.getsignal(sig) is not handler]
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    # a command that took over the process's signals (a sweep, a server) would take over the test worker's
    assert not changed, f"{module} {' '.join(args)} set {changed}: run it as a subprocess"
    if not isinstance(code, int):  # sys.exit("message") prints it and exits 1, as the interpreter does
        err.write(f"{code}\n" if code is not None else "")
        code = 1 if code is not None else 0
    return subprocess.CompletedProcess([module, *args], code, out.getvalue(), err.getvalue())


def db_rows(db_path: Path, sql: str) -> list[tuple[Any, ...]]:
    """The rows ``sql`` reads from a SQLite file a collector writes; none while it cannot be read yet (the
    file exists before its schema does)."""
    con = sqlite3.connect(db_path)
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


# ---- property tests: how many examples each draws --------------------------------------------------------
# The unit lane (tests/run --fast) loads this profile: a quarter of every property test's examples (the
# same first ones, where a test is derandomized), the whole suite all of them. Its examples were a tenth of
# the lane's CPU, on parsers and codecs that other tests also cover example by example.
UNIT_LANE_PROFILE = "unit-lane"
settings.register_profile(UNIT_LANE_PROFILE, max_examples=25)
FEWEST_EXAMPLES = 10


def examples(full: int) -> int:
    """``max_examples`` for a property test that draws ``full`` under hypothesis's default profile (100 a
    test): scaled with the loaded profile's (``--hypothesis-profile``), never below 10."""
    return max(FEWEST_EXAMPLES, full * settings.default.max_examples // 100)


@pytest.fixture
def real_data() -> Path:
    return REAL_DATA


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it too; here for runs without xdist (-p no:xdist) under --strict-markers
    config.addinivalue_line("markers", "xdist_group(name): one worker runs the group (--dist loadgroup)")
    # A config folder of this process's own (controller and each xdist worker alike), inherited by every
    # command a test starts: no test reads the user's ~/.config/spectower (a config.toml naming another
    # database), and a demo a test starts marks itself only there, so a command another worker runs
    # without --db never finds that demo (storage.locate).
    import tempfile

    _TEST_CONFIG_HOME.append(tempfile.mkdtemp(prefix="spectower-test-config-"))
    os.environ["XDG_CONFIG_HOME"] = _TEST_CONFIG_HOME[-1]
    _share_the_default_tls_context()


@pytest.hookimpl(trylast=True)  # after hypothesis's own: its files are not to be touched before then
def pytest_sessionstart(session: pytest.Session) -> None:
    config = session.config
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        import threading

        threading.Thread(target=_find_the_characters_text_draws_from, daemon=True).start()


def _find_the_characters_text_draws_from() -> None:
    """Hypothesis's ``text()`` draws from the characters UTF-8 can encode, which it finds by encoding
    every code point (2.9 CPU-s) once per checkout and keeps in .hypothesis/. On a fresh clone every
    xdist worker found them at its first property test, at once; the controller (idle meanwhile) finds
    them while the workers import the tests (seconds), and they read the file. Should a worker get there
    first, it finds them itself, as before."""
    try:
        from hypothesis.internal.charmap import intervals_from_codec
    except ImportError:  # moved in another hypothesis: each worker finds them itself
        return
    intervals_from_codec("utf-8")


def _share_the_default_tls_context() -> None:
    """httpx builds a new TLS context for each client it makes (each ``httpx.get``, ``KnobClient``, health
    poll), and building one loads certifi's CA bundle: 46 ms of CPU, on plain http too. A test process
    makes hundreds: 650 in the unit lane, 50 of its ~390 CPU-s. In this process the default verification
    context (``verify=True``, no client cert) is built once per trust setting and shared, as the console
    shares its own (console/actions.py ``_tls_context``): a context is meant to be shared, and what httpcore
    sets on it per connection (ALPN) is the same for every client here (none asks for HTTP/2)."""
    import functools
    import ssl

    from httpx._transports import default as transports

    build = transports.create_ssl_context

    @functools.cache
    def shared(trust_env: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
        return build(verify=True, cert=None, trust_env=trust_env)  # reads SSL_CERT_FILE/DIR itself

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        return shared(trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))

    transports.create_ssl_context = create_ssl_context


_TEST_CONFIG_HOME: list[str] = []


# A fixture shared this widely is built once per worker that runs one of its tests.
SHARED_SCOPES = ("class", "module", "package")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which writes each test's group into its node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under --dist loadgroup (tests/run) a test with no group is a unit of its own, so a module's shared
    fixture (a simulator, a filled database) was built on every worker that drew one of its tests: three
    times on three workers. The tests that use one, and have no group of their own, form their module's
    group: one worker runs them and builds it once (groups go out largest first, single tests fill in)."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or item.get_closest_marker("xdist_group") is not None:
            continue
        defs = info.name2fixturedefs
        if any(defs[name][-1].scope in SHARED_SCOPES for name in item.fixturenames if defs.get(name)):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Streamlit's AppTest scans every installed distribution's metadata for components at each new AppTest
    (about 0.2 CPU-s, 300+ metadata parses; the console's tests make a hundred): in a test process the
    installed set does not change, so the first scan's answer serves the rest."""
    if "streamlit.testing.v1" not in sys.modules:  # no AppTest among the collected modules
        return
    import functools

    from streamlit.components.v2 import manifest_scanner

    scan = functools.cache(manifest_scanner.scan_component_manifests)
    manifest_scanner.scan_component_manifests = lambda max_workers=None: list(scan(max_workers))


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for folder in _TEST_CONFIG_HOME:
        shutil.rmtree(folder, ignore_errors=True)


# ---- where the lane's CPU goes: SPECTOWER_TEST_CPU_LOG=FILE appends one line per test ------------------
CPU_LOG_ENV = "SPECTOWER_TEST_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With SPECTOWER_TEST_CPU_LOG set: the test's CPU seconds in this process (setup, call, teardown),
    its children's (the ones it waited for: a fixture's simulator counts where it is stopped), and its
    wall seconds, tab-separated after its node id, appended to that file (each worker appends its own
    lines whole). ``tests/cpu_report.py FILE`` sums them by test and by file."""
    path = os.environ.get(CPU_LOG_ENV)
    if not path:
        yield
        return
    import resource
    import time

    def children() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    cpu0, child0, wall0 = time.process_time(), children(), time.perf_counter()
    yield
    cpu, child, wall = time.process_time() - cpu0, children() - child0, time.perf_counter() - wall0
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{item.nodeid}\t{cpu:.3f}\t{child:.3f}\t{wall:.3f}\n")


# ---- the SGLang simulator as a real subprocess (benchmarks/simulator_process.py) -----------------------


@pytest.fixture
def simulator_factory() -> Iterator[Callable[..., SimulatorProcess]]:
    """A callable ``(profile="glm5-nvfp4-8x-rtx-pro-6000", admin_key=None, api_key=None, **flags)`` that
    starts a ``benchmarks.simulator_process.SimulatorProcess`` (healthy on return); all are stopped at
    teardown."""

    started: list[SimulatorProcess] = []

    def factory(
        profile: str = DEFAULT_PROFILE, admin_key: str | None = None, api_key: str | None = None, **flags: Any
    ) -> SimulatorProcess:
        sim = SimulatorProcess(profile=profile, admin_key=admin_key, api_key=api_key, **flags)
        started.append(sim)
        return sim

    yield factory
    for sim in started:
        sim.close()


# ---- PostgreSQL: one throwaway server per test session (= per pytest-xdist worker) ---------------------
import shutil  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402

REQUIRE_POSTGRES_ENV = "SPECTOWER_REQUIRE_POSTGRES"


def _postgres_unavailable(why: str) -> None:
    """Skip, saying why; under SPECTOWER_REQUIRE_POSTGRES=1 (tests/run installed it) FAIL instead."""
    if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
        pytest.fail(f"PostgreSQL required ({REQUIRE_POSTGRES_ENV}=1) but unavailable: {why}", pytrace=False)
    pytest.skip(why)


def _pg_bin(name: str) -> str | None:
    for d in ("/usr/local/bin", *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)):
        if os.path.exists(f"{d}/{name}"):
            return f"{d}/{name}"
    return shutil.which(name)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The base URL (``postgresql+psycopg://postgres@127.0.0.1:PORT``) of a PostgreSQL server: env
    ``SPECTOWER_TEST_POSTGRES_URL`` (its database part is dropped) or a throwaway server on a free
    127.0.0.1 port (runuser -u postgres when run as root), stopped at the end of the session."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _postgres_unavailable("psycopg not installed (pip install -e .[postgres])")
    if os.environ.get("SPECTOWER_TEST_POSTGRES_URL"):
        yield os.environ["SPECTOWER_TEST_POSTGRES_URL"].rsplit("/", 1)[0]
        return
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not (initdb and pg_ctl):
        _postgres_unavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    as_user: list[str] = []
    # not under pytest's tmp dir: that one is private to root, and the server runs as another user
    root = Path(tempfile.mkdtemp(prefix="spectower-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        if not shutil.which("runuser"):
            _postgres_unavailable("running as root without runuser: cannot start PostgreSQL")
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, port = root / "data", free_port()
    try:
        subprocess.run([*as_user, str(initdb), "-D", str(data), "-A", "trust", "-U", "postgres"],
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        subprocess.run([*as_user, str(pg_ctl), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w",
                        "start"], check=True, capture_output=True, timeout=120)  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        detail = getattr(exc, "stderr", b"") or b""
        _postgres_unavailable(f"could not start PostgreSQL: {exc} {detail.decode(errors='replace')[-300:]}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*as_user, str(pg_ctl), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


def new_postgres_database(postgres_server: str) -> str:
    """The URL of a fresh, empty database on the server ``postgres_server`` (its base URL) runs."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    base = postgres_server.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{postgres_server}/{name}"


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's PostgreSQL server (one per test)."""
    return new_postgres_database(postgres_server)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on both backends: an SQLite file in tmp_path, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'spectower.db'}"
    return str(request.getfixturevalue("postgres_url"))
