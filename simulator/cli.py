"""The ``serve`` command of the simulator, shared by ``spectower sim serve`` and
``python -m spectower.simulator``.

Keys come from files (``--admin-api-key-file``, ``--api-key-file``) or the environment
(``SPECTOWER_SIM_ADMIN_API_KEY``, ``SPECTOWER_SIM_API_KEY``), never from the command line.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from spectower.cli_errors import fail

from ..storage.files import MAX_KEY_FILE_BYTES, FileReadError, read_text_capped

if TYPE_CHECKING:
    from .profile import Profile


def _read_key(path: Path | None, env: str, what: str) -> str | None:
    if path is not None:
        try:
            key = read_text_capped(path, MAX_KEY_FILE_BYTES).strip()
        except FileReadError as exc:
            fail(f"{what} file {str(path)!r}: {exc}")
        if not key:
            fail(f"{what} file {str(path)!r} is empty")
        return key
    value = os.environ.get(env, "").strip()
    return value or None


def serve(
    profile: str = typer.Option(..., "--profile", help="A shipped profile name or a path to a profile JSON."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(30000, "--port", help="SGLang API port."),
    seed: int = typer.Option(0, "--seed", help="Seed for the noise and the generated text."),
    admin_api_key_file: Path | None = typer.Option(
        None, "--admin-api-key-file", help="File holding the admin key (or env SPECTOWER_SIM_ADMIN_API_KEY)."
    ),
    api_key_file: Path | None = typer.Option(
        None, "--api-key-file", help="File holding the API key (or env SPECTOWER_SIM_API_KEY)."
    ),
    gpu_metrics_port: int | None = typer.Option(
        None, "--gpu-metrics-port", help="Serve dcgm-exporter style GPU metrics on this port."
    ),
    decode_log_interval: int = typer.Option(
        40, "--decode-log-interval", help="Refresh the gauges every N decode steps (SGLang's default 40)."
    ),
    dp_size: int = typer.Option(1, "--dp-size", help="Data-parallel ranks (each a copy of the profile)."),
    max_running_requests: int | None = typer.Option(
        None, "--max-running-requests", help="Override the profile's max_running_requests."
    ),
    no_speculation: bool = typer.Option(
        False,
        "--no-speculation",
        help="Be the same server launched without speculation: the profile's plain curve "
        "(output_tok_s.plain, else spec_off), no speculative_algorithm, no spectower knob.",
    ),
    explore_share: float | None = typer.Option(
        None,
        "--explore-share",
        help="Share of each batch-size bin's decode batches that run the other mode than the ceiling says "
        "(0..0.2; 0 = none). Default: $SPECTOWER_EXPLORE_SHARE, else 0.02, as the SGLang plugin.",
    ),
    accept_kinds: str | None = typer.Option(
        None,
        "--accept-kinds",
        help="Requests that accept differently: ACCEPT:SHARE,... (e.g. 4:0.5,2:0.5, the GPU check's pair); a "
        "drafted step commits each request's own accept length. Default: the profile's for every request.",
    ),
) -> None:
    """Run a simulated SGLang server (EAGLE-3, with the spectower knob) driven by a performance profile."""
    from ..plugin import explore
    from .accept_kinds import parse_accept_kinds
    from .config import ENV_ADMIN_API_KEY, ENV_API_KEY, SimConfig
    loaded = _profile(profile, no_speculation)
    admin_key = _read_key(admin_api_key_file, ENV_ADMIN_API_KEY, "admin API key")
    api_key = _read_key(api_key_file, ENV_API_KEY, "API key")
    explore_share = _explore_share(explore_share)
    try:
        # the plugin's exploration windows, as SGLang's environment sets them for the plugin
        cycle = explore.cycle_of(os.environ.get(explore.EXPLORE_CYCLE_ENV))
        max_accept = loaded.speculative_num_steps + 1.0
        kinds = parse_accept_kinds(accept_kinds, max_accept) if accept_kinds is not None else ()
        config = SimConfig(
            profile=loaded,
            host=host,
            port=port,
            seed=seed,
            admin_api_key=admin_key,
            api_key=api_key,
            gpu_metrics_port=gpu_metrics_port,
            decode_log_interval=decode_log_interval,
            dp_size=dp_size,
            max_running_requests=max_running_requests,
            explore_share=explore_share,
            explore_cycle=cycle,
            accept_kinds=kinds,
        )
    except ValueError as exc:
        fail(str(exc))
    sockets = listening_sockets(host, {"--port": port, "--gpu-metrics-port": gpu_metrics_port})
    # imported once the arguments hold: the web stack is most of a start-up, and a refusal needs none of it
    from .server import run

    run(config, sockets)


def _profile(name_or_path: str, no_speculation: bool) -> Profile:
    """The --profile to serve (one error line when it cannot be read), as a plain server's with
    --no-speculation."""
    from .profile import ProfileError, load_profile

    try:
        loaded = load_profile(name_or_path)
    except ProfileError as exc:
        fail(str(exc))
    return loaded.without_speculation() if no_speculation else loaded


def _explore_share(given: float | None) -> float:
    """``--explore-share``, else $SPECTOWER_EXPLORE_SHARE, else the plugin's default; one error line naming
    where a bad value came from."""
    from ..plugin import knob_contract

    share_from = "--explore-share"
    if given is None:
        share_from = knob_contract.EXPLORE_ENV
        raw = os.environ.get(share_from, "").strip()
        try:
            given = float(raw) if raw else knob_contract.DEFAULT_EXPLORE_SHARE
        except ValueError:
            fail(f"{share_from} must be a number in 0..{knob_contract.MAX_EXPLORE_SHARE:g}, got {raw!r}")
    try:
        knob_contract.explore_share_of(given, share_from)
    except knob_contract.ContractError as exc:
        fail(str(exc))
    return given


def listening_sockets(host: str, ports: dict[str, int | None]) -> list[socket.socket]:
    """A socket bound and listening on each given port, in order; one error line for the first (by its option)
    that cannot be listened on (None: not served, no socket). Bound here and handed to the server, so no
    other process can take a port between this check and the server's bind (a suite's simulator once lost
    that race: a traceback)."""
    sockets: list[socket.socket] = []
    for what, value in ports.items():
        if value is not None:
            try:
                sockets.append(listening_socket(host, value))
            except OSError as exc:
                for sock in sockets:
                    sock.close()
                fail(f"{what}: cannot listen on {host}:{value} ({exc.strerror or exc})")
    return sockets


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening (port 0: one the system picks); OSError if it
    cannot."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(exc.errno, exc.strerror or str(exc)) from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)  # uvicorn's own backlog
    except OSError:
        sock.close()
        raise
    return sock


def cannot_bind(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on, or None (checked up front for a one-line error, where the
    server binds for itself: Streamlit)."""
    try:
        listening_socket(host, port).close()
    except OSError as exc:
        return str(exc.strerror or exc)
    return None
