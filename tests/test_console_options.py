"""console/commands/options.py: one duration option for every duration flag, through the one parser
(control.durations.parse_duration): the same values accepted everywhere, each flag's own range, one error line
naming the flag."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from spectower.console.cli import app
from spectower.console.commands.options import duration_option
from spectower.control.durations import duration_text, parse_duration
from typer.testing import CliRunner

runner = CliRunner()


def _probe() -> typer.Typer:
    probe = typer.Typer()

    @probe.command()
    def main(
        every: float = duration_option("5s", "--every", minimum_s=0.1, maximum_s=3600.0, help="x"),
        until: float | None = duration_option(None, "--until", minimum_s=0.1, maximum_s=7200.0, help="y"),
    ) -> None:
        print(repr(every), repr(until))

    return probe


@pytest.mark.parametrize(
    ("args", "printed"),
    [([], "5.0 None"), (["--every", "500ms", "--until", "2m"], "0.5 120.0"), (["--every", "2.5"], "2.5 None"),
     (["--until", "1h"], "5.0 3600.0")],
)  # fmt: skip
def test_values_reach_the_command_as_seconds(args: list[str], printed: str) -> None:
    result = runner.invoke(_probe(), args)
    assert result.exit_code == 0 and result.stdout.strip() == printed


@pytest.mark.parametrize("bad", ["soon", "0s", "-1m", "inf", "nan"])
def test_a_bad_value_is_one_line_naming_the_flag(bad: str) -> None:
    result = runner.invoke(_probe(), ["--until", bad])
    assert result.exit_code == 2 and "--until must be a" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "printed"), [(["--every", "100ms"], "0.1 None"), (["--every", "1h"], "3600.0 None")]
)
def test_the_range_includes_its_ends(args: list[str], printed: str) -> None:
    result = runner.invoke(_probe(), args)
    assert result.exit_code == 0 and result.stdout.strip() == printed


@pytest.mark.parametrize("outside", ["1ms", "99ms", "0.05", "61m", "1e30s", "1e30"])
def test_a_duration_outside_the_flags_range_is_one_line_saying_the_range(outside: str) -> None:
    result = runner.invoke(_probe(), ["--every", outside])
    assert result.exit_code == 2 and "Traceback" not in result.output
    said = f"error: --every must be between 100ms and 1h, got {outside!r}"
    assert result.output.strip().splitlines() == [said]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.1, "100ms"), (0.25, "250ms"), (1.0, "1s"), (90.0, "90s"), (600.0, "10m"), (3600.0, "1h"),
     (5400.0, "90m"), (30 * 86400.0, "720h")],
)  # fmt: skip
def test_a_range_is_said_as_the_flag_takes_it(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text and parse_duration(text) == pytest.approx(seconds)


def _duration_params(command: Any, path: str = "") -> dict[str, Any]:
    """Every option of the CLI whose metavar is DURATION, by "command path --flag" (typer ships its own
    click, so groups and options are recognised by what they have)."""
    if hasattr(command, "commands"):
        subs = command.commands.items()
        return {flag: p for name, sub in subs for flag, p in _duration_params(sub, f"{path} {name}").items()}
    params = command.params
    return {f"{path.strip()} {p.opts[0]}": p for p in params if getattr(p, "metavar", None) == "DURATION"}


DURATION_FLAGS = _duration_params(typer.main.get_command(app))


def test_the_commands_duration_flags_use_it() -> None:
    assert {
        "collect --interval", "collect --duration", "collect --timeout", "demo --duration",
        "bench load --period", "bench load --duration", "bench load --status-every",
        "bench sweep --duration-per-level", "control get --window", "control set --hold",
        "control auto --interval", "control auto --stale-after", "control auto --sample",
        "sim evaluate --duration",
    } <= set(DURATION_FLAGS)  # fmt: skip


@pytest.mark.parametrize("flag", sorted(DURATION_FLAGS))
def test_every_duration_flags_help_says_its_range(flag: str) -> None:
    assert re.search(r"; between \d+(ms|s|m|h) and \d+(ms|s|m|h)$", DURATION_FLAGS[flag].help), flag


@pytest.mark.parametrize("value", ["1e30s", "0", "nan"])
@pytest.mark.parametrize("flag", sorted(DURATION_FLAGS))
def test_every_duration_flag_refuses_what_no_run_should_take(flag: str, value: str) -> None:
    # the given options are parsed first, so the command's other required options do not matter here
    *command, option = flag.split()
    result = runner.invoke(app, [*command, option, value])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    [line] = result.output.strip().splitlines()
    why = "must be a positive duration" if value != "1e30s" else "must be between "
    assert line.startswith(f"error: {option} {why}") and line.endswith(f", got {value!r}"), line


@pytest.mark.parametrize(
    ("argv", "line"),
    [(["collect", "--interval", "1ms"], "error: --interval must be between 100ms and 1h, got '1ms'"),
     (["control", "auto", "--server", "http://127.0.0.1:9", "--interval", "500ms"],
      "error: --interval must be between 1s and 10m, got '500ms'"),
     (["control", "set", "--hold", "30"], "error: --hold must be between 1m and 720h, got '30'"),
     (["sim", "evaluate", "--duration", "59"], "error: --duration must be between 1m and 720h, got '59'")],
)  # fmt: skip
def test_an_interval_that_would_hammer_the_server_is_refused(argv: list[str], line: str) -> None:
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and result.output.strip().splitlines() == [line]


@pytest.mark.parametrize(
    ("flag", "stops_by"),
    [("collect --duration", "until SIGTERM/SIGINT"), ("bench load --duration", "Ctrl-C"),
     ("demo --duration", "Ctrl-C")],
)  # fmt: skip
def test_a_run_that_goes_until_stopped_takes_one_duration_flag(flag: str, stops_by: str) -> None:
    # run_duration_option: the same range and wording on every command that runs until stopped
    param = DURATION_FLAGS[flag]
    assert param.default is None
    assert param.help == f"Stop after this long (default: {stops_by}); between 1s and 720h"
