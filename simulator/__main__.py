"""``python -m simulator [serve] --profile ...``: the same as ``spectower sim serve``."""

from __future__ import annotations

import sys

import typer
from spectower.simulator.cli import serve


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "serve":
        args = args[1:]
    command = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    command.command()(serve)
    command(args=args, prog_name="python -m simulator", standalone_mode=True)


if __name__ == "__main__":
    main()
