"""`spectower sim ...`: ``sim serve`` runs the SGLang simulator (``spectower.simulator.cli.serve``),
``sim router`` a simulated SGLang router in front of several (``spectower.simulator.router``).

``sim evaluate`` (policy scoring) is registered on this same ``app`` by ``spectower.console.cli``.
"""

from __future__ import annotations

import typer

from ...simulator.cli import serve
from ...simulator.router_cli import router

app = typer.Typer(no_args_is_help=True, help="The SGLang simulator and policy scoring.")
app.command("serve")(serve)
app.command("router")(router)
