"""Per-batch-size decode counters, drafted vs gated: what the engine measures for the crossover estimator.

Standard library only: the SGLang plugin imports this module inside SGLang's scheduler processes, and the
simulator publishes the same counters from its model, so both report one shape.

What is counted, per batch-size bin and per mode:

- bins: half octaves, ``1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, ...`` (each power of two, then 1.5 x it;
  all of them batch sizes SGLang captures CUDA graphs for) up to the first one >= ``max_running_requests``.
  A batch of size ``b`` counts in the smallest bin >= ``b``, the way a CUDA graph pads a batch to its
  captured size; a batch larger than the last bin grows the bins (rare: only when ``max_running_requests``
  was unknown). Why not octaves: the learn policy sets the ceiling on bin boundaries, and a measured H200
  crossover (about 49-53 of 64) sat inside the octave 33-64, where neither boundary was within 2 % of the
  best choice (benchmarks/policy_bench.py); half octaves put a boundary within a third of any load.
- modes: ``drafted`` (the step ran with speculative steps > 0) and ``gated`` (it ran 0 steps: forced to 0
  by the spectower gate, or put at 0 by SGLang's own adaptive band; both cost a 1-token verify).
- ``steps``: decode steps; ``tokens``: output tokens (per request ``accepted drafts + 1``, summed over the
  batch; since plugin 0.4.13 cut to what the requests kept, plugin/kept_tokens.py: ``tokens_not_kept`` counts
  what it took out); ``time_s``: seconds of step time.

Step time in the plugin (``begin`` at ``AdaptiveSpeculativeParams.get_steps_for_batch``, before the batch
is launched; ``end`` at ``on_verify_complete``, once the verify result is on the CPU): a batch's time runs
from the later of its own ``begin`` and the previous batch's ``end`` to its own ``end``. Without overlap
scheduling that is launch -> result of the batch (draft + verify + the scheduler's CPU work for it). With
overlap scheduling the next batch is launched before the previous result is processed, so the span is
result -> result: the pipelined step time, which is what throughput sees. Idle time between batches (an
empty queue) is never counted. A prefill batch that runs while a decode batch is in flight (overlap) is
counted in that decode step's time. A verify result without a matching ``begin`` (same batch size, among
the last ``PENDING_MEMORY`` launches) is counted in ``unmatched`` and nowhere else; launches that never
got a verify are counted in ``dropped``. The simulator records its modelled step duration directly.

Published (cumulative since the process started; ``internal_states[i]["spectower"]["counters"]``)::

    {"version": 1, "started_at": <unix time the counters started>, "clock": "perf_counter" | "model",
     "bins": [1, 2, 3, 4, 6, ..., 64],
     "drafted": {"steps": [...], "tokens": [...], "time_s": [...]},
     "gated":   {"steps": [...], "tokens": [...], "time_s": [...]},
     "unmatched": 0, "dropped": 0,
     "settling": {"steps": 0, "tokens": 0, "time_s": 0.0}}

``settling`` (plugin 0.3.0 on; readers treat it as optional) counts the steps that switch into an
exploration run or out of it (plugin/explore.py): a switch's first step is slower than a steady one, and
exploration would otherwise count only such steps for the explored mode. They are in no bin.

``extend`` (plugin 0.4.6 on; optional, lists parallel to ``bins``) measures what the draft model's KV extend
costs a gated step on this server's own traffic: ``{"kept": {"steps", "tokens", "time_s"}, "skipped": {...}}``
counts the gated steps whose previous step was gated too (no mode switch in the step), by whether the extend
ran or the gated-decode plugin skipped it. Each is counted where it always was as well (its gated bin, or
``settling``): this block is a second view of those steps, not a third mode. A window's warm part and the
drain keep the extend, its cold part skips it, so the bins the ceiling gates hold both (control/kept_extend.py
turns them into the tax learn corrects a drafting bin's gated side by; on the H200 it was 7 % with short
prompts and 12-14 % with Azure's, so no constant serves).

``outside`` (plugin 0.4.13 on; optional, ``{"drafted": [...], "gated": [...]}`` parallel to ``bins``) counts
the seconds outside every step's span before a step of that bin and mode: the gap between the previous step's
``end`` and its own ``begin``, when the scheduler was not idle in between (``note_idle``). The overlap loop
puts a prefill inside the next step's span, yet on an H100 a drafting run's spans held 3 % less of its load's
seconds than always off's (data/gpu-runs/h100-8b-pair-triton-counters-vs-clients-2026-12-06): what a mode
costs outside its steps is part of what it serves, so every estimate adds it to the step time
(``with_outside``: learn's own snapshots, the collector's stored intervals as storage reads them, the control
command's estimate since the start). A settling step's gap is in no bin, as the step is.

``prefilled`` (plugin 0.4.14 on; optional, ``{"drafted": {"steps", "tokens", "time_s"}, "gated": {...}}``,
lists parallel to ``bins``) counts the steps of each mode and bin that carried a prefill: the first step
launched (its ``begin``) at or after the moment the scheduler chose a prefill batch, EXTEND or MIXED
(``note_prefill``, the plugin's get_next_batch_to_run hook). With overlap scheduling the prefill launched
while step D1 is in flight runs on the GPU before D2, so its time lands in D2's span; without overlap it
lands in the gap before D2, which ``outside`` gives to D2's mode: either way D2 is the prefilled step, and
several prefills before one step make it one prefilled step. A prefill noted before an idle turn had run out
before it (nothing was running), so it marks no step. Why: a drafting stream finishes, and so replaces
(prefills), requests faster per second than a gated one (on a GPU, 0.15 EXTEND batches per decode step
drafting at 16 against 0.06 gated), so its steps carry more prefill time each, which a comparison of the
modes must not read as decode time. Its ``time_s`` is the steps' span plus their gap (``outside``), so a
mode's pure, prefill-free step time in bin ``i`` is ``(time_s[i] + outside[i] - prefilled.time_s[i]) /
(steps[i] - prefilled.steps[i])`` (the same with ``with_outside``'s folded ``time_s``). A second view of
steps already counted in their bin, as ``extend`` is; settling steps are in no bin and not here. The
simulator marks the step its modelled prefill time lands in (``record(prefilled=True)``).

``slots`` (plugin 0.4.15 on; optional, ``{"drafted": [...], "gated": [...]}`` parallel to ``bins``) sums the
batch sizes (requests in the step) of the steps counted in each mode and bin: ``slots / steps`` is a cell's
mean batch and ``tokens / slots`` its output tokens per request-step, a drafted cell's accept per request.
Tokens per step cannot tell a larger batch from a higher accept: a bin covers a range of batch sizes (48:
33-48); on an H100 an exploring part's counted steps at 48 held always on's batch within 0.2 of a request and
accepted 0.6-1.3 % more (data/gpu-runs/h100-8b-pair-triton-request-mix-2026-12-06). Settling steps: no bin.

``mix`` (plugin 0.4.15 on; optional, ``{"parts", "requests", "accept_sum", "inverse_sum"}``, lists parallel to
``bins``) is the request mix of the windows' exploring parts (plugin/part_mix.py), per bin of a part's first
batch: the parts, their first batch's requests that verified during the part, and the sums of each one's
accept per verify ``a`` and of ``1 / a``. ``accept_sum / requests`` is the arithmetic mean A a part starts
from (a gated stream's batch), ``requests / inverse_sum`` the harmonic mean H a steady drafting stream's
requests accept per request-step: A / H is the request-mix lean, and a drafted cell's tokens at ``slots x H``
what it would have committed without it.

Every list is parallel to ``bins``. ``rates(before, after)`` turns two snapshots into per-bin deltas and
rates (output tok/s per mode), handling a restart (``started_at`` changed or a counter went down: the
later snapshot counts from zero) and bins that grew between the two.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# The shape's modes, fields and blocks, and their readers (plugin/counter_blocks.py); what this module does
# not use itself is re-exported (``X as X``): every reader of the counters imports them from here.
from .counter_blocks import (
    EXTEND_KINDS,
    FIELDS,
    MIX_FIELDS,
    MODES,
    PrefilledBlock,
    extend_block,
    mix_block,
    outside_block,
    prefilled_block,
    slots_block,
)
from .counter_blocks import ExtendBlock as ExtendBlock
from .counter_blocks import validate as validate
from .part_mix import PartMix

COUNTERS_VERSION = 1
# The optional blocks of one list per mode or field: (name, reader, keys), what rates() and sum_ranks() take
LIST_BLOCKS = (("outside", outside_block, MODES), ("slots", slots_block, MODES),
               ("mix", mix_block, MIX_FIELDS))  # fmt: skip
# Verify results arrive at most a batch or two after their launch (overlap scheduling): remember this many.
PENDING_MEMORY = 8
# Bins never grow past this batch size (2**16; SGLang's max_running_requests is far below).
MAX_BIN = 1 << 16


def next_bin(b: int) -> int:
    """The bin after ``b``: 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, ... (a power of two, then 1.5 x it)."""
    if b < 2:
        return b + 1
    return b * 3 // 2 if b & (b - 1) == 0 else b * 4 // 3


def counter_bins(max_running_requests: int | None) -> list[int]:
    """The bins up to the first one >= ``max_running_requests`` (at least ``[1]``)."""
    top = max(1, min(int(max_running_requests or 1), MAX_BIN))
    bins = [1]
    while bins[-1] < top:
        bins.append(next_bin(bins[-1]))
    return bins


_ALL_BINS = counter_bins(MAX_BIN)


def bin_of(batch_size: int) -> int:
    """The bin a batch of ``batch_size`` counts in: the smallest bin >= it (``MAX_BIN`` at most)."""
    return _ALL_BINS[min(bisect.bisect_left(_ALL_BINS, batch_size), len(_ALL_BINS) - 1)]


class EngineCounters:
    """Cumulative decode counters of one scheduler (one DP rank). Not thread-safe by itself: SGLang calls
    both hooks and ``get_internal_state`` on the scheduler thread; a snapshot copies each list."""

    def __init__(
        self,
        max_running_requests: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        clock_name: str = "perf_counter",
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.bins = counter_bins(max_running_requests)
        n = len(self.bins)
        self.steps = {mode: [0] * n for mode in MODES}
        self.tokens = {mode: [0] * n for mode in MODES}
        self.time_s = {mode: [0.0] * n for mode in MODES}
        self.unmatched = 0
        self.dropped = 0
        # Steps marked settling (the first of an exploration run and the first after it, plugin/explore.py):
        # counted here, in no bin, so that the bins hold steady-stream rates.
        self.settling: dict[str, float] = dict.fromkeys(FIELDS, 0)
        # Steady gated steps by whether the draft extend ran (module docstring): kind -> field -> per bin.
        self.extend: dict[str, dict[str, list[float]]] = {
            kind: {field: [0] * n for field in FIELDS} for kind in EXTEND_KINDS
        }
        # Seconds outside every span before a step, per mode and bin (module docstring).
        self.outside = {mode: [0.0] * n for mode in MODES}
        # The steps that carried a prefill, per mode, field and bin (module docstring): a second view.
        self.prefilled: PrefilledBlock = {mode: {field: [0] * n for field in FIELDS} for mode in MODES}
        # The batch sizes of the counted steps, per mode and bin (module docstring): their requests.
        self.slots = {mode: [0] * n for mode in MODES}
        # The exploring parts' request mix (plugin/part_mix.py): the hooks (or the simulator) drive it.
        self.part_mix = PartMix()
        self._idle = False  # the scheduler idled since the last step's end: the next gap is not counted
        # When the scheduler chose the first prefill no step has carried yet (``note_prefill``); None: none.
        self._prefill_at: float | None = None
        # Steps recorded so far, and where the last one's tokens went (its mode or "settling", its bin, its
        # tokens, its extend kind, whether it was prefilled): ``keep_tokens`` counts it at what its requests
        # kept (plugin/kept_tokens.py)
        self.recorded = 0
        self._last_cell: tuple[str, int, int, str | None, bool] | None = None
        self.tokens_not_kept = 0
        self.started_at = wall()
        self.clock = clock
        self.clock_name = clock_name
        # pending launches: (batch size, drafted, started, settling, extend kept: None where not told)
        self._pending: deque[tuple[int, bool, float, bool, bool | None]] = deque()
        self._last_end: float | None = None
        self._last_drafted: bool | None = None  # the mode of the last step counted (None: none yet)

    # ---- bins -------------------------------------------------------------------------------------------
    def ensure(self, batch_size: int) -> None:
        """Grow the bins so that ``batch_size`` has one (up to ``MAX_BIN``)."""
        while self.bins[-1] < batch_size and self.bins[-1] < MAX_BIN:
            self.bins.append(next_bin(self.bins[-1]))
            for mode in MODES:
                self.steps[mode].append(0)
                self.tokens[mode].append(0)
                self.time_s[mode].append(0.0)
            for block in self.extend.values():
                for values in block.values():
                    values.append(0)
            for mode in MODES:
                self.outside[mode].append(0.0)
                self.slots[mode].append(0)
            for block in self.prefilled.values():
                for values in block.values():
                    values.append(0)

    def bin_index(self, batch_size: int) -> int:
        """The index of the smallest bin >= ``batch_size`` (growing the bins when needed)."""
        if batch_size > self.bins[-1]:
            self.ensure(batch_size)
        return min(bisect.bisect_left(self.bins, batch_size), len(self.bins) - 1)

    # ---- counting ---------------------------------------------------------------------------------------
    def record(
        self,
        batch_size: int,
        drafted: bool,
        tokens: int,
        seconds: float,
        settling: bool = False,
        extend_kept: bool | None = None,
        outside_s: float = 0.0,
        prefilled: bool = False,
    ) -> None:
        """Count one decode step (the simulator calls this with its modelled duration); a ``settling`` step
        is counted apart from the bins (module docstring). ``extend_kept``: for a gated step, whether the
        draft extend ran (None: not known); a gated step after a gated one counts in ``extend`` too.
        ``outside_s``: the seconds before it outside every span (``outside``). ``prefilled``: a prefill's
        time is in its span or its gap (``prefilled``; ``end`` tells it from ``note_prefill``)."""
        steady_gated = not drafted and self._last_drafted is False
        self._last_drafted = drafted
        self.recorded += 1
        kind = None
        i = self.bin_index(batch_size)
        if steady_gated and extend_kept is not None:
            kind = "kept" if extend_kept else "skipped"
            block = self.extend[kind]
            block["steps"][i] += 1
            block["tokens"][i] += tokens
            block["time_s"][i] += seconds
        if settling:
            self.settling["steps"] += 1
            self.settling["tokens"] += tokens
            self.settling["time_s"] += seconds
            self._last_cell = ("settling", i, tokens, kind, False)
            return
        mode = "drafted" if drafted else "gated"
        self._last_cell = (mode, i, tokens, kind, prefilled)
        self.steps[mode][i] += 1
        self.tokens[mode][i] += tokens
        self.time_s[mode][i] += seconds
        self.outside[mode][i] += outside_s
        self.slots[mode][i] += batch_size
        if prefilled:
            block = self.prefilled[mode]
            block["steps"][i] += 1
            block["tokens"][i] += tokens
            # span and gap: a reader takes it from the mode's time with its gaps (module docstring)
            block["time_s"][i] += seconds + outside_s

    def keep_tokens(self, kept: int) -> None:
        """The last step recorded, counted at the ``kept`` output tokens its requests kept where they kept
        fewer than its verify counted (plugin/kept_tokens.py); once per step."""
        cell, self._last_cell = self._last_cell, None
        if cell is None:
            return
        where, i, tokens, kind, prefilled = cell
        cut = tokens - max(0, int(kept))
        if cut <= 0:
            return
        if where == "settling":
            self.settling["tokens"] -= cut
        else:
            self.tokens[where][i] -= cut
        if kind is not None:
            self.extend[kind]["tokens"][i] -= cut
        if prefilled:
            self.prefilled[where]["tokens"][i] -= cut
        self.tokens_not_kept += cut

    def note_idle(self) -> None:
        """The scheduler found nothing to run (the plugin's get_next_batch_to_run hook): the gap before the
        next step holds idle time, which no mode spent. A prefill noted before it ran out before it (nothing
        was running): no step carries it."""
        self._idle = True
        self._prefill_at = None

    def note_prefill(self) -> None:
        """The scheduler chose a prefill batch, EXTEND or MIXED (the plugin's get_next_batch_to_run hook): the
        first decode step launched after now carries its time (``prefilled``, module docstring). A later
        prefill before that step changes nothing: the step carries both."""
        if self._prefill_at is None:
            self._prefill_at = self.clock()

    def _carries_prefill(self, started: float) -> bool:
        """Whether a step launched at ``started`` is the first since the prefill noted: it takes the note. A
        tie is after: a loop turn chooses its batch (the note) before it launches one, and the step in flight
        (D1 of the docstring, whose successor carries the prefill) launched a turn earlier."""
        if self._prefill_at is None or started < self._prefill_at:
            return False
        self._prefill_at = None
        return True

    def launches_pending(self) -> int:
        """The launches still waiting for their verify result: with overlap scheduling the batch before the
        one being decided (plugin/part_mix.py waits for its result before it reads the requests)."""
        return len(self._pending)

    def begin(self, batch_size: int, drafted: bool, settling: bool = False) -> None:
        """A decode batch is about to launch (the plugin's get_steps_for_batch hook)."""
        pending = self._pending
        if len(pending) >= PENDING_MEMORY:
            pending.popleft()
            self.dropped += 1
        pending.append((batch_size, drafted, self.clock(), settling, None))

    def relabel_latest(self, batch_size: int, drafted: bool) -> None:
        """The launch just begun runs the other mode after all (the gated-decode plugin's drain, which holds
        a batch at 0 steps after the gate chose to draft it): count it as what it runs."""
        pending = self._pending
        if pending and pending[-1][0] == batch_size:
            pending[-1] = (batch_size, drafted, *pending[-1][2:])

    def mark_extend(self, batch_size: int, kept: bool) -> None:
        """The launch just begun, gated, runs the draft extend (``kept``) or skips it (the gated-decode
        plugin knows which once it has marked the batch)."""
        pending = self._pending
        if pending and pending[-1][0] == batch_size:
            pending[-1] = (*pending[-1][:4], kept)

    def end(self, batch_size: int, num_correct_drafts_per_req: Sequence[int]) -> None:
        """A decode batch's verify result is on the CPU (the plugin's on_verify_complete hook).

        Matches the oldest pending launch of the same batch size; older launches passed on the way never got
        a verify (counted in ``dropped``).
        """
        now = self.clock()
        pending = self._pending
        while pending:
            size, drafted, started, settling, kept = pending.popleft()
            if size == batch_size:
                last = self._last_end
                seconds = now - (started if last is None or started > last else last)
                gap = started - last if last is not None and started > last and not self._idle else 0.0
                self._last_end, self._idle = now, False
                tokens = sum(num_correct_drafts_per_req) + len(num_correct_drafts_per_req)
                prefilled = self._carries_prefill(started)
                self.record(batch_size, drafted, tokens, max(0.0, seconds), settling, kept, gap, prefilled)
                return
            self.dropped += 1
        self.unmatched += 1
        self._last_end, self._idle = now, False

    # ---- reporting --------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The published shape (module docstring): plain lists, JSON-ready."""
        return {
            "version": COUNTERS_VERSION,
            "started_at": self.started_at,
            "clock": self.clock_name,
            "bins": list(self.bins),
            **{
                mode: {
                    "steps": list(self.steps[mode]),
                    "tokens": list(self.tokens[mode]),
                    "time_s": [round(t, 9) for t in self.time_s[mode]],
                }
                for mode in MODES
            },
            "unmatched": self.unmatched,
            "dropped": self.dropped,
            "settling": {**self.settling, "time_s": round(self.settling["time_s"], 9)},
            "extend": {
                kind: {
                    "steps": list(block["steps"]),
                    "tokens": list(block["tokens"]),
                    "time_s": [round(t, 9) for t in block["time_s"]],
                }
                for kind, block in self.extend.items()
            },
            "outside": {mode: [round(t, 9) for t in self.outside[mode]] for mode in MODES},
            "prefilled": {
                mode: {
                    "steps": list(block["steps"]),
                    "tokens": list(block["tokens"]),
                    "time_s": [round(t, 9) for t in block["time_s"]],
                }
                for mode, block in self.prefilled.items()
            },
            "slots": {mode: list(self.slots[mode]) for mode in MODES},
            "mix": self.part_mix.block(self.bins),
            "tokens_not_kept": self.tokens_not_kept,
        }


def _padded(values: Sequence[float], n: int) -> list[float]:
    return [*values, *([0] * (n - len(values)))]


def restarted(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether the counters started anew between two snapshots (``started_at``, the bins or a count moved)."""
    bins_b, bins_a = before.get("bins") or [], after.get("bins") or []
    if before.get("started_at") != after.get("started_at") or bins_a[: len(bins_b)] != bins_b:
        return True
    for mode in MODES:
        for field in FIELDS:
            old, new = before[mode][field], after[mode][field]
            if any(b > a + 1e-9 for b, a in zip(old, new, strict=False)):
                return True
    return False


def rates(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """Per-bin deltas and rates between two snapshots (``before`` None: since the counters started).

    Returns ``{"bins": [...], "restarted": bool, "drafted": {"steps", "tokens", "time_s", "tok_s",
    "step_s"}, "gated": {...}}``, lists parallel to ``bins``; ``tok_s`` (output tokens per second of step
    time) and ``step_s`` (mean step time) are None where the bin saw no step time in the interval. When the
    counters restarted in between, the deltas are ``after``'s own values (``restarted`` True). Where
    ``after`` has them, each mode's ``outside_s`` and the ``extend``, ``prefilled``, ``slots`` (per mode) and
    ``mix`` (per field, plugin/part_mix.py) blocks' deltas too, each block on ``after``'s bins.
    """
    bins = list(after["bins"])
    n = len(bins)
    started_anew = before is not None and restarted(before, after)
    base = None if before is None or started_anew else before
    out: dict[str, Any] = {"bins": bins, "restarted": started_anew}
    for mode in MODES:
        out[mode] = with_rates(_deltas(after[mode], base[mode] if base is not None else None, n))
    # the blocks of one list per mode or field (module docstring); ``outside`` as each mode's ``outside_s``
    for name, read, keys in LIST_BLOCKS:
        if (new := read(after)) is not None:
            old = read(base) if base is not None else None
            deltas = {key: [round(max(0.0, a - b), 9) for a, b in zip(
                _padded(new[key], n), _padded(old[key], n) if old is not None else [0.0] * n, strict=True)]
                for key in keys}  # fmt: skip
            if name != "outside":
                out[name] = deltas
                continue
            for mode in MODES:
                out[mode]["outside_s"] = deltas[mode]
    new_extend = extend_block(after)
    if new_extend is not None:
        old_extend = extend_block(base) if base is not None else None
        out["extend"] = {kind: _deltas(new_extend[kind], old_extend[kind] if old_extend else None, n)
                         for kind in EXTEND_KINDS}  # fmt: skip
    new_prefilled = prefilled_block(after)
    if new_prefilled is not None:
        old_prefilled = prefilled_block(base) if base is not None else None
        out["prefilled"] = {mode: _deltas(new_prefilled[mode], old_prefilled[mode] if old_prefilled else None,
                                          n) for mode in MODES}  # fmt: skip
    return out


def with_rates(block: Mapping[str, Any]) -> dict[str, list[Any]]:
    """A mode's block (``steps``, ``tokens``, ``time_s`` per bin) with its rates: ``tok_s`` (output tokens per
    second of step time) and ``step_s`` (mean step time), None where the bin saw no step time."""
    out = dict(block)
    out["tok_s"] = [tok / t if t > 0 else None
                    for tok, t in zip(block["tokens"], block["time_s"], strict=True)]  # fmt: skip
    out["step_s"] = [t / s if s > 0 and t > 0 else None
                     for t, s in zip(block["time_s"], block["steps"], strict=True)]  # fmt: skip
    return out


def with_outside(interval: Mapping[str, Any]) -> dict[str, Any]:
    """A ``rates()`` interval with each mode's seconds outside every span (``outside_s``, plugin 0.4.13) added
    to its step time, rounded as ``rates()`` rounds it, and its rates made again: what a mode costs a client
    (on an H100 under a day load the steps and the seconds outside them held 0.993 of the load's seconds,
    the steps alone 0.946-0.951: data/gpu-runs/h100-8b-early-pair-triton-day-2026-12-06). The block's
    ``outside_s`` goes, so folding twice adds nothing; an interval without it (an older plugin) is as it was.
    storage/queries_counters.py folds the stored intervals the same way (its tests hold the two equal)."""
    out = dict(interval)
    for mode in MODES:
        block = interval.get(mode)
        if not isinstance(block, Mapping) or "outside_s" not in block:
            continue
        folded = {key: value for key, value in block.items() if key != "outside_s"}
        pairs = zip(block["time_s"], block["outside_s"], strict=True)
        folded["time_s"] = [round(t + o, 9) for t, o in pairs]
        out[mode] = with_rates(folded)
    return out


def _deltas(new: Mapping[str, Sequence[float]], old: Mapping[str, Sequence[float]] | None,
            n: int) -> dict[str, list[Any]]:  # fmt: skip
    """Per field (steps, tokens, time_s) of one mode's or kind's block: ``new`` less ``old`` (None: zeros)
    on ``n`` bins, the step time rounded to the nanosecond."""
    block: dict[str, list[Any]] = {}
    for field in FIELDS:
        before = _padded(old[field], n) if old is not None else [0] * n
        block[field] = [a - b for a, b in zip(_padded(new[field], n), before, strict=True)]
    block["time_s"] = [round(t, 9) for t in block["time_s"]]
    return block


def sum_ranks(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One counters snapshot summed over DP ranks; ranks whose bins differ (one grew) sum on the union.

    ``started_at`` is the latest rank's: SGLang restarts its schedulers together, so a restart moves it and
    ``rates`` sees the restart.
    """
    if not snapshots:
        raise ValueError("sum_ranks needs at least one counters snapshot")
    bins = sorted({int(b) for snap in snapshots for b in snap["bins"]})
    index = {b: i for i, b in enumerate(bins)}
    out: dict[str, Any] = {
        "version": snapshots[0].get("version"),
        "started_at": max((_number(s.get("started_at")) or 0.0 for s in snapshots), default=0.0),
        "clock": snapshots[0].get("clock"),
        "bins": bins,
        "unmatched": sum(_count(s.get("unmatched")) for s in snapshots),
        "dropped": sum(_count(s.get("dropped")) for s in snapshots),
        "ranks": len(snapshots),
        "settling": {field: sum(_settling(s)[field] for s in snapshots) for field in FIELDS},
    }
    for mode in MODES:
        out[mode] = sum_blocks([(snap["bins"], snap[mode]) for snap in snapshots], index)
    # the blocks of one list per mode or field: a rank without the block (an older plugin) adds nothing
    for name, read, keys in LIST_BLOCKS:
        lists = [(snap["bins"], own) for snap in snapshots if (own := read(snap)) is not None]
        if lists:
            out[name] = {key: [0.0] * len(bins) for key in keys}
            for rank_bins, own in lists:
                for key in keys:
                    for b, v in zip(rank_bins, own[key], strict=True):
                        out[name][key][index[int(b)]] += v
    extends = [(snap["bins"], found) for snap in snapshots if (found := extend_block(snap)) is not None]
    if extends:
        out["extend"] = {kind: sum_blocks([(b, found[kind]) for b, found in extends], index)
                         for kind in EXTEND_KINDS}  # fmt: skip
    prefills = [(snap["bins"], found) for snap in snapshots if (found := prefilled_block(snap)) is not None]
    if prefills:  # the ranks that publish it (plugin 0.4.14 on): a rank without it adds nothing
        out["prefilled"] = {mode: sum_blocks([(b, found[mode]) for b, found in prefills], index)
                            for mode in MODES}  # fmt: skip
    return out


def sum_blocks(blocks: Sequence[tuple[Sequence[int], Mapping[str, Sequence[float]]]],
            index: Mapping[int, int]) -> dict[str, list[Any]]:  # fmt: skip
    """Per field, blocks of one mode, extend kind or prefilled mode (each with its own bins: ranks, or
    intervals whose bins grew) summed on the union's bins (``index``: bin -> position), the step time rounded
    to the nanosecond."""
    block: dict[str, list[Any]] = {field: [0] * len(index) for field in FIELDS}
    for bins, values in blocks:
        for field in FIELDS:
            for b, v in zip(bins, values[field], strict=True):
                block[field][index[int(b)]] += v
    block["time_s"] = [round(t, 9) for t in block["time_s"]]
    return block


def served(total: Mapping[str, Any]) -> dict[str, float]:
    """Everything a ``sum_ranks`` total counted, both modes' bins and the settling steps together: steps,
    output tokens and step time served (what a throughput over all decode steps divides)."""
    return {field: float(sum(sum(total[mode][field]) for mode in MODES) + total["settling"][field])
            for field in FIELDS}  # fmt: skip


def _settling(snapshot: Mapping[str, Any]) -> dict[str, float]:
    """A snapshot's settling steps, tokens and step time (plugin/explore.py); zeros where it has none (a
    plugin before 0.3.0) or where they are malformed (diagnostics must not stop a reader)."""
    block = snapshot.get("settling")
    block = block if isinstance(block, Mapping) else {}
    return {field: _number(block.get(field)) or 0.0 for field in FIELDS}


def _number(value: object) -> float | None:
    """A finite number as a float, else None: ``validate`` checks the counted lists, not the diagnostics
    (``started_at``, ``unmatched``, ``dropped``), and a bad one must not stop a reader."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: object) -> int:
    return int(_number(value) or 0)
