"""How every spectower command line reports a user's mistake: one ``error: ...`` line on stderr, no
traceback, no usage box. The one implementation behind ``spectower`` (``console/cli.py``) and ``python -m
spectower.simulator`` (``simulator/__main__.py``): the simulator may not import the console, so this lives
at the namespace's root and imports nothing of ours (``tests/test_cli_errors.py``), so every folder may.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

stderr = Console(stderr=True, highlight=False)

EXIT_USER_ERROR = 2


def print_error(message: str) -> None:
    """Print ``error: message`` on stderr. The message is shown as is (a ``[postgres]`` or ``[N/A]`` in it
    is text, not rich markup) and never wrapped, so one message stays one line."""
    stderr.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)


def fail(message: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """A command's own refusal: print ``error: message`` on stderr (``print_error``), leave with ``code``."""
    print_error(message)
    raise typer.Exit(code)


def is_user_error(exc: BaseException) -> bool:
    """Errors our packages raise on purpose for bad input or an unreachable peer."""
    ours = type(exc).__module__.split(".")[0] == "spectower"
    user_error_types = ValueError | ConnectionError | LookupError | PermissionError
    return ours and isinstance(exc, user_error_types)


def usage_error_line(exc: typer.TyperException) -> str:
    """A parse error of typer's (unknown option, missing argument, a value its type refuses) as the one line
    the CLI says every mistake in: the command it reached and typer's own message, which names the option,
    e.g. ``spectower collect: No such option: --bogus (Possible options: --gpu)``."""
    message = " ".join(exc.format_message().split())
    # Most carry the command they reached; an option missing its value (typer's parser) and FileError do not.
    ctx = getattr(exc, "ctx", None)
    return f"{ctx.command_path}: {message}" if ctx is not None else message


def run_cli(app: typer.Typer, argv: Sequence[str] | None, prog_name: str) -> None:
    """Run ``app`` on ``argv`` (None: ``sys.argv[1:]``) as a console script: a parse error, a Ctrl-D at a
    prompt or a user error (``is_user_error``) ends the process with one line and its exit code, a
    ``typer.Exit`` with its code; any other exception comes through as raised."""
    try:
        # standalone_mode=False hands typer's parse errors to us instead of printing its usage box, and
        # returns the code of a typer.Exit (a command's own return value is None)
        code = app(args=argv, prog_name=prog_name, standalone_mode=False)
    except typer.TyperException as exc:  # typer's vendored click errors (UsageError, BadParameter, ...)
        # typer prints the help as it raises this one (for `spectower` or a group alone); nothing to add,
        # as typer's own handler does (rich_utils.rich_format_error skips it by this name too)
        if type(exc).__name__ != "NoArgsIsHelpError":
            print_error(usage_error_line(exc))
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
