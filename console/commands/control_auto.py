"""`spectower control auto` on one server or a fleet: what each replica's policy runner is built from
(its own client, policy and warm start) and the loop that runs them until SIGINT/SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from ..errors import fail
from .control_fleet import client_for

if TYPE_CHECKING:
    from ...control.knob_state import KnobState
    from ...control.runner import PolicyRunner, RunnerConfig
    from ...control.warm_start import Known, WarmStart
    from ...simulator.profile import Profile
    from ...storage import Database


def run_policies(
    runners: Sequence[PolicyRunner], interval_s: float, say_which: Callable[[], None], out: Console
) -> None:
    """Every runner until SIGINT/SIGTERM (each server keeps its last ceiling)."""
    from ...control.fleet_runner import run_all

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        out.print(f"{signal.Signals(signum).name}: stopping; the server keeps its current ceiling")
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    for runner in runners:
        out.print(
            f"policy {runner.policy.name} on {runner.server_url}, every {interval_s:g} s (Ctrl-C stops)"
        )
    say_which()  # before its first decision is audited there
    try:
        run_all(runners, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class AutoPlan:
    """What `control auto` runs on each replica (each gets its own policy, counters, client and lock)."""

    spec: str
    kind: str
    config: RunnerConfig
    sample_s: float | None
    warm_start: bool
    profiles: list[Known]
    gpu_metrics: str | None
    dwell_s: float | None = None  # learn: at least this long between ceiling changes (None: its default)


def runner_for(database: Database, server: str, plan: AutoPlan, say: Callable[[str], None]) -> PolicyRunner:
    """One replica's policy runner: its own client and policy (own counters), its warm start. Raises our
    errors (unreachable and unknown to the database, no plugin, a threshold past its max_running)."""
    from ...control.knob_state import KnobValueError, ServerUnreachableError, ensure_ready
    from ...control.policy import make_policy
    from ...control.runner import PolicyRunner

    client = client_for(server)
    try:
        state: KnobState | None = None
        try:
            state = client.read()
            ensure_ready(state)  # no plugin / not adaptive: refuse now rather than hold forever
            max_running = state.max_running_requests
        except ServerUnreachableError as exc:
            max_running = known_max_running(database, client.base_url)
            if max_running is None:
                raise
            say(f"warning: {exc}; max_running_requests={max_running} from the database")
        if max_running is None:
            raise KnobValueError(f"{client.base_url} does not report max_running_requests")
        spec = plan.spec
        if plan.kind == "threshold" and not 0 <= int(spec.split(":", 1)[1]) <= max_running:
            raise KnobValueError(f"--policy {spec}: N must be in 0..{max_running} (the server's "
                                 "max_running_requests)")  # fmt: skip
        options: dict[str, Any] = {}
        warm = None
        if plan.kind == "learn":
            options = {"max_flips_per_hour": plan.config.max_flips_per_hour}
            if plan.sample_s is not None:
                options["sample_s"] = plan.sample_s
            if plan.dwell_s is not None:
                options["min_dwell_s"] = plan.dwell_s
            warm = warm_start(database, state, max_running, plan.warm_start, plan.profiles, plan.gpu_metrics)
            options["initial_ceiling"] = warm.ceiling
            if warm.prefill_costs:
                options["prefill_costs"] = dict(warm.prefill_costs)
            if warm.history:
                options["history"] = list(warm.history)
        policy = make_policy(spec, max_running, **options)
        runner = PolicyRunner(database, client, policy, mode=plan.kind, config=plan.config, say=say)
        if warm is not None:
            runner.start_note = warm_start_line(runner, warm)
            say(runner.start_note)
        return runner
    except BaseException:
        client.close()
        raise


def warm_start_line(runner: PolicyRunner, warm: WarmStart) -> str:
    """The warm start's line, or that it goes unused: a learn that restores counters of its own from the last
    window (a restart of `control auto`) decides on them (``Learn.own_window``), and a line saying "learn
    starts at ceiling 64" above its first move to 48 misled (the H100, 2026-12-07)."""
    own_window = getattr(runner.policy, "own_window", None)
    own = own_window(runner.clock()) if own_window is not None and runner.restore() else None
    if own is None:
        return warm.line
    return (f"warm start: not used: learn restored counters of its own ({own}), which decide; without "
            f"them: {warm.line.removeprefix('warm start: ')}")  # fmt: skip


