"""`spectower sim steps`: per batch-size bin, what each step count between 0 and the launch's would serve
in the simulator's step model (``spectower.simulator.step_model``), and whether a middle count beats both
ends."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from ..errors import strict_json
from .evaluate import PROFILE_HELP
from .options import TRACE_HELP

out = Console(highlight=False)


def steps(
    profile: str = typer.Option(..., "--profile", help=PROFILE_HELP),
    trace: str | None = typer.Option(
        None, "--trace", help=f"also: what the best count per batch size adds over this load; {TRACE_HELP}"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
) -> None:
    """Output tok/s at every step count per bin, in the model (a fixed share of the drafting cost, the rest
    linear in the step count; geometric acceptance)."""
    from ...simulator import step_model
    from ...simulator.profile import load_profile
    from ...simulator.traces import load_trace

    prof = load_profile(profile)  # a ProfileError is a ValueError: one clean line
    rows = step_model.step_table(prof)
    gain: float | None = None
    if trace is not None:  # a TraceError is a ValueError too
        gain = step_model.load_gain(prof, load_trace(trace, max_running_requests=prof.max_running_requests))
    if as_json:
        print(strict_json({
            "profile": prof.name,
            "launch_steps": prof.speculative_num_steps,
            "min_gain": step_model.MIN_GAIN,
            "bins": [{"batch_size": r.batch_size, "tok_s": list(r.tok_s), "alpha": r.alpha,
                      "best_steps": r.best_steps, "best_middle": r.best_middle, "middle_gain": r.middle_gain,
                      "middle_pays": r.middle_pays} for r in rows],
            "summary": step_model.summary(prof),
            "trace": trace,
            "best_count_gain": gain,
        }, indent=None))  # fmt: skip
        return
    if not rows:
        out.print(f"{prof.name}: a server without speculation: no step counts to compare")
        return
    top = prof.speculative_num_steps
    table = Table(title=f"{prof.name}: output tok/s at 0..{top} steps (the simulator's step model)")
    table.add_column("batch", justify="right")
    for k in range(prof.speculative_num_steps + 1):
        end = " off" if k == 0 else " on" if k == prof.speculative_num_steps else ""
        table.add_column(f"{k}{end}", justify="right")
    table.add_column("accept/pos", justify="right")
    table.add_column("middle vs end", justify="right")
    for r in rows:
        cells = [f"[bold]{x:,.0f}[/]" if k == r.best_steps else f"{x:,.0f}" for k, x in enumerate(r.tok_s)]
        vs_end = f"{r.middle_gain:+.1%} ({r.best_middle})" if r.best_middle is not None else "-"
        table.add_row(str(r.batch_size), *cells, f"{r.alpha:.2f}", vs_end)
    out.print(table)
    out.print(step_model.summary(prof))
    if gain is not None:
        out.print(
            f"Over the {trace} load, the best count per batch size serves {gain:+.1%} against the best "
            "of 0 and the launch's count (the knob's two ends), in the model."
        )
    share = step_model.DRAFT_FIXED_SHARE
    out.print(
        f"Model: any drafting step pays {share:.0%} of the measured on-off step time (fitted to 1- and "
        "2-step servers on the H200), each draft step an equal part of the rest; each draft position "
        "lands with one fitted probability. A GPU measures it: benchmarks/gpu/measure_off.sh's steps phase."
    )
