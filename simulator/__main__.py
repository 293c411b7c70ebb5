"""``python -m spectower.simulator [serve] --profile ...``: the same as ``spectower sim serve``."""

from __future__ import annotations

import sys

import typer

from spectower.cli_errors import run_cli

from .cli import serve


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "serve":
        args = args[1:]
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command.command()(serve)
    # a parse error (`--bogus`, a value its type refuses) is one `error:` line, as every spectower command's
    # (typer's standalone mode would print its usage box)
    run_cli(command, args, "python -m spectower.simulator")


if __name__ == "__main__":
    main()
