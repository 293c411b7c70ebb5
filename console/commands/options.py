"""The words every command shares, so one concept has one flag name, one help text and one parser across
the CLI."""

from __future__ import annotations

from typing import Any

import typer

from ...control.durations import DurationError, allowed_range, parse_duration_within

SERVER_HELP = "SGLang server URL, e.g. http://127.0.0.1:30000"
DB_HELP = (
    'database URL or SQLite path; without it: $SPECTOWER_DB, else db = "..." in ./spectower.toml or '
    "~/.config/spectower/config.toml, else the running `spectower demo`'s database, else ./spectower.db"
)
AS_HELP = "operator name for the audit trail (default: $SPECTOWER_OPERATOR, else your login)"
POLICY_HELP = "learn | threshold:N | always-on | always-off | sglang-default"
# Load shapes: `bench load --pattern` (live) and `sim evaluate --trace` (virtual time) use the same names.
TRACE_HELP = (
    "a built-in trace (day, bursty, ramp, steps, jump) or a JSON file of (t_seconds, concurrency) pairs"
)
# Both load generators speak the same API unless told otherwise.
API_DEFAULT = "openai"
API_HELP = "openai (/v1/completions) or generate (/generate)"

# `--help` ends with a worked example for the commands operators reach for first (cli.py attaches them).
EXAMPLES = {
    "demo": "spectower demo --profile llama31-8b-1x-h100 --port 8600",
    "collect": "spectower collect --server http://127.0.0.1:30000 --gpu nvml --interval 1s "
    "--db /var/lib/spectower/spectower.db",
    "console": "spectower console --db /var/lib/spectower/spectower.db --port 8501",
    "control get": "spectower control get --server http://127.0.0.1:30000 --json",
    "control set": "spectower control set --server http://127.0.0.1:30000 --off --hold 2h "
    '--reason "TTFT over SLO"',
    "control release": 'spectower control release --server http://127.0.0.1:30000 --reason "incident over"',
    "control auto": "spectower control auto --server http://127.0.0.1:30000 --policy learn --interval 5s",
    "bench sweep": "spectower bench sweep --server http://127.0.0.1:30000 "
    "--plain-server http://127.0.0.1:30001 --concurrency 1,4,16,64 --save",
    "bench compare": "spectower bench compare 1 2",
    "bench load": "spectower bench load --server http://127.0.0.1:30000 --pattern day --period 10m",
    "bench replay": "spectower bench replay --server http://127.0.0.1:30000 "
    "--trace data/traces/AzureLLMInferenceTrace_conv_first30min.csv --speedup 3 --save",
    "export bench": "spectower export bench 1 2 --out runs.jsonl",
    "import bench-serving": "spectower import bench-serving results.jsonl",
    "sim evaluate": "spectower sim evaluate --profile glm5-nvfp4-8x-rtx-pro-6000 --trace day --policy learn",
    "sim steps": "spectower sim steps --profile h200-8b-pair-triton",
}


# Ids are stored as 64-bit integers on every backend: a larger one is a typo, said as one, not a driver error.
INT64_MAX = 2**63 - 1
MAX_EVENTS_SHOWN = 100_000


def chosen_database(db: str | None) -> tuple[str, str]:
    """The database URL and why it is the one (storage.database.database_choice); a bad ``--db``,
    ``$SPECTOWER_DB`` or config file is the one ``error:`` line."""
    from ...storage.database import database_choice
    from ..errors import fail

    try:
        return database_choice(db)
    except ValueError as exc:  # DatabaseURLError
        fail(str(exc))


def say_database(url: str, why: str) -> None:
    """The one line a command that writes prints on stderr once it has the database, e.g. ``database:
    spectower-demo/spectower.db (the running demo's)``, so an operator sees where the rows went (printed
    after the work, so a refusal of bad input stays its one ``error:`` line)."""
    from ...storage.database import shown_database
    from ..errors import stderr

    stderr.print(f"database: {shown_database(url)} ({why})", markup=False, soft_wrap=True, highlight=False)


