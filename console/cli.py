"""The ``spectower`` command line: one sub-command group per folder of the product.

Each group lives in ``console/commands/<group>.py`` and keeps its heavy imports inside the command
functions, so ``spectower --help`` stays fast.
"""

from __future__ import annotations

import sys

import typer

from console.commands import bench, collect, control, demo, evaluate, load, sglang_config, sim, store, ui
from console.errors import EXIT_USER_ERROR, is_user_error, stderr

app = typer.Typer(
    name="spectower",
    help="Observability and live control of SGLang servers running EAGLE-3 speculative decoding.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
sim.app.command("evaluate")(evaluate.evaluate)
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


def main() -> None:
    try:
        app(standalone_mode=True)
    except Exception as exc:  # last line of defence: a user error never shows a traceback
        if is_user_error(exc):
            stderr.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            sys.exit(EXIT_USER_ERROR)
        raise


if __name__ == "__main__":
    main()
