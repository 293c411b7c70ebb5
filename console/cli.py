"""The ``spectower`` command line: one sub-command group per folder of the product.

Each group lives in ``console/commands/<group>.py`` and keeps its heavy imports inside the command
functions, so ``spectower --help`` stays fast.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence

import typer
import typer.core
from typer.models import CommandInfo

from spectower.cli_errors import run_cli

from .commands import (
    bench,
    collect,
    control,
    demo,
    evaluate,
    load,
    replay,
    sglang_config,
    sim,
    steps,
    store,
    ui,
)
from .commands.options import EXAMPLES

# What usage lines and error lines call the program, however it was started (`python -m ...` too).
PROG_NAME = "spectower"
_TYPE_WORDS = {"int": "INTEGER", "str": "TEXT", "float": "FLOAT", "Path": "PATH", "bool": "BOOLEAN"}


def _option_type_label(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """What the help shows beside an option: nothing for a flag (``--yes``, not ``--yes <bool>``), the
    metavar where one is given, else the type as command-line tools print it (``INTEGER``, ``TEXT``);
    typer's default shows Python type names (``<list[str]>``)."""
    if self.is_flag:
        return None
    if self.metavar:
        return self.metavar
    if self.type_descriptor.is_choice:
        return typer.core.TyperOption.display_type(self, ctx)
    bare = self.bare_type().removeprefix("list[").removesuffix("]")
    return _TYPE_WORDS.get(bare, bare.upper())


def _argument_type_label(self: typer.core.TyperArgument, ctx: typer.Context) -> str | None:
    """An argument's name column already says what it takes (``RUN_ID...``)."""
    return None


def _argument_usage(self: typer.core.TyperArgument) -> str:
    """``RUN_ID...`` on the usage line, ``[RUN_ID]...`` when optional, as click prints them (typer 0.29
    braces required ones: ``{RUN_ID}...``)."""
    name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
    return name + ("..." if self.nargs != 1 else "")


typer.core.TyperArgument._usage_display_name = _argument_usage  # type: ignore[method-assign]
typer.core.TyperOption.display_type_rich = _option_type_label  # type: ignore[method-assign,assignment]
typer.core.TyperArgument.display_type_rich = _argument_type_label  # type: ignore[method-assign,assignment]


def _show_version(value: bool) -> None:
    if value:
        from spectower import __version__  # importlib.metadata: only for --version

        print(f"spectower {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="spectower",
    help="Observability and live control of SGLang servers running EAGLE-3 speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Markdown joins a paragraph's lines and wraps them to the terminal: typer's "rich" mode keeps a
    # docstring's own line breaks, so at 80 columns `control auto --help` broke every paragraph twice
    # ("... each with its own" / "counters, ...").
    rich_markup_mode="markdown",
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Observability and live control of SGLang servers running EAGLE-3 speculative decoding."""


sim.app.command("evaluate")(evaluate.evaluate)
sim.app.command("steps")(steps.steps)
app.add_typer(sim.app, name="sim")
bench.app.command("load")(load.load)
bench.app.command("replay")(replay.replay)
app.add_typer(bench.app, name="bench")
app.add_typer(control.app, name="control")
app.add_typer(store.export_app, name="export")
app.add_typer(store.import_app, name="import")
app.command("sglang-config")(sglang_config.sglang_config)
app.command("collect")(collect.collect)
app.command("console")(ui.console)
app.command("demo")(demo.demo)


def _commands(root: typer.Typer) -> Iterator[tuple[str, CommandInfo]]:
    """Every registered command with its group's name ("" at the root), the root's first."""
    groups = [("", root), *((g.name or "", g.typer_instance) for g in root.registered_groups)]
    for prefix, group in groups:
        if group is not None:
            for command in group.registered_commands:
                yield prefix, command


def _attach_examples(root: typer.Typer) -> None:
    """End each main command's --help with a worked example (console/commands/options.EXAMPLES)."""
    for prefix, command in _commands(root):
        name = f"{prefix} {command.name}".strip()
        if name in EXAMPLES:
            command.epilog = f"Example: {EXAMPLES[name]}"


def _one_line_summaries(root: typer.Typer) -> None:
    """List each command in its group's --help by its docstring's first paragraph as one line that the
    panel wraps to the terminal: typer's rich help keeps a docstring's own line breaks there, so at 80
    columns a summary broke mid-sentence ("... gives per" / "batch size ...")."""
    for _, command in _commands(root):
        text = command.help or inspect.getdoc(command.callback) or ""
        if command.short_help is None and text:
            command.short_help = " ".join(text.split("\n\n")[0].split())


_attach_examples(app)
_one_line_summaries(app)


def main(argv: Sequence[str] | None = None) -> None:
    """The ``spectower`` console script (``argv``: the arguments, default ``sys.argv[1:]``). Every mistake is
    one ``error:`` line: ``spectower.cli_errors.run_cli``, shared with ``python -m spectower.simulator``."""
    run_cli(app, argv, PROG_NAME)


if __name__ == "__main__":
    main()
