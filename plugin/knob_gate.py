"""spectower's SGLang plugin: a live ceiling on the batch size at which EAGLE speculation drafts.

Runs INSIDE SGLang's processes (entry point group ``sglang.srt.plugins``; ``load_plugins()`` calls
``register()`` in the launcher and in every scheduler process), so it imports only the standard library,
sglang (lazily) and ``spectower.plugin.knob_contract`` (the wire contract, itself standard library only).
Works with SGLang 0.5.17 and 0.5.23: the five targets below exist with the
same signatures in both.

The knob (docs/design.md, "The speculation knob"): ``POST /set_internal_state {"server_args":
{"spectower_spec_max_bs": N}}``. A decode batch drafts only while its running batch size is <= N; N = 0 turns
speculation off; until the first set the ceiling is unlimited ("always on", reported as the scheduler's
``max_running_requests``, which docs/design.md defines as always on).

AROUND hooks through SGLang's ``HookRegistry``:

- ``Scheduler.set_internal_state``: a request carrying any ``spectower_*`` key is judged by the wire
  contract (``plugin/knob_contract.py``: the value, the writer class manual / policy / sweep, hold,
  release, force, request id). A malformed request, or a write the lock forbids (a policy while a manual or
  sweep lock holds; a sweep while a manual lock holds, unless forced), answers ``updated=False`` and
  changes nothing (recorded as ``last_refused``). Mixed requests are all-or-nothing, like SGLang's own
  handling of several keys: ours are validated and judged first, the remaining keys go to SGLang's own
  handler (0.5.17: the inline allow-list; 0.5.23: ``SchedulerInternalStateController``) and ours are applied
  only when SGLang accepted the rest. A request without our keys is SGLang's alone.
- ``Scheduler.get_internal_state``: adds ``"spectower": {"plugin_version", "spec_max_bs", "batches_drafted",
  "batches_gated", "refused", "gate", "explore"}`` plus the ownership block of the contract (``owner``,
  ``lock``, ``last_write``, ``last_refused``, ``policy_last``, ``server_time``, ``contract_version``);
  ``refused`` is null or why the gate is inactive; ``gate`` shows the hysteresis settings and whether it is
  closed now; ``explore`` the exploration share, its period, the batches explored and whether it is on now.
  ``batches_drafted`` counts decode batches that drafted (steps > 0), ``batches_gated`` those the gate
  forced to 0; a batch SGLang's own band put at 0 counts as neither. ``counters``: per batch-size bin
  (half octaves up to ``max_running_requests``: 1, 2, 3, 4, 6, 8, 12, ...), for drafted (steps > 0) and
  gated (0 steps, whoever chose it) decode steps, the steps, output tokens and step time
  (``plugin/engine_counters.py`` documents the shape and what the step time includes); counted on every
  decode batch, refused or not. ``hooks``: ``{"calls", "seconds"}``, the time spent in the plugin's own
  code of the two decode hooks below (SGLang's wrapped methods excluded), cumulative: against the
  counters' step time it is the plugin's share of a decode step, measured where it runs. ``gc``: the
  scheduler process's garbage collections, the long ones with their wall-clock time (``plugin/gc_pauses.py``).
  ``loop``: the scheduler's output stalls with where their time went (``plugin/loop_stalls.py``), when its
  hooks are on.
- ``AdaptiveSpeculativeParams.get_steps_for_batch``: a batch above the ceiling gets 0 steps; the batch's
  step starts here for the counters (``EngineCounters.begin``), an exploring part for its request mix
  (``PartMix.batch``, plugin/part_mix.py: the requests of the batch the loop turn chose).
- ``AdaptiveSpeculativeParams.on_verify_complete``: the verify result of a gated batch is dropped, so the
  forced zeros never drag down the band's acceptance EMA (nor count toward its update interval). Every
  verify result (gated or not) first ends its batch's step for the counters (``EngineCounters.end``),
  before SGLang applies it to its requests (a part's reading may be due: ``PartMix.result``).
- ``Scheduler.get_next_batch_to_run``: after SGLang chose the next batch, the requests it left in its waiting
  queue (``Gate.waiting``). SGLang forms a decode batch with requests waiting only when it cannot admit them
  (the KV pool or ``max_running_requests`` is full): an exploration window then waits, or ends its part
  (``plugin/explore.py``, WINDOW_WAIT_MAX_CYCLES).
  A prefill batch it chose (EXTEND or MIXED) marks the next decode step as one that carried a prefill's time
  (the counters' ``prefilled`` block, ``EngineCounters.note_prefill``).

Exploration: so the engine counters keep measuring both modes at every load the server sees, a small
deterministic share of each batch-size bin's batches runs the other mode than the gate says, in runs of
consecutive batches (``plugin/explore.py``: why runs, and which batches), drafted where the gate would gate
it and gated where it would draft (a batch the bands themselves put at 0 stays at 0: there is no step count
to draft it with). The share is ``knob_contract.DEFAULT_EXPLORE_SHARE`` (2 %) unless
``SPECTOWER_EXPLORE_SHARE`` says otherwise at launch or ``spectower_explore_share`` at runtime; 0 turns it
off. An explored batch leaves the hysteresis alone (neither the gate's state nor its dwell count moves,
and it is no gate switch); it is counted under ``explore`` and, where it changed the step count, under
``gate.explore_changes`` (each such change is an override-log entry too: about 2 x share / run length of
the batches). The first batch of a run and the first after it go to the counters as ``settling``.
While a lock holds the knob (an operator's manual set, e.g. ``control set --off --hold``, or a sweep's)
nothing is explored: an operator's off means off, and a sweep measures exactly the ceiling it set.

Hysteresis: every step switch appends an entry to SGLang's runtime-context override log
(``EAGLEWorkerV2.apply_runtime_state`` -> ``get_context().override("adaptive_spec.restore", ...)``), which is
never trimmed; a gate flipping on every batch as the load hovers at the ceiling would grow it without
bound. The gate therefore closes at once when a batch exceeds N (the contract's guarantee: no drafting above
N, but for the explored batches while no lock holds the knob), but opens again only when the batch size is
<= N - margin AND it has stayed closed for at least ``min_dwell`` batches. margin defaults to 10% of N (at
least 1, at most N - 1, so N = 1 can reopen); ``SPECTOWER_GATE_MARGIN`` (batches) and
``SPECTOWER_GATE_MIN_DWELL`` (batches, default 16) override it in the SGLang process's environment. Worst
case: 2 switches per min_dwell + 1 batches; a load hovering within the margin: no switch at all after the
first.

Refusal (loud warning, server unharmed): if any target is missing, ``register()`` registers nothing. If the
server runs without ``--speculative-adaptive`` (or SGLang fell back from adaptive, or a band of its adaptive
config lacks step 0, so a forced 0 would have no runtime state / CUDA graph), the hooks pass everything
through to SGLang, ``set_internal_state`` answers ``updated=False`` for our key, and ``get_internal_state``
says why under ``spectower.refused``. The server's arguments are not published yet when ``load_plugins()``
runs, so that verdict is reached (and logged, once) at the first ``/set_internal_state``, ``/server_info``
or decode batch. No hook ever raises into SGLang: an unexpected error inside our own
logic is logged once and the original method's answer is returned.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

# The wire contract (numeric keys, who may write, what /server_info reports) and the decode counters: standard
# library only, the modules of ours the plugin imports, shared with the simulator (and the client).
from . import engine_counters, gc_pauses, knob_contract, sglang_targets
from .explore import EXPLORE
from .gate import PLUGIN_VERSION, Gate

KNOB_KEY = knob_contract.KNOB_KEY

# What the five hooks wrap: (module, class, method).
TARGETS: dict[str, tuple[str, str, str]] = {
    "set_internal_state": ("sglang.srt.managers.scheduler", "Scheduler", "set_internal_state"),
    "get_internal_state": ("sglang.srt.managers.scheduler", "Scheduler", "get_internal_state"),
    "get_steps_for_batch": ("sglang.srt.speculative.adaptive_spec_params", "AdaptiveSpeculativeParams",
                            "get_steps_for_batch"),
    "on_verify_complete": ("sglang.srt.speculative.adaptive_spec_params", "AdaptiveSpeculativeParams",
                           "on_verify_complete"),
    "get_next_batch_to_run": ("sglang.srt.managers.scheduler", "Scheduler", "get_next_batch_to_run"),
}

# Reported as the ceiling before the first set when the scheduler's max_running_requests is unknown.
DEFAULT_UNLIMITED_REPORT = 1 << 20
logger = logging.getLogger(__name__)


class _PluginState:
    def __init__(self) -> None:
        self.gate = Gate.from_environment()
        self.owner = knob_contract.KnobOwner()
        # Per batch-size bin, drafted vs gated: steps, output tokens, step time (plugin/engine_counters.py).
        self.counters = engine_counters.EngineCounters()
        self.refusal: str | None = None
        self.refusal_checked = False
        self.next_batch: Any = None  # the loop turn's batch (get_next_batch_to_run): its steps come next
        self.warned: set[str] = set()
        # Time in the plugin's own code of the decode hooks (not SGLang's methods they wrap).
        self.hook_calls = 0
        self.hook_s = 0.0
        # This process's long garbage collections (plugin/gc_pauses.py): the state is made in the scheduler
        # process, on its first hook call, so they are the scheduler's.
        self.gc = gc_pauses.GcPauses.from_environment()
        gc_pauses.install(self.gc)

    def account(self, started: float) -> None:
        """One decode hook's own time, from ``started`` (``time.perf_counter()``) to now."""
        self.hook_s += time.perf_counter() - started
        self.hook_calls += 1


