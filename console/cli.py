"""The ``spectower`` command line: one sub-command group per folder of the product.

Each group lives in ``console/commands/<group>.py`` and keeps its heavy imports inside the command
functions, so ``spectower --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer
import typer.core
from rich.markup import escape
from spectower.console.commands import (
    bench,
    collect,
    control,
    demo,
    evaluate,
    load,
    sglang_config,
    sim,
    steps,
    store,
    ui,
)
from spectower.console.commands.options import EXAMPLES
from spectower.console.errors import EXIT_USER_ERROR, is_user_error, stderr

from spectower import __version__

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
        print(f"spectower {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="spectower",
    help="Observability and live control of SGLang servers running EAGLE-3 speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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
app.add_typer(bench.app, name="bench")
app.add_typer(control.app, name="control")
app.add_typer(store.export_app, name="export")
app.add_typer(store.import_app, name="import")
app.command("sglang-config")(sglang_config.sglang_config)
app.command("collect")(collect.collect)
app.command("console")(ui.console)
app.command("demo")(demo.demo)


def _attach_examples(root: typer.Typer) -> None:
    """End each main command's --help with a worked example (console/commands/options.EXAMPLES)."""
    groups = [("", root), *((g.name or "", g.typer_instance) for g in root.registered_groups)]
    for prefix, group in groups:
        if group is None:
            continue
        for command in group.registered_commands:
            name = f"{prefix} {command.name}".strip()
            if name in EXAMPLES:
                command.epilog = f"Example: {EXAMPLES[name]}"


_attach_examples(app)


def main() -> None:
    try:
        app(standalone_mode=True)
    except Exception as exc:  # last line of defence: a user error never shows a traceback
        if is_user_error(exc):
            # the message as text: a "[t_seconds, concurrency]" or a path's "[/b]" in it is not rich markup
            stderr.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            sys.exit(EXIT_USER_ERROR)
        raise


if __name__ == "__main__":
    main()
