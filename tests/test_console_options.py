"""console/commands/options.py: one duration option for every duration flag, through the one parser
(control.runner.parse_duration): the same values accepted everywhere, one error line naming the flag."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from spectower.console.cli import app
from spectower.console.commands.options import duration_option
from typer.testing import CliRunner

runner = CliRunner()


def _probe() -> typer.Typer:
    probe = typer.Typer()

    @probe.command()
    def main(
        every: float = duration_option("5s", "--every", help="x"),
        until: float | None = duration_option(None, "--until", help="y"),
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


@pytest.mark.parametrize("bad", ["soon", "0s", "-1m", "inf"])
def test_a_bad_value_is_one_line_naming_the_flag(bad: str) -> None:
    result = runner.invoke(_probe(), ["--until", bad])
    assert result.exit_code == 2 and "--until must be a" in result.output and "Traceback" not in result.output


def _duration_flags(command: Any, path: str = "") -> set[str]:
    """Every option of the CLI whose metavar is DURATION, as "command path --flag" (typer ships its own
    click, so groups and options are recognised by what they have)."""
    if hasattr(command, "commands"):
        subs = command.commands.items()
        return {flag for name, sub in subs for flag in _duration_flags(sub, f"{path} {name}")}
    params = command.params
    return {f"{path.strip()} {p.opts[0]}" for p in params if getattr(p, "metavar", None) == "DURATION"}


def test_the_commands_duration_flags_use_it() -> None:
    flags = _duration_flags(typer.main.get_command(app))
    assert {
        "collect --interval", "collect --duration", "collect --timeout", "demo --duration",
        "bench load --period", "bench load --duration", "bench load --status-every",
        "bench sweep --duration-per-level",
    } <= flags  # fmt: skip