_STATE: _PluginState | None = None


def _state() -> _PluginState:
    global _STATE
    if _STATE is None:
        _STATE = _PluginState()
    return _STATE


def gate_state() -> Gate:
    """This process's gate (its ceiling, hysteresis state and counters)."""
    return _state().gate


def engine_counters_state() -> engine_counters.EngineCounters:
    """This process's decode counters (per batch-size bin, drafted vs gated)."""
    return _state().counters


def gc_seconds() -> float:
    """Seconds this process has spent in garbage collections so far (the loop-stall recorder's ``gc``)."""
    return _state().gc.seconds


def mark_drained(batch_size: int) -> None:
    """The gated-decode plugin holds the batch just decided at 0 steps (its drain, plugin/gated_decode.py):
    the counters count it gated, and its verify result, no drafts, is dropped before SGLang's acceptance EMA
    as a gated batch's is. Fed to the EMA, the drain's zeros drag it down until SGLang's own band puts the
    slot at 0 steps, which it probes back up from 5 batches later, only to meet the next drain: on the H200
    under Azure's replay at threshold:47 (2026-12-04) the bands flipped 0 -> 3 -> 0 every few batches of each
    drain (``ema_accept_len=0.00`` in SGLang's log), a runtime-state switch each time."""
    state = _state()
    state.counters.relabel_latest(batch_size, drafted=False)
    state.gate.mark_gated(batch_size)


