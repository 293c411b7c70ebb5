"""`spectower sim evaluate`: score a speculation policy on a load trace, in virtual time."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from spectower.console.commands.options import POLICY_HELP, TRACE_HELP, duration_option
from spectower.console.errors import fail, strict_json

out = Console(highlight=False)

PROFILE_HELP = "a shipped profile name or a profile JSON path"


def evaluate(
    profile: str = typer.Option(..., "--profile", help=PROFILE_HELP),
    trace: str = typer.Option(..., "--trace", help=TRACE_HELP),
    policy: str = typer.Option("learn", "--policy", help=POLICY_HELP),
    duration: float | None = duration_option(
        None,
        "--duration",
        minimum_s=60.0,
        maximum_s=30 * 86400.0,
        help="virtual time (600, 10m, 6h; default: 1h for a built-in trace, a file's own length)",
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the built-in trace and of the measurement noise"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of a table"),
) -> None:
    """Score a policy on a load trace in virtual time: its tokens against the best achievable (per interval
    the better of the oracle, which explores too, and a server that never drafts), and against the oracle."""
    from spectower.simulator.harness import evaluate as run_evaluation
    from spectower.simulator.profile import load_profile
    from spectower.simulator.traces import load_trace

    if seed < 0:
        fail(f"--seed must be >= 0, got {seed}")
    prof = load_profile(profile)  # ProfileError / TraceError / PolicyError are ValueErrors: one clean line
    load = load_trace(trace, duration_s=duration, seed=seed, max_running_requests=prof.max_running_requests)
    result = run_evaluation(prof, load, policy, duration_s=duration, seed=seed)
    if as_json:
        print(strict_json(result, indent=None))
        return
    _print_table(result)


def _print_table(result: dict[str, Any]) -> None:
    cross = result.get("crossover")
    cross_text = f"{cross:.1f} running requests" if cross is not None else "none in the profile's range"
    if cross is None and result.get("spec_pays_at_1") is not None:
        cross_text = "none (spec always pays)" if result["spec_pays_at_1"] else "none (spec never pays)"
    table = Table(
        title=f"{result['policy']} on {result['profile']}, trace {result['trace']} "
              f"({result['duration_s']:.0f} s virtual, seed {result['seed']}); crossover: {cross_text}",
    )
    table.add_column("policy")
    table.add_column("vs best", justify="right")
    table.add_column("vs oracle", justify="right")
    table.add_column("flips", justify="right")
    table.add_row(
        f"[bold]{result['policy']}[/]",
        f"[bold]{result['efficiency_vs_best']:.4f}[/]",
        f"{result['efficiency']:.4f}",
        str(result["flips"]),
    )
    for name, base in result["baselines"].items():
        if name != result["policy"]:
            table.add_row(
                name, f"{base['efficiency_vs_best']:.4f}", f"{base['efficiency']:.4f}", str(base["flips"])
            )
    out.print(table)
    out.print(
        f"baselines: the oracle (the better knob mode at every instant, exploring like every policy) "
        f"{result['oracle_tokens']:,.0f} tokens; never drafting (the knob at 0 locked, extend skipped, no "
        f"exploration) {result['never_draft_tokens']:,.0f}; best achievable (per interval the better of the "
        f"two) {result['best_tokens']:,.0f}",
        soft_wrap=True,
    )
    out.print(
        f"tokens {result['tokens']:,.0f}; "
        f"drafting {result['spec_on_fraction']:.0%} of busy time; final ceiling {result['final_max_bs']}; "
        f"{result['changes_per_hour']:.1f} ceiling changes per hour",
        soft_wrap=True,
    )
    out.print(
        f"exploration: {result['explore_share']:.1%} of each bin's batches run the other mode; it costs the "
        f"oracle {result['explore_cost']:.2%} of its tokens (both are charged it)"
    )
