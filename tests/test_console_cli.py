"""console/cli.py: the ``spectower`` console script. A parse error of typer's own (an unknown option, a
missing argument, a value its type refuses) is the one ``error: ...`` line every other mistake is, naming
the command and the option, exit 2: no usage box, no traceback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from spectower.console.cli import main

from spectower import __version__


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``spectower ARGV`` in this process, as the console script runs it: exit code, stdout, stderr."""
    try:
        main(argv)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["control", "set", "--max-bs", "abc"],
         "error: spectower control set: Invalid value for '--max-bs': Input should be a valid integer, "
         "unable to parse string as an integer"),
        (["collect", "--bogus"],
         "error: spectower collect: No such option: --bogus (Possible options: --gpu)"),
        (["bench", "compare"], "error: spectower bench compare: Missing argument 'RUN_ID'."),
        (["nosuch"], "error: spectower: No such command 'nosuch'."),
        # typer's parser raises this one without the command it was parsing: the line leaves it out
        (["control", "set", "--max-bs"], "error: Option '--max-bs' requires an argument."),
        (["export", "samples", "--kind", "engine"],
         "error: spectower export samples: Missing option '--out' / '-o'."),
    ],
)  # fmt: skip
def test_a_parse_error_is_one_line_naming_the_option(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(argv, capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [line]  # no "Usage: ...", no "Try '... --help'", no box


def test_a_commands_own_refusal_keeps_its_line_and_code(capsys: pytest.CaptureFixture[str]) -> None:
    # run ids go through options.whole_number, which leaves through typer.Exit(2): the code comes back
    code, out, err = _run(["bench", "compare", "1", "x"], capsys)
    assert (code, out, err.splitlines()) == (2, "", ["error: run id: 'x' is not a whole number"])


def test_help_and_version_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["--version"], capsys)
    assert (code, out.strip(), err) == (0, f"spectower {__version__}", "")
    code, out, err = _run(["control", "--help"], capsys)
    assert code == 0 and "Usage: spectower control" in out and "error:" not in out + err
    # a group alone prints its help (no_args_is_help) and nothing else, exit 2 as before
    code, out, err = _run(["control"], capsys)
    assert code == 2 and "Usage: spectower control" in out + err and "error:" not in out + err


@pytest.mark.parametrize("group", [[], ["control"], ["bench"], ["sim"], ["export"], ["import"]])
def test_a_groups_help_lists_each_command_by_its_summary_unbroken(group: list[str]) -> None:
    """Each command's docstring's first paragraph, as one line the panel wraps to the terminal: typer's rich
    help kept the docstring's own line breaks, so `control --help` at 80 columns read "... gives per" /
    "batch size ...". On a terminal wide enough, every summary sits on its command's row whole."""
    import inspect

    import typer.main
    from spectower.console.cli import app
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, [*group, "--help"], terminal_width=1000, env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    command = typer.main.get_command(app)
    for name in group:
        command = command.commands[name]  # type: ignore[attr-defined]  # a group's sub-commands
    commands = command.commands  # type: ignore[attr-defined]
    rows = [line.strip("│ ").split(None, 1) for line in result.output.splitlines() if line.startswith("│ ")]
    listed = {row[0]: row[1].strip() for row in rows if len(row) == 2}
    assert commands
    for name, sub in commands.items():
        summary = " ".join(inspect.cleandoc(sub.help or "").split("\n\n")[0].split())
        summary = summary.replace("`", "")  # Markdown help shows `code` as code, without the backticks
        assert listed.get(name) == summary, name


def _leaf_commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path, command
    for name, sub in (subcommands or {}).items():
        yield from _leaf_commands(sub, [*path, name])


def test_a_commands_help_runs_each_paragraph_on_unbroken() -> None:
    """Every paragraph of a command's docstring reads as one line on a terminal wide enough for it: typer's
    "rich" help kept the docstring's own line breaks, so at 80 columns `control auto --help` broke each of its
    paragraphs mid-sentence twice ("... each with its own" / "counters, ..."). Markdown help (backticks shown
    as code, without them) joins a paragraph's lines and wraps it to the terminal."""
    import inspect

    import typer.main
    from spectower.console.cli import app
    from typer.testing import CliRunner

    leaves = list(_leaf_commands(typer.main.get_command(app), []))
    assert len(leaves) > 15
    for path, command in leaves:
        result = CliRunner().invoke(app, [*path, "--help"], terminal_width=1000, env={"COLUMNS": "1000"})
        assert result.exit_code == 0, (path, result.output)
        lines = {" ".join(line.split()) for line in result.output.splitlines()}
        for paragraph in inspect.cleandoc(command.help or "").split("\n\n"):
            assert " ".join(paragraph.replace("`", "").split()) in lines, (path, paragraph)