def extend_skip_allowed() -> bool:
    """Whether the batch being decided may skip the draft model's extend (the gated-decode plugin asks,
    plugin/gated_decode.py): the ceiling gated it and nothing needs the draft warm now
    (``knob_contract.extend_skippable``: no exploration, or a window's cold part)."""
    state = _state()
    gate = state.gate
    return knob_contract.extend_skippable(gate.gated_by_ceiling_now, gate.explore_period, state.owner.owner(),
                                          gate.explorer.phase_now)  # fmt: skip


def prefill_skip_allowed(next_batch_size: int | None = None) -> bool:
    """Whether a prefill batch may skip the draft model's extend over its prompts (the gated-decode plugin
    asks, with the decode batch its requests join next: those still running and its own): a lock holds the
    knob at 0, or that batch will be gated and nothing needs the draft warm (``knob_contract.
    prefill_skippable``, ``Gate.next_batch_gated``). After either, the drain covers the requests it left
    holed once their batch drafts again."""
    state = _state()
    gate = state.gate
    return knob_contract.prefill_skippable(gate.ceiling, gate.next_batch_gated(next_batch_size),
                                           gate.explore_period, state.owner.owner(),
                                           gate.explorer.phase_now)  # fmt: skip


def _extend_skip() -> Any:
    """The gated-decode plugin's request-hole tracker in this process, or None where it does not skip."""
    gated_decode = sys.modules.get("spectower.plugin.gated_decode")
    if gated_decode is None or not gated_decode.hooked():
        return None
    return gated_decode.extend_skip()