def warm_start(
    database: Database,
    state: KnobState | None,
    max_running: int,
    enabled: bool,
    profiles: list[Known],
    gpu_metrics: str | None,
) -> WarmStart:
    """What learn starts from (control/warm_start.py): this server's own stored counters, else the newest
    stored sweep or given measured profile of its stack, read here and handed to the policy as a number."""
    from ...collectors.bench.gpu_inventory import server_inventory
    from ...control import warm_start

    launch = "the launch's ceiling" + (f" ({state.spec_max_bs})" if state is not None else "")
    if not enabled:
        return warm_start.WarmStart(None, f"warm start: off (--no-warm-start); learn starts at {launch}")
    if state is None:
        why = "the server did not answer, so its stack is unknown"
        return warm_start.WarmStart(None, f"warm start: none: {why}; learn starts at {launch}")
    try:
        inventory = server_inventory(state.server_url, gpu_metrics)
    except (ConnectionError, ValueError) as exc:  # --gpu-metrics unreachable or not an exporter: one line
        fail(str(exc))
    stack = warm_start.Stack.of(state.info.info, inventory)
    return warm_start.find(database, stack, max_running, profiles, server_url=state.server_url,
                           current=state.spec_max_bs)  # fmt: skip


def profile_known(path: Path) -> Known:
    """A --warm-profile file, read as `sim serve` reads a profile. Its crossover is found as a sweep finds
    its own (``find_crossover``: the ratios fitted non-increasing first): a measured profile is as noisy as
    the sweep it came from, and the simulator's first sign change read 9.7 on the H200 early-crossover pair
    (a dip at 12, 1 round of 7 s) where the same sweep's crossover, and the best fixed ceiling, was 16."""
    from ...simulator.profile import load_profile

    try:
        profile = load_profile(path)
    except ValueError as exc:
        fail(f"--warm-profile: {exc}")
    return known_of(profile, str(path))


def known_of(profile: Profile, source: str) -> Known:
    """What a loaded profile says of its stack: its crossover, found as a sweep finds its own (see
    ``profile_known``); `sim evaluate --warm-start` starts learn from it as `control auto` would."""
    from ...collectors.bench.ratio import RatioPoint, find_crossover
    from ...control.warm_start import known_from_profile

    curves = zip(profile.concurrency, profile.spec_on_tok_s, profile.spec_off_tok_s, strict=True)
    cross = find_crossover([RatioPoint(c, on / off, on / off, on / off) for c, on, off in curves])
    return known_from_profile(profile.raw, source, cross.status, cross.value)


def known_max_running(database: Database, url: str) -> int | None:
    """What the collector last stored as the server's max_running_requests (None: never collected)."""
    from ...storage import queries

    try:
        return queries.server_by_url(database, url).max_running_requests
    except LookupError:
        return None


def policy_spec(policy_spec: str, mode: str | None, max_bs: int | None) -> str:
    """The policy as ``sim evaluate --policy`` names it; the old ``--mode X [--max-bs N]`` still works."""
    from ...control.policy import POLICY_SPECS, PolicyError, make_policy

    if mode is not None:
        if mode == "threshold":
            if max_bs is None:
                fail("--mode threshold needs --max-bs N (or use --policy threshold:N)")
            policy_spec = f"threshold:{max_bs}"
        elif max_bs is not None:
            fail(f"--max-bs applies to --mode threshold only (got --mode {mode})")
        else:
            policy_spec = mode
    elif max_bs is not None:
        fail("--max-bs goes with --mode threshold; use --policy threshold:N")
    spec = policy_spec.strip()
    try:
        make_policy(spec, 1 << 20)  # the spelling only; the bound on N is checked against the server
    except PolicyError:
        fail(f"--policy must be one of {', '.join(POLICY_SPECS)}, got {policy_spec!r}")
    return spec
