"""`spectower bench load`: walk a server's concurrency through a pattern (spectower.collectors.bench.walk)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer

from ...collectors.bench.lengths import OutputLengths
from ..errors import fail
from .options import (
    API_DEFAULT,
    API_HELP,
    LONGEST_RUN_S,
    SERVER_HELP,
    duration_option,
    output_len_option,
    run_duration_option,
)

# glibc raises its mmap threshold after the first large free, so asyncio's 256 KiB receive buffers then come
# from the heap and, shrunk to the bytes received, fragment it: at 40 streams the walker's RSS grew ~9 MiB/min
# while Python's own memory stayed flat. A fixed threshold keeps those buffers mmapped and returned on free.
MMAP_THRESHOLD_BYTES = 128 * 1024
M_MMAP_THRESHOLD = -3  # malloc.h


def _fix_mmap_threshold() -> None:
    import contextlib
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to tune
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def load(
    server: str = typer.Option(..., "--server", help=SERVER_HELP),
    pattern: str = typer.Option(
        "day",
        "--pattern",
        help="day, bursty, ramp, jump (a new level each second), hover:N (N-2..N+2) or steps:1,8,32.",
    ),
    period: float = duration_option(
        "300s",
        "--period",
        minimum_s=1.0,
        # as long as a run may be: a period past the run's end holds a steps pattern at its first levels
        maximum_s=LONGEST_RUN_S,
        help="Length of one day / ramp / steps cycle (300s, 5m).",
    ),
    duration: float | None = run_duration_option("Ctrl-C"),
    max_concurrency: int = typer.Option(
        48, "--max-concurrency", help="Clients at the day's evening peak / the ramp's top."
    ),
    output_len: OutputLengths = output_len_option("128", minimum=1),
    input_len: int = typer.Option(128, "--input-len", help="Prompt length (tokens / words)."),
    api: str = typer.Option(API_DEFAULT, "--api", help=API_HELP),
    seed: int = typer.Option(1, "--seed", help="Seed for the bursts, the hover walk and the prompts."),
    status_every: float = duration_option(
        "5s", "--status-every", minimum_s=1.0, maximum_s=86400.0, help="Print a status line this often."
    ),
) -> None:
    """Closed-loop streaming clients whose number follows a pattern over time (Ctrl-C stops).

    The API key of an --api-key server comes from SPECTOWER_API_KEY or the file named by
    SPECTOWER_API_KEY_FILE (never the command line)."""
    import asyncio
    import signal
    import sys

    from ...collectors.auth import load_api_key
    from ...collectors.bench.errors import BenchError
    from ...collectors.bench.walk import WalkConfig, final_line, parse_pattern, walk
    from ...collectors.http import ServerUnreachable

    period_s, duration_s, status_s = period, duration, status_every
    try:
        spec = parse_pattern(pattern, period_s, max_concurrency, seed)
        config = WalkConfig(
            server=server.rstrip("/"), pattern=spec, duration_s=duration_s, api=api,  # type: ignore[arg-type]
            output_len=output_len, input_len=input_len, seed=seed,
            status_every_s=status_s,
        ).validate()  # fmt: skip
        api_key = load_api_key()
    except ValueError as exc:
        fail(str(exc))

    _fix_mmap_threshold()

    def say(line: str) -> None:
        print(line, flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        say(
            f"bench load on {config.server}: pattern {spec.text}, period {period_s:g} s, "
            f"up to {spec.ceiling} "
            f"clients, {config.api} API, {config.output_lengths} output tokens (Ctrl-C stops)"
        )
        stats = await walk(config, api_key=api_key, stop=stop, on_status=say)
        say(final_line(stats, "signal" if stop.is_set() else "duration reached"))

    with _signals_given_back():
        try:
            asyncio.run(main())
        except (ServerUnreachable, BenchError) as exc:
            fail(str(exc))
    sys.stdout.flush()


@contextlib.contextmanager
def _signals_given_back() -> Iterator[None]:
    """asyncio's loop, closing, sets SIGINT and SIGTERM to Python's defaults, whatever they were before: put
    back what the process had, so a caller that runs the command in its own process (a test worker) keeps its
    own handlers, on the error path too (an unreachable server is found inside the loop)."""
    import signal

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set from outside Python, which it cannot put back
                signal.signal(sig, handler)