def whole_number(text: object, name: str, lo: int, hi: int) -> int:
    """``text`` as an int within [lo, hi]; else the one ``error: ...`` line naming ``name``, exit 2."""
    from ..errors import fail

    try:
        value = int(str(text).strip())
    except ValueError:
        fail(f"{name}: {text!r} is not a whole number")
    if not lo <= value <= hi:
        fail(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


def run_id_argument(help: str) -> Any:
    """A saved benchmark run's id (1 .. the largest id a database holds)."""
    return typer.Argument(..., parser=lambda text: whole_number(text, "run id", 1, INT64_MAX),
                          metavar="RUN_ID", help=help)  # fmt: skip


def int_option(default: int | None, flag: str, *, lo: int, hi: int, help: str) -> Any:
    """A whole-number flag with its range checked by ``whole_number`` (one line, not a usage box)."""
    return typer.Option(default, flag, parser=lambda text: whole_number(text, flag, lo, hi), metavar="N",
                        help=help)  # fmt: skip


# Longest a run flag (`collect --duration`, `bench load --duration`, `demo --duration`) may ask for: past
# a month, leave the flag out and stop the run with a signal.
LONGEST_RUN_S = 30 * 86400.0


def duration_option(
    default: str | None, flag: str, *, minimum_s: float, maximum_s: float, help: str, **kwargs: Any
) -> Any:
    """A duration flag (``5s``, ``500ms``, ``2m``, ``1h`` or plain seconds ``2.5``) that reaches the command
    as seconds (a float, or None for a None default). Every duration flag of the CLI is one of these, so
    they all accept the same values through the one parser (control.durations' ``parse_duration``, which
    refuses what is no duration: 0, negative, inf, nan), and each says the range it takes,
    ``minimum_s`` to ``maximum_s``: what is a duration but no sane value for that flag (a 1 ms collection
    interval, a 1e30 s hold) is refused too. The help ends with the range; a bad value is the usual one
    ``error: ...`` line naming the flag, exit 2."""

    def parse(text: str) -> float:
        from ..errors import fail

        try:
            return parse_duration_within(str(text), flag, minimum_s, maximum_s)
        except DurationError as exc:
            fail(str(exc))

    help_with_range = f"{help.rstrip('.')}; {allowed_range(minimum_s, maximum_s)}"
    return typer.Option(default, flag, parser=parse, metavar="DURATION", help=help_with_range, **kwargs)


def run_duration_option(stops_by: str) -> Any:
    """``--duration`` of a command that runs until stopped (``collect``, ``bench load``, ``demo``): how long
    before it stops by itself, 1s up to ``LONGEST_RUN_S``; None (the default) runs until ``stops_by``."""
    return duration_option(
        None,
        "--duration",
        minimum_s=1.0,
        maximum_s=LONGEST_RUN_S,
        help=f"Stop after this long (default: {stops_by})",
    )


# What a request must meet to count in an open-loop run's goodput (`bench replay`, `sim evaluate --trace
# FILE.csv`): SGLang's usual chat targets. ITL is the request's mean time per output token after the first.
SLO_DEFAULT_TEXT = "ttft=2s,itl=100ms"
SLO_HELP = (
    "what a request must meet to count in goodput: ttft (time to first token), itl (its mean time per "
    "output token after the first), optionally e2e, each a duration (2s, 100ms)"
)
SLO_KEYS = ("ttft", "itl", "e2e")


def parse_slo(text: str, flag: str = "--slo") -> Any:
    """``ttft=2s,itl=100ms[,e2e=30s]`` as a ``storage.request_traces.Slo``; a key left out keeps the default
    (``SLO_DEFAULT_TEXT``). ``ValueError`` naming ``flag`` and the item for anything else."""
    from ...control.durations import DurationError, parse_duration
    from ...storage.request_traces import DEFAULT_SLO, Slo

    values: dict[str, float] = {}
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_KEYS:
            raise ValueError(f"{flag}: {item!r} is not one of {', '.join(k + '=DURATION' for k in SLO_KEYS)} "
                             f"(e.g. {SLO_DEFAULT_TEXT})")  # fmt: skip
        if key in values:
            raise ValueError(f"{flag}: {key} is given twice")
        try:
            values[key] = parse_duration(value, f"{flag} {key}")
        except DurationError as exc:
            raise ValueError(str(exc)) from None
    if not values:
        raise ValueError(f"{flag}: empty; give e.g. {SLO_DEFAULT_TEXT}")
    return Slo(ttft_s=values.get("ttft", DEFAULT_SLO.ttft_s), itl_s=values.get("itl", DEFAULT_SLO.itl_s),
               e2e_s=values.get("e2e", DEFAULT_SLO.e2e_s))  # fmt: skip


def slo_option() -> Any:
    """``--slo``: parsed by ``parse_slo`` (one ``error:`` line naming the item); help shows the default."""

    def parse(text: str) -> Any:
        from ..errors import fail

        try:
            return parse_slo(text)
        except ValueError as exc:
            fail(str(exc))

    return typer.Option(SLO_DEFAULT_TEXT, "--slo", parser=parse, metavar="SLO",
                        help=SLO_HELP)  # fmt: skip


OUTPUT_LEN_HELP = (
    "Output tokens per request (ignore_eos): N, or LOW-HIGH (mixed lengths: requests of one length finish "
    "in waves, which a window's count reads as steps; each request's length by its index, the same on "
    "every server and in every mode)."
)


def output_len_option(default: str, *, minimum: int) -> Any:
    """``--output-len N`` or ``LOW-HIGH`` as OutputLengths (collectors/bench/lengths.py), each at least
    ``minimum`` tokens; a bad value is one ``error:`` line naming the flag."""

    def parse(text: str) -> Any:
        from ...collectors.bench.lengths import parse_output_lengths
        from ..errors import fail

        try:
            return parse_output_lengths(text, minimum=minimum)
        except ValueError as exc:
            fail(str(exc))

    return typer.Option(default, "--output-len", parser=parse, metavar="N|LOW-HIGH", help=OUTPUT_LEN_HELP)


def positive_float(text: object, name: str, hi: float) -> float:
    """``text`` as a finite number > 0 and <= ``hi``; else the one ``error: ...`` line naming ``name``."""
    import math

    from ..errors import fail

    try:
        value = float(str(text).strip())
    except ValueError:
        fail(f"{name}: {text!r} is not a number")
    if not (math.isfinite(value) and 0 < value <= hi):
        fail(f"{name}: must be > 0 and at most {hi:g}, got {text}")
    return value


def factor_option(default: float | None, flag: str, *, hi: float, help: str) -> Any:
    """A positive factor flag (``--speedup``, ``--rate-scale``), checked by ``positive_float``."""
    return typer.Option(default, flag, parser=lambda text: positive_float(text, flag, hi), metavar="X",
                        help=help)  # fmt: skip
