"""The ``spectower`` command line: one sub-command group per folder of the product.

Each group lives in ``console/commands/<group>.py`` and keeps its heavy imports inside the command
functions, so ``spectower --help`` stays fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer
import typer.core
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
from spectower.console.errors import EXIT_USER_ERROR, is_user_error, print_error, stderr

from spectower import __version__

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


def _usage_error_line(exc: typer.TyperException) -> str:
    """A parse error of typer's (unknown option, missing argument, a value its type refuses) as the one line
    the CLI says every mistake in: the command it reached and typer's own message, which names the option,
    e.g. ``spectower collect: No such option: --bogus (Possible options: --gpu)``."""
    message = " ".join(exc.format_message().split())
    # Most carry the command they reached; an option missing its value (typer's parser) and FileError do not.
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path}: {message}" if ctx is not None else message


def main(argv: Sequence[str] | None = None) -> None:
    """The ``spectower`` console script (``argv``: the arguments, default ``sys.argv[1:]``)."""
    try:
        # standalone_mode=False hands typer's parse errors to us instead of printing its usage box, and
        # returns the code of a typer.Exit (a command's own return value is None)
        code = app(args=argv, prog_name=PROG_NAME, standalone_mode=False)
    except typer.TyperException as exc:  # typer's vendored click errors (UsageError, BadParameter, ...)
        # typer prints the help as it raises this one (for `spectower` or a group alone); nothing to add,
        # as typer's own handler does (rich_utils.rich_format_error skips it by this name too)
        if type(exc).__name__ != "NoArgsIsHelpError":
            print_error(_usage_error_line(exc))
        sys.exit(exc.exit_code)
    except typer.Abort:  # Ctrl-D at a prompt
        stderr.print("Aborted.", markup=False)
        sys.exit(1)
    except Exception as exc:  # last line of defence: a user error never shows a traceback
        if is_user_error(exc):
            print_error(str(exc))
            sys.exit(EXIT_USER_ERROR)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