def _holes_pending() -> bool:
    tracker = _extend_skip()
    return tracker is not None and tracker.holes_pending()


def _warn_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    state = _state()
    if key not in state.warned:
        state.warned.add(key)
        logger.warning(message, *args, exc_info=exc_info)


# --------------------------------------------------------------------------------------- refusal checks


def _bands_of(config_path: str | None) -> dict[str, Any]:
    """The adaptive config's batch-size bands, as SGLang loads them (its default when no file is given)."""
    if config_path:
        with open(config_path) as fh:
            cfg = json.load(fh)
    else:
        from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

        cfg = DEFAULT_ADAPTIVE_CONFIG
    return {key: entry for key, entry in cfg.items() if str(key).isdigit()}


def _launch_args(scheduler: object | None) -> tuple[dict[str, Any], Any]:
    """The resolved launch arguments as a dict, and the ServerArgs object (None when unknown).

    The resolved dict (``get_context().resolved_server_args_dict()``, what ``/server_info`` reports per rank)
    is authoritative: a field can be resolved without being set on the raw ServerArgs struct.
    """
    server_args = getattr(scheduler, "server_args", None) if scheduler is not None else None
    try:
        from sglang.srt.runtime_context import get_context

        resolved = dict(get_context().resolved_server_args_dict())
        if server_args is None:
            server_args = get_context().server_args
    except Exception:
        if server_args is None:
            raise
        resolved = {
            name: getattr(server_args, name, None)
            for name in ("speculative_adaptive", "speculative_adaptive_config", "speculative_algorithm")
        }
    return resolved, server_args


def refusal_reason(resolved: dict[str, Any], server_args: Any = None) -> str | None:
    """Why the gate cannot work on a server launched with these arguments, or None when it can."""
    if not resolved.get("speculative_adaptive"):
        return "the server was launched without --speculative-adaptive"
    if server_args is not None:
        try:
            from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason

            unsupported = adaptive_unsupported_reason(server_args)
        except Exception as exc:  # a version without it, or args it cannot read: judge by the bands alone
            logger.debug("spectower: adaptive_unsupported_reason unavailable: %s", exc)
            unsupported = None
        if unsupported:
            return f"SGLang disabled adaptive speculation: {unsupported}"
    try:
        bands = _bands_of(resolved.get("speculative_adaptive_config"))
    except (OSError, ValueError) as exc:
        return f"cannot read the adaptive config: {exc}"
    lacking = sorted(
        (key for key, entry in bands.items() if 0 not in (entry.get("candidate_steps") or [])), key=int
    )
    if lacking:
        which = f"band {lacking[0]} does" if len(lacking) == 1 else f"bands {', '.join(lacking)} do"
        return (
            f"adaptive {which} not allow step 0 (relaunch with the config that `spectower sglang-config` "
            "writes)"
        )
    return None


def _check_refusal(scheduler: object | None) -> str | None:
    state = _state()
    if not state.refusal_checked:
        try:
            state.refusal = refusal_reason(*_launch_args(scheduler))
        except Exception as exc:  # no published server args yet: decide at the next call
            logger.debug("spectower: cannot judge the server yet: %s", exc)
            return None
        state.refusal_checked = True
        if state.refusal:
            logger.warning("spectower plugin %s: REFUSING to gate speculation: %s. The server runs "
                           "unchanged; %s is answered updated=False.", PLUGIN_VERSION, state.refusal,
                           KNOB_KEY)  # fmt: skip
    return state.refusal


# ------------------------------------------------------------------------------------------------ hooks


