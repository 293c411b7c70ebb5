"""`spectower sim evaluate`: score a speculation policy on a load trace, in virtual time."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import fail, strict_json
from .options import (
    POLICY_HELP,
    TRACE_HELP,
    duration_option,
    factor_option,
    slo_option,
)

out = Console(highlight=False)

PROFILE_HELP = "a shipped profile name or a profile JSON path"


def evaluate(
    profile: str = typer.Option(..., "--profile", help=PROFILE_HELP),
    trace: str = typer.Option(..., "--trace", help=f"{TRACE_HELP}, or a request trace .csv "
                              "(TIMESTAMP,ContextTokens,GeneratedTokens, Azure's format) replayed open loop"),
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
    speedup: float | None = factor_option(None, "--speedup", hi=1e6, help="a request trace (.csv) only: "
                                          "divide every arrival time by X"),
    rate_scale: float | None = factor_option(None, "--rate-scale", hi=100.0, help="a request trace (.csv) "
                                             "only: about X times its requests (seeded)"),
    slo: Any = slo_option(),
    warm_start: bool = typer.Option(False, "--warm-start", help="learn: start at the profile's crossover, as "
                                    "`control auto --warm-profile` starts from it (default: where the launch "
                                    "put the knob, always on)"),
    dwell_s: float | None = duration_option(
        None, "--dwell", minimum_s=10.0, maximum_s=3600.0, help="learn: at least this long between moves (5m)"
    ),
) -> None:
    """Score a policy on a load trace in virtual time: its tokens against the best achievable (per interval
    the better of the oracle, which explores too, and a server that never drafts), and against the oracle.

    A request trace (a .csv file in Azure's TIMESTAMP,ContextTokens,GeneratedTokens format) is replayed
    open-loop instead: every policy serves the same tokens once the queue drains, so it is scored by goodput
    (requests/s within --slo) and latency beside each baseline's."""
    from ...simulator.harness import evaluate as run_evaluation
    from ...simulator.profile import load_profile
    from ...simulator.traces import load_trace
    from ...storage.request_traces import is_request_trace_path

    if seed < 0:
        fail(f"--seed must be >= 0, got {seed}")
    prof = load_profile(profile)  # ProfileError / TraceError / PolicyError are ValueErrors: one clean line
    options = learn_options(prof, profile, policy, warm_start, dwell_s, as_json)
    if is_request_trace_path(trace):
        _evaluate_open_loop(prof, trace, policy, duration, seed, speedup or 1.0, rate_scale or 1.0, slo,
                            as_json, options)  # fmt: skip
        return
    if speedup is not None or rate_scale is not None:
        fail("--speedup / --rate-scale: only for a request trace (a .csv file), not a concurrency trace")
    load = load_trace(trace, duration_s=duration, seed=seed, max_running_requests=prof.max_running_requests)
    result = run_evaluation(prof, load, policy, duration_s=duration, seed=seed, policy_options=options)
    if as_json:
        print(strict_json(result, indent=None))
        return
    _print_table(result)


def learn_options(prof: Any, name: str, policy: str, warm_start: bool, dwell_s: float | None,
                   quiet: bool) -> dict[str, Any]:  # fmt: skip
    """Learn's start and dwell as `control auto` would run it on this stack; one line for another policy."""
    if policy.strip() != "learn":
        if warm_start or dwell_s is not None:
            fail(f"--warm-start / --dwell: only --policy learn takes them (got --policy {policy})")
        return {}
    options: dict[str, Any] = {} if dwell_s is None else {"min_dwell_s": dwell_s}
    if warm_start:
        from .control_auto import known_of

        known = known_of(prof, name)
        options["initial_ceiling"] = known.ceiling(prof.max_running_requests)
        if not quiet:
            out.print(f"warm start: {known.source}: crossover {known.crossover_text()}; learn starts at "
                      f"ceiling {options['initial_ceiling']}", soft_wrap=True)  # fmt: skip
    return options


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
        f"oracle {result['explore_cost']:.2%} of its tokens, the policy's server "
        f"{result['policy_explore_cost']:.2%} (learn quiets it where its estimate is decisive)"
    )


def _evaluate_open_loop(prof: Any, trace: str, policy: str, duration: float | None, seed: int, speedup: float,
                        rate_scale: float, slo: Any, as_json: bool, options: dict[str, Any]) -> None:
    from ...simulator.open_loop import evaluate_open_loop
    from ...storage.request_traces import load_request_trace

    requests = load_request_trace(trace)
    floor = prof.raw.get("measured") and prof.raw.get("prefill_source", "ttft_floor") == "ttft_floor"
    if floor and not as_json:
        out.print(f"note: {prof.name}'s prefill_tok_s ({prof.prefill_tok_s:,.0f}) is a sweep's TTFT floor, "
                  "not a prefill rate (no prefill probe): long prompts prefill far slower here than on the "
                  "server (a sweep with the probe measures it; data/profiles/h200-8b-early-pair-triton.json "
                  "carries constants fitted to a replay)", soft_wrap=True)  # fmt: skip
    result = evaluate_open_loop(prof, requests, policy, speedup=speedup, rate_scale=rate_scale,
                                duration_s=duration, seed=seed, slo=slo, policy_options=options)  # fmt: skip
    if as_json:
        print(strict_json(result, indent=None))
        return
    table = Table(title=f"{result['policy']} on {result['profile']}, request trace {result['trace']}, "
                        f"open loop ({result['arrivals']} requests, speedup {speedup:g}, "
                        f"rate scale {rate_scale:g}, seed {seed}); SLO {slo.text()}")  # fmt: skip
    for col in ("policy", "goodput req/s", "TTFT p99 s", "e2e p50 s", "e2e p99 s", "flips"):
        table.add_column(col, justify="left" if col == "policy" else "right")

    def row(name: str, b: dict[str, Any], bold: bool = False) -> None:
        cells = [f"{b['goodput_rps']:.3f}", *(f"{v:.2f}" if v is not None else "-" for v in
                 (b["ttft_p99_s"], b["e2e_p50_s"], b["e2e_p99_s"])), str(b["flips"])]  # fmt: skip
        table.add_row(*([f"[bold]{name}[/]", *(f"[bold]{c}[/]" for c in cells)] if bold else [name, *cells]))

    row(result["policy"], result, bold=True)
    for name, base in result["baselines"].items():
        if name != result["policy"]:
            row(name, base)
    out.print(table)
    out.print(
        f"tokens {result['tokens']:,.0f} (the same for every policy once the queue drains; "
        f"{result['undrained']} requests left at the drain limit); "
        f"drafting {result['spec_on_fraction']:.0%} of busy time; "
        f"goodput {result['goodput_vs_best_baseline'] or 0:.3f} of the best baseline's"
    )
    if prof.draft_prefill_share > 0:  # the plugin's prefill skip is modelled (plugin 0.4.10's rule)
        out.print(f"the draft's pass over the prompts skipped in {result['prefills_skipped']:,} of "
                  f"{result['prefill_batches']:,} prefill batches (draft_prefill_share "
                  f"{prof.draft_prefill_share:g})")  # fmt: skip