def _set_internal_state_output(updated: bool) -> Any:
    from sglang.srt.managers.io_struct import SetInternalStateReqOutput

    return SetInternalStateReqOutput(updated=updated)


def _reported_ceiling(scheduler: Any) -> int:
    """The ceiling as /server_info reports it (unset = the scheduler's max_running_requests)."""
    ceiling = _state().gate.ceiling
    if ceiling is not None:
        return ceiling
    max_running = getattr(scheduler, "max_running_requests", None)
    return max_running if isinstance(max_running, int) else DEFAULT_UNLIMITED_REPORT


def hook_set_internal_state(
    original: Callable[..., Any], scheduler: Any, recv_req: Any, *args: Any, **kwargs: Any
) -> Any:
    requested = getattr(recv_req, "server_args", None)
    if not isinstance(requested, dict) or not knob_contract.ours(requested):
        return original(scheduler, recv_req, *args, **kwargs)
    state = _state()
    owner = state.owner
    request: knob_contract.KnobRequest | None = None
    problem: str | None = None
    try:
        request = knob_contract.parse_request(requested)
    except knob_contract.ContractError as exc:
        problem = str(exc)
    problem = problem or _check_refusal(scheduler)
    if problem or request is None:
        why = problem or "no spectower request"
        owner.refuse(requested, why)
        logger.warning("spectower: %s refused: %s", KNOB_KEY, why)
        return _set_internal_state_output(False)
    with owner.lock:  # check, SGLang's keys, apply: one step, so nothing interleaves
        now = time.time()
        locked_out = owner.check(request, now)
        if locked_out:
            owner.refuse(requested, locked_out, now)
            logger.warning("spectower: %s write refused: %s", request.writer_name, locked_out)
            return _set_internal_state_output(False)
        rest = {key: val for key, val in requested.items() if key not in knob_contract.ours(requested)}
        if rest:
            # SGLang's keys first, through its own handler; ours only if it accepted them (all-or-nothing).
            sub_request = copy.copy(recv_req)
            sub_request.server_args = rest
            answer = original(scheduler, sub_request, *args, **kwargs)
            if not getattr(answer, "updated", False):
                owner.refuse(requested, f"SGLang refused the other keys {sorted(rest)}", now)
                logger.warning("spectower: %s not applied: SGLang refused the other keys %s", KNOB_KEY,
                               sorted(rest))  # fmt: skip
                return answer
        else:
            answer = _set_internal_state_output(True)
        previous = _reported_ceiling(scheduler)
        if request.value is not None:
            state.gate.set_ceiling(request.value)
        if request.explore_share is not None:
            state.gate.set_explore_share(request.explore_share)
        owner.commit(request, previous, now)
    lock = owner.report(now)["lock"]
    logger.info(
        "spectower: %s %s -> %s by %s%s%s, lock %s (pid %d)", KNOB_KEY, previous,
        request.value if request.value is not None else previous, request.writer_name,
        " (release)" if request.release else "",
        f", exploration share {request.explore_share:g}" if request.explore_share is not None else "",
        lock, os.getpid(),
    )  # fmt: skip
    return answer


def hook_get_internal_state(original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any) -> Any:
    answer = original(scheduler, *args, **kwargs)
    try:
        state = getattr(answer, "internal_state", None)
        if isinstance(state, dict):
            refusal = _check_refusal(scheduler)
            max_running = getattr(scheduler, "max_running_requests", None)
            unlimited_as = max_running if isinstance(max_running, int) else DEFAULT_UNLIMITED_REPORT
            gate = _state().gate
            block = gate.report(unlimited_as)
            block.update(_state().owner.report())
            block["explore"] = gate.explore_report(block["owner"] == knob_contract.OWNER_FREE)
            block["refused"] = refusal
            block["override_log_len"] = _override_log_len()
            counters = _state().counters
            if isinstance(max_running, int):
                counters.ensure(max_running)  # bins up to max_running_requests from the first report on
            block["counters"] = counters.snapshot()
            block["hooks"] = {"calls": _state().hook_calls, "seconds": _state().hook_s}
            block["gc"] = _state().gc.report()
            tracker = _extend_skip()
            if tracker is not None:
                block["gated_decode"] = tracker.report()
            loop = sys.modules.get("spectower.plugin.loop_stalls")
            if loop is not None and loop.hooked():
                block["loop"] = loop.stalls().report()
            seq_lens = sys.modules.get("spectower.plugin.seq_lens_mirror")
            if seq_lens is not None and seq_lens.registered():
                block["seq_lens_mirror"] = seq_lens.mirror().report()
            state["spectower"] = block
    except Exception:
        logger.exception("spectower: could not add its state to get_internal_state")
    return answer


def _override_log_len() -> int | None:
    """Length of SGLang's runtime-context override log (every step switch appends to it), or None.

    Reported so an operator (and the GPU check) can watch the gate's cost on a running server.
    """
    try:
        from sglang.srt.runtime_context import get_context

        return len(get_context().overrides_log())
    except Exception:
        return None


def _account(started: float) -> None:
    """A decode hook's own time (never raises: it runs in SGLang's decode loop)."""
    try:
        _state().account(started)
    except Exception:
        _warn_once("hook-time", "spectower: hook time accounting error", exc_info=True)


def hook_get_steps_for_batch(
    original: Callable[..., Any], params: Any, batch_size: int, *args: Any, **kwargs: Any
) -> int:
    steps = original(params, batch_size, *args, **kwargs)
    started = time.perf_counter()
    final = steps
    settling = False
    try:
        state = _state()
        gate = state.gate
        if _check_refusal(None) is not None:
            pass
        elif 0 not in getattr(params, "candidate_steps", ()):
            # Without a step-0 runtime state, switching to 0 would raise inside SGLang: never force it.
            _warn_once("no-zero", "spectower: no adaptive band allows step 0; the gate stays open")
        else:
            # No exploration while a lock holds the knob: an operator's off means off, a sweep's ceiling
            # is measured as set.
            free = gate.explore_period > 0 and state.owner.owner() == knob_contract.OWNER_FREE
            gated = gate.decide(int(batch_size), may_explore=free, holes_pending=_holes_pending)
            gate.count(gated, steps, gate.plan.explore)
            if gate.plan.forget_holes:
                tracker = _extend_skip()
                if tracker is not None:
                    tracker.forget_holes()
            settling = gate.plan.settling
            final = 0 if gated else steps
    except Exception:
        _warn_once("steps-error", "spectower: gate error; drafting as SGLang decides", exc_info=True)
        final = steps
    try:  # before begin(): the launches pending are those before this batch
        plan, counters, batch = _state().gate.plan, _state().counters, _state().next_batch
        counters.part_mix.batch(plan.phase == EXPLORE, plan.explore, int(batch_size),
                                lambda: sglang_targets.batch_requests(batch), counters.launches_pending())
    except Exception:
        _warn_once("part-mix", "spectower: exploring part's request mix error (batch)", exc_info=True)
    try:
        _state().counters.begin(int(batch_size), final > 0, settling)
    except Exception:
        _warn_once("counters-begin", "spectower: decode counter error (begin)", exc_info=True)
    _account(started)
    return final


def hook_on_verify_complete(
    original: Callable[..., Any],
    params: Any,
    num_correct_drafts_per_req: list[int],
    batch_size: int = 0,
    *args: Any,
    **kwargs: Any,
) -> Any:
    started = time.perf_counter()
    try:  # SGLang applies this result to its requests after this hook: a part's reading may be due now
        _state().counters.part_mix.result()
    except Exception:
        _warn_once("part-mix-result", "spectower: exploring part's request mix error (result)", exc_info=True)
    try:
        _state().counters.end(int(batch_size), num_correct_drafts_per_req)
    except Exception:
        _warn_once("counters-end", "spectower: decode counter error (end)", exc_info=True)
    gated = False
    try:
        gate = _state().gate
        gated = gate.verify_was_gated(int(batch_size), list(num_correct_drafts_per_req))
        if gated:
            gate.verifies_dropped += 1
    except Exception:
        _warn_once("verify-error", "spectower: verify matching error; passing it to SGLang", exc_info=True)
    _account(started)
    if gated:
        return None  # no EMA update, no step change requested
    return original(params, num_correct_drafts_per_req, batch_size, *args, **kwargs)


def hook_get_next_batch_to_run(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    """``Scheduler.get_next_batch_to_run``: the requests SGLang left waiting once it chose the next batch
    (``Gate.waiting``; 0 where the queue cannot be read). Its decode batch is decided in the same loop
    turn. Nothing to run, nothing waiting and nothing running is an idle turn: the counters leave the gap
    it sits in out of what the next step's mode spent outside its span (``EngineCounters.note_idle``). A
    prefill batch (EXTEND or MIXED) puts its time in the next decode step's span or gap: the counters mark
    that step prefilled (``EngineCounters.note_prefill``). The batch itself is kept (a reference): an
    exploring part's first batch is the one the same turn decides next (``hook_get_steps_for_batch``)."""
    plan = original(scheduler, *args, **kwargs)
    try:
        state = _state()
        state.next_batch = sglang_targets.next_batch_plan(plan, scheduler)[0]
        has_batch, waiting, running = sglang_targets.loop_turn(plan, scheduler)
        state.gate.waiting = waiting
        if sglang_targets.idle_turn(has_batch, waiting, running):
            state.counters.note_idle()
    except Exception:
        _warn_once("waiting", "spectower: could not note the scheduler's waiting queue", exc_info=True)
    try:  # apart from the waiting queue's note: neither failure hides the other
        if sglang_targets.prefill_turn(plan, scheduler):
            _state().counters.note_prefill()
    except Exception:
        _warn_once("prefill", "spectower: could not tell whether the next batch is a prefill", exc_info=True)
    return plan


HOOKS: dict[str, Callable[..., Any]] = {
    "set_internal_state": hook_set_internal_state,
    "get_internal_state": hook_get_internal_state,
    "get_steps_for_batch": hook_get_steps_for_batch,
    "on_verify_complete": hook_on_verify_complete,
    "get_next_batch_to_run": hook_get_next_batch_to_run,
}


def missing_targets() -> list[str]:
    """The targets this SGLang lacks ("module.Class.method"), empty when all five exist."""
    missing = []
    for module_name, class_name, method in TARGETS.values():
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
            if not callable(getattr(cls, method)):
                raise AttributeError(method)
        except ImportError as exc:  # the module exists but failed to import: say why, not just "missing"
            missing.append(f"{module_name}.{class_name}.{method} (import failed: {exc})")
        except AttributeError:
            missing.append(f"{module_name}.{class_name}.{method}")
    return missing


def register() -> None:
    """The entry point SGLang's ``load_plugins()`` calls (zero arguments) in each of its processes."""
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError as exc:
        logger.warning("spectower plugin %s: NOT hooking: no SGLang HookRegistry (%s)", PLUGIN_VERSION, exc)
        return
    missing = missing_targets()
    if missing:
        logger.warning("spectower plugin %s: NOT hooking this SGLang (missing %s); the server runs unchanged "
                       "and %s is refused like any unknown key", PLUGIN_VERSION, ", ".join(missing),
                       KNOB_KEY)  # fmt: skip
        return
    _state()
    hooked = []
    for name, (module_name, class_name, method) in TARGETS.items():
        target = f"{module_name}.{class_name}.{method}"
        HookRegistry.register(target, HOOKS[name], HookType.AROUND)
        hooked.append(f"{class_name}.{method}")
    _announce(
        "spectower plugin %s: AROUND hooks on %s (pid %d)", PLUGIN_VERSION, ", ".join(hooked), os.getpid()
    )


def _announce(message: str, *args: object) -> None:
    """SGLang runs plugins before it configures logging, so an INFO record would be dropped (seen on a
    real 0.5.17 server): print the one line that says what was hooked when no handler would show it."""
    if logger.isEnabledFor(logging.INFO) and logging.getLogger().handlers:
        logger.info(message, *args)
    else:
        print(message % args, file=sys.stderr, flush=True)
