"""The simulated SGLang scheduler: continuous batching in real time, driven by a performance profile.

One ``RankScheduler`` per data-parallel rank runs an asyncio loop that alternates, as SGLang's does,
between prefill batches (admitting waiting requests while fewer than ``max_running_requests`` run) and
decode steps over the running batch:

- prefill of ``n`` prompt tokens takes ``n / prefill_tok_s`` seconds and yields each admitted request's
  first token; where the plugin would skip the draft model's pass over the prompts
  (``RankScheduler.draft_prefill_skipped``, ``knob_contract.prefill_skippable``) it takes ``1 -
  draft_prefill_share`` of that, and the requests decode holed;
- a decode step over ``B`` running requests is *drafted* when ``B <= spec_max_bs`` (the knob), otherwise
  gated. Gated: every request gets 1 token, at the profile's knob-off curve (``spec_off``), which on a real
  server is slower than a server without speculation (``plain``); a profile without speculation
  (``Profile.speculative`` False, ``sim serve --no-speculation``) never drafts and runs its plain curve.
  ``spec_off`` is measured with the draft model's KV extend skipped, which the gated-decode plugin does for a
  batch the knob gates while nothing explores, or in an exploration window's cold part
  (``RankScheduler.extend_skipped``, plugin/explore.py); otherwise (a window's warm and exploring parts, a
  batch gated by exploration inside a drafting bin) a gated batch pays the extend and runs the profile's
  ``spec_off_warm`` curve where it has one (``Profile.output_tok_s(..., draft_warm=True)``). A batch the
  knob would draft while a request the skipped extends holed is in it drains as the plugin's does: gated,
  with the extend, until those requests finish (``/server_info`` carries the plugin's ``gated_decode``
  block).
  Drafted: every request gets ``accept_length(B)`` tokens on average (stochastic integer rounding around
  a per-step value with ``noise_cv`` noise, seeded). The step lasts
  ``B * tokens_per_request / profile.output_tok_s(B, drafted)``, so the aggregate output rate at
  concurrency ``B`` is the profile's curve for that mode; step time carries ``noise_cv`` noise too.
  Each step is counted in the rank's ``EngineCounters`` (batch-size bin, drafted or gated, tokens, the
  modelled step time, its requests; a gated one also by whether its extend ran), published like the SGLang
  plugin's under ``internal_states[i]["spectower"]``, with the request mix of each exploring part
  (plugin/part_mix.py, from each request's ``spec_verify_ct`` and ``spec_num_correct_drafts``).
- exploration, as the SGLang plugin's gate does it (``plugin.explore.ExploreSchedule``, per rank): runs of
  decode batches, ``explore_share`` of each batch-size bin's, run the other mode than the knob says, unless
  a lock (manual or sweep) holds the knob; a run's first batch and the first after it count as settling.
  The knob's owner (``plugin.knob_contract.KnobOwner``) lives on the engine for that reason.

Steps are scheduled against absolute monotonic deadlines (``deadline += step``), so event-loop jitter does
not accumulate into drift; a loop that falls more than ``MAX_LAG_S`` behind (an overloaded machine) resets
its deadline to now instead of bursting. Each request receives one update per step it takes part in, and
streaming handlers turn each update into one chunk, like SGLang with ``stream_interval=1``.

Profile semantics under ``--dp-size N``: each DP rank is a full copy of the profiled server (its own
batch, its own curve); requests are spread round-robin (SGLang's default ``load_balance_method``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import deque

from ..plugin import knob_contract
from ..plugin.draft_holes import DEFAULT_DRAIN_MAX_STEPS, ExtendSkip
from ..plugin.engine_counters import EngineCounters
from ..plugin.explore import EXPLORE, BatchPlan, Explorer
from ..plugin.loop_stalls import LoopStalls
from .accept_kinds import kind_of
from .config import SimConfig
from .memory import memory_layout
from .sim_request import ABORTED, SimRequest
from .stats import QUEUE_TIME_BUCKETS, Hist, SchedulerGauges, TokenizerStats

# Falling further behind than this (seconds) resets the step clock instead of catching up in a burst.
MAX_LAG_S = 0.5
# A prefill forward never takes less than this (kernel launch + scheduling overhead), seconds.
MIN_PREFILL_S = 0.001
# SGLang's default --max-prefill-tokens: one prefill batch admits at most this many prompt tokens.
MAX_PREFILL_TOKENS = 16384
class RankScheduler:
    """One DP rank: waiting queue, running batch, the knob, and the accounting SGLang reports."""

    def __init__(self, engine: Engine, dp_rank: int) -> None:
        self.engine = engine
        self.dp_rank = dp_rank
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.spec_max_bs = engine.max_running_requests  # initial knob: always on
        self.batches_drafted = 0
        self.batches_gated = 0
        self.batches_explored = 0
        # which decode batches explore: the plugin's, in windows where the knob gates (plugin/explore.py)
        self.explorer = Explorer(engine.config.explore_cycle)
        # The gated-decode plugin's own tracker (plugin/draft_holes.py): the requests that ran through a
        # skipped draft extend or prefill (holes in their draft KV, by rid), the drain that holds drafting
        # until they finish (a window's warm part waits for them too), and its counts (``gated_decode``).
        self.holes = ExtendSkip(allowed=self.extend_skipped, enabled=True,
                                drain_max_steps=DEFAULT_DRAIN_MAX_STEPS)  # fmt: skip
        self._gated_by_ceiling = False  # the last decode batch: the knob gated it (not exploration)
        # The plugin's decode counters (plugin/engine_counters.py), fed the modelled step durations.
        self.counters = EngineCounters(engine.max_running_requests, clock_name="model")
        # Prefill seconds since the last decode step, counted in the next one's time: SGLang's overlap loop
        # (the H200's EAGLEWorkerV2) waits for a prefill's GPU time inside the span of the decode step after
        # it (plugin/engine_counters.py: result to result), as the fluid models count it (open_loop_cost.
        # count_stall); counted apart, a drafting run's counters read faster than its clients (2026-12-06).
        self.prefill_s_unspanned = 0.0
        # The plugin's output stalls (plugin/loop_stalls.py), each batch's output timed on the event loop's
        # clock: a long modelled prefill, or this process falling behind, shows as a real plugin's would.
        self.stalls = LoopStalls(clock=time.monotonic)
        self.active_steps = engine.profile.speculative_num_steps if engine.profile.speculative else 0
        self.gauges = SchedulerGauges(
            spec_num_steps=self.active_steps, spec_num_draft_tokens=self.active_steps + 1
        )
        # Cumulative since start / last /flush_cache (avg_spec_accept_length).
        self.cum_accept_tokens = 0
        self.cum_verify_ct = 0
        self._new_window(time.monotonic())
        self.last_decode_mono: float | None = None
        self.last_gen_throughput = 0.0
        # Totals for /v1/loads, counters and the virtual GPUs.
        self.total_decode_tokens = 0
        self.total_prefill_tokens = 0
        self.total_prefill_busy_s = 0.0
        self.busy_s = 0.0
        self.decode_passes = 0
        self.prefill_passes = 0
        self.queue_hist = Hist(QUEUE_TIME_BUCKETS)
        self._wake = asyncio.Event()
        self._rng = random.Random(engine.seed * 7919 + dp_rank)

    # ---- what clients see -------------------------------------------------------------------------
    @property
    def num_used_tokens(self) -> int:
        return sum(r.prompt_tokens + len(r.output) for r in self.running)

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.cum_accept_tokens / self.cum_verify_ct if self.cum_verify_ct else None

    def current_gen_throughput(self) -> float:
        return self.gauges.gen_throughput

    def flush(self) -> None:
        self.cum_accept_tokens = 0
        self.cum_verify_ct = 0

    def submit(self, req: SimRequest) -> None:
        req.dp_rank = self.dp_rank
        self.waiting.append(req)
        self._wake.set()

    # ---- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        deadline = time.monotonic()
        while True:
            self._drop_aborted()
            if not self.running and not self.waiting:
                self.stalls.idle()
                self._publish_idle()
                self._wake.clear()
                await self._wake.wait()
                deadline = time.monotonic()
                continue
            capacity = self.engine.max_running_requests - len(self.running)
            if self.waiting and capacity > 0:
                deadline = await self._prefill(capacity, deadline)
            elif self.running:
                deadline = await self._decode(deadline)

    async def _sleep_until(self, deadline: float) -> float:
        now = time.monotonic()
        if deadline > now:
            await asyncio.sleep(deadline - now)
            return deadline
        if now - deadline > MAX_LAG_S:
            return now  # overloaded: give up the debt rather than burst
        await asyncio.sleep(0)  # let handlers run even when catching up
        return deadline

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.running):
            self.running = [r for r in self.running if not r.aborted]
        if any(r.aborted for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.aborted)

    async def _prefill(self, capacity: int, deadline: float) -> float:
        batch: list[SimRequest] = []
        tokens = 0
        while self.waiting and len(batch) < capacity:
            nxt = self.waiting[0]
            if batch and tokens + nxt.prompt_tokens > MAX_PREFILL_TOKENS:
                break
            batch.append(self.waiting.popleft())
            tokens += nxt.prompt_tokens
        started = self.stalls.now()
        self.stalls.run_started(started)
        wall = time.time()
        for r in batch:
            r.forward_entry_wall = wall
            r.queue_time = max(0.0, time.monotonic() - r.created_mono)
            self.queue_hist.observe(r.queue_time)
        skip_draft = bool(batch) and self.draft_prefill_skipped(len(self.running) + len(batch))
        if skip_draft:  # the requests decode holed, as after a skipped decode extend
            self.holes.prefill_skipped(batch)
        duration = max(MIN_PREFILL_S, tokens / self.engine.profile.prefill_rate(skip_draft))
        deadline = await self._sleep_until(deadline + duration)
        self.busy_s += duration
        self.prefill_s_unspanned += duration
        self.total_prefill_busy_s += duration
        self.total_prefill_tokens += tokens
        self.prefill_passes += 1
        self.engine.on_prefill_tokens(tokens)
        now = time.monotonic()
        wall = time.time()
        for r in batch:
            if r.aborted:
                continue
            r.prefill_finished_wall = wall
            r.first_token_mono = now
            r.last_token_mono = now
            r._push(1)
            self.running.append(r)
            self.engine.on_first_token(r, now)
            self._emit(r)
        self._publish(now, prefill=True)
        self.stalls.result_done(started, {"mode": "EXTEND", "requests": len(batch), "tokens": tokens})
        return deadline

    def extend_skipped(self) -> bool:
        """Whether the last decode batch, gated, skipped the draft model's KV extend (and so ran ``spec_off``,
        not the warm curve): the knob gated it and nothing explores (the share is 0, or a lock holds the
        knob), or it fell in an exploration window's cold part.

        The plugin's rule (``knob_contract.extend_skippable``, which its ``extend_skip_allowed`` and the
        gated-decode plugin's ``ExtendSkip`` read). Once the knob lets such requests draft again, ``_decode``
        drains them as the plugin does: gated batches with the extend until the holed requests finish, at
        most ``DEFAULT_DRAIN_MAX_STEPS``, by the plugin's own tracker (``self.holes``)."""
        owner = self.engine.owner.owner()
        return knob_contract.extend_skippable(self._gated_by_ceiling, self.engine.explore_period, owner,
                                              self.explorer.phase_now)  # fmt: skip

    def draft_prefill_skipped(self, next_batch: int) -> bool:
        """Whether a prefill whose requests make the next decode batch ``next_batch`` skips the draft's pass
        (faster by the profile's ``draft_prefill_share``): the plugin's rule (``knob_contract.
        prefill_skippable``) with this rank's gate, which has no hysteresis."""
        if not self.engine.profile.speculative or self.engine.profile.draft_prefill_share <= 0:
            return False
        ceiling = self.spec_max_bs
        gated = ceiling == 0 or next_batch > ceiling
        period = self.engine.explore_period if self.engine.explore_allowed() else 0
        return knob_contract.prefill_skippable(ceiling, gated, period, self.engine.owner.owner(),
                                               self.explorer.phase_now)  # fmt: skip

    def _explore_plan(self, batch: int, drafted: bool, deadline: float) -> BatchPlan:
        """The explorer's plan for a decode batch of ``batch`` requests that the knob drafts (``drafted``) or
        gates, as the plugin's gate makes it (plugin/explore.py), and what follows from it before the step:
        whether the knob gated it, a cut warm part's holed requests forgotten, and the exploring part's
        request mix told, as the plugin's hooks tell it (plugin/part_mix.py; the steps so far are on the
        requests already, so no result is due)."""
        profile = self.engine.profile
        period = self.engine.explore_period if profile.speculative and self.engine.explore_allowed() else 0
        # the loop decodes with requests waiting only when none can be admitted (SGLang's full server): a
        # window yields to it, as the plugin's does (plugin/explore.py, WINDOW_WAIT_MAX_CYCLES)
        gated = profile.speculative and not drafted
        plan = self.explorer.next(batch, gated, period, self.holes.holes_pending,
                                  deadline,  # the simulated clock: a window's parts in seconds too
                                  ceiling=self.spec_max_bs, full=bool(self.waiting))  # fmt: skip
        self._gated_by_ceiling = gated and not plan.explore
        self.counters.part_mix.batch(plan.phase == EXPLORE, plan.explore, batch, lambda: self.running)
        if plan.forget_holes:
            self.holes.forget_holes()
        return plan

    async def _decode(self, deadline: float) -> float:
        batch = len(self.running)
        started = self.stalls.now()
        self.stalls.run_started(started)
        profile = self.engine.profile
        # A gated batch runs at the profile's knob-off curve (spec_off: SGLang verifies it as a 1-token
        # TARGET_VERIFY), not a plain server's; a profile without speculation never drafts (plain curve).
        drafted = profile.speculative and batch <= self.spec_max_bs
        holes = self.holes
        holes.begin_batch(None, self.running)  # a finished or aborted request leaves the holed ones
        plan = self._explore_plan(batch, drafted, deadline)
        settling = plan.settling
        if plan.explore:
            drafted = not drafted
            self.batches_explored += 1
        # the drain: gated with the extend while a holed request is in a batch that would draft
        drafted = holes.steps_for(int(drafted)) > 0
        steps = profile.speculative_num_steps
        accept = profile.accept_length_at(batch) if drafted else 1.0
        # A gated batch with the draft's extend running is slower than spec_off (measured with it skipped):
        # only where the knob gated a speculative batch and nothing needs the draft warm (extend_skipped)
        holes.mark(int(drafted))
        skipped = holes.skip_now
        holes.end_batch()
        rate = profile.output_tok_s(batch, drafted, draft_warm=not drafted and not skipped)
        step = batch * accept / rate
        cv = profile.noise_cv
        if cv > 0:
            step *= min(2.0, max(0.5, 1.0 + cv * self._rng.gauss(0.0, 1.0)))
        deadline = await self._sleep_until(deadline + step)
        self.busy_s += step
        self.decode_passes += 1
        self.active_steps = steps if drafted else 0
        if drafted:
            self.batches_drafted += 1
            mean = accept * (1.0 + cv * self._rng.gauss(0.0, 1.0)) if cv > 0 else accept
            mean = min(float(steps + 1), max(1.0, mean))
        else:
            self.batches_gated += 1
            mean = 1.0
        now = time.monotonic()
        produced, live, finished = self._push_tokens(mean, drafted, steps, now)
        self.cum_accept_tokens += produced
        self.cum_verify_ct += live
        self.total_decode_tokens += produced
        self._win_steps += 1
        self._win_tokens += produced
        self._win_verify += live
        if drafted:
            self._win_accepted += produced - live
            self._win_proposed += live * steps
        self.last_decode_mono = now
        self.engine.on_decode(produced, live, drafted)
        if live:
            # a gated step of a speculative profile tells the counters whether its extend ran (their
            # ``extend`` block: the tax learn corrects by, control/kept_extend.py); no such step otherwise
            kept = None if drafted or not profile.speculative else not skipped
            # a step whose span holds a prefill's time is a prefilled one (the counters' ``prefilled``
            # block, as the plugin marks the first step launched after a prefill)
            prefilled = self.prefill_s_unspanned > 0
            self.counters.record(live, drafted, produced, step + self.prefill_s_unspanned, settling, kept,
                                 prefilled=prefilled)  # fmt: skip
            self.prefill_s_unspanned = 0.0
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for r in finished:
                self.engine.on_finish(r, now)
        if self._win_steps >= self.engine.config.decode_log_interval:
            self._publish(now, prefill=False)
        self.stalls.result_done(started, {"mode": "DECODE", "requests": batch, "tokens": None})
        return deadline

    def _push_tokens(
        self, mean: float, drafted: bool, steps: int, now: float
    ) -> tuple[int, int, list[SimRequest]]:
        """One decode step's tokens to every live request (``mean`` per request on average, whole tokens
        drawn around it); returns the tokens made, the live requests, and those now finished."""
        rnd = self._rng.random
        produced = 0
        live = 0
        finished: list[SimRequest] = []
        for r in self.running:
            if r.aborted:
                continue
            live += 1
            # a request of a kind commits its own accept length when drafted (the step's time is the batch's)
            own = min(float(steps + 1), r.accept) if drafted and r.accept is not None else mean
            base = int(own)
            k = base + 1 if own > base and rnd() < own - base else base
            new = r._push(k)
            n = len(new)
            produced += n
            r.spec_verify_ct += 1  # a gated step is a verify too, with no correct draft (as in SGLang)
            if drafted:
                r.spec_num_correct_drafts += k - 1
                r.spec_proposed_drafts += steps
            if r.last_token_mono is not None and n:
                self.engine.tokenizer.itl.observe((now - r.last_token_mono) / n, n)
            r.last_token_mono = now
            if len(r.output) >= r.max_new_tokens:
                finished.append(r)
            self._emit(r)
        return produced, live, finished

    def _emit(self, r: SimRequest) -> None:
        if len(r.output) >= r.max_new_tokens and not r.finished:
            r.finished = True
            r.finish_reason = "length"
            r.done.set()
        if r.streaming:
            r.publish(len(r.output))

    # ---- SGLang's log_prefill_stats / log_decode_stats ----------------------------------------------
    def _publish(self, now: float, prefill: bool) -> None:
        g = self.gauges
        g.num_running_reqs = len(self.running)
        g.num_queue_reqs = len(self.waiting)
        used = self.num_used_tokens
        g.num_used_tokens = used
        g.token_usage = used / self.engine.memory.max_total_num_tokens
        g.decode_sum_seq_lens = used
        g.cache_hit_rate = 0.0
        g.utilization = min(1.0, len(self.running) / self.engine.max_running_requests)
        g.new_token_ratio = 0.0
        g.is_cuda_graph = 1.0
        g.published_at = now
        if prefill:
            return
        elapsed = max(1e-9, now - self._win_start)
        g.gen_throughput = self._win_tokens / elapsed
        self.last_gen_throughput = g.gen_throughput
        g.spec_accept_length = self._win_tokens / self._win_verify if self._win_verify else 0.0
        g.spec_accept_rate = self._win_accepted / self._win_proposed if self._win_proposed else 0.0
        g.spec_num_steps = self.active_steps
        g.spec_num_draft_tokens = self.active_steps + 1
        self._new_window(now)

    def _publish_idle(self) -> None:
        # SGLang's _maybe_log_idle_metrics: once the scheduler finds no batch while its running gauge
        # still shows requests, it publishes idle stats at once, gen_throughput 0 included (otherwise
        # every 30 s). /server_info's last_gen_throughput keeps the last busy value.
        g = self.gauges
        g.gen_throughput = 0.0
        g.num_running_reqs = 0
        g.num_queue_reqs = 0
        g.num_used_tokens = 0
        g.token_usage = 0.0
        g.utilization = 0.0
        # The next busy period's first window starts when work arrives, not now.
        self._new_window(time.monotonic())

    def _new_window(self, start: float) -> None:
        """Start the gauges' next window: what the decode steps since the last decode log add up."""
        self._win_steps = self._win_tokens = self._win_verify = self._win_accepted = self._win_proposed = 0
        self._win_start = start


class Engine:
    """All DP ranks plus the tokenizer-side accounting, shared by the HTTP routes."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.seed = config.seed
        self.max_running_requests = config.effective_max_running_requests
        self.memory = memory_layout(self.profile)
        self.tokenizer = TokenizerStats()
        self.realtime_tokens = {"prefill_compute": 0, "prefill_cache": 0, "decode": 0}
        self.started_wall = time.time()
        self.started_mono = time.monotonic()
        self.ready = False
        self._index = itertools.count()
        self._rr = itertools.count()
        # Who holds the knob (the contract's logic, shared with the plugin); exploration pauses under a lock.
        self.owner = knob_contract.KnobOwner()
        self.explore_share = 0.0
        self.explore_period = 0
        self.set_explore_share(config.explore_share)
        self.ranks = [RankScheduler(self, i) for i in range(config.dp_size)]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(r.run(), name=f"sim-rank-{r.dp_rank}") for r in self.ranks]
        self.ready = True

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    # ---- requests ---------------------------------------------------------------------------------
    def new_request(
        self, prompt_tokens: int, max_new_tokens: int, streaming: bool, rid: str | None = None
    ) -> SimRequest:
        index = next(self._index)
        accept = kind_of(index, self.config.accept_kinds)
        return SimRequest(index, prompt_tokens, max_new_tokens, streaming, self.seed, rid, accept)

    def submit(self, req: SimRequest) -> None:
        rank = self.ranks[next(self._rr) % len(self.ranks)]
        rank.submit(req)

    def abort(self, req: SimRequest) -> None:
        if req.finished or req.aborted:
            return
        req.aborted = True
        req.finished = True
        req.finish_reason = "abort"
        self.tokenizer.num_aborted += 1
        req.publish(ABORTED)
        req.done.set()

    @property
    def idle(self) -> bool:
        return all(not r.running and not r.waiting for r in self.ranks)

    # ---- the knob ---------------------------------------------------------------------------------
    def set_spec_max_bs(self, value: int) -> list[bool]:
        for r in self.ranks:
            r.spec_max_bs = value
        return [True for _ in self.ranks]

    def set_explore_share(self, share: float) -> None:
        self.explore_share = float(share)
        self.explore_period = knob_contract.explore_period(self.explore_share)

    def explore_allowed(self) -> bool:
        """Exploring only while no lock holds the knob: an operator's off means off, a sweep's ceiling is
        measured as set."""
        return self.owner.owner() == knob_contract.OWNER_FREE

    def flush_cache(self) -> bool:
        if not self.idle:
            return False
        for r in self.ranks:
            r.flush()
        return True

    # ---- accounting hooks (tokenizer side) --------------------------------------------------------
    def on_prefill_tokens(self, tokens: int) -> None:
        self.realtime_tokens["prefill_compute"] += tokens

    def on_first_token(self, req: SimRequest, now: float) -> None:
        self.tokenizer.ttft[_s(req.streaming)].observe(now - req.created_mono)

    def on_decode(self, produced: int, verify_calls: int, drafted: bool) -> None:
        self.realtime_tokens["decode"] += produced
        self.tokenizer.spec_verify_calls += verify_calls

    def on_finish(self, req: SimRequest, now: float) -> None:
        t = self.tokenizer
        key = _s(req.streaming)
        n_out = len(req.output)
        t.prompt_tokens[key] += req.prompt_tokens
        t.generation_tokens[key] += n_out
        t.num_requests[key] += 1
        e2e = now - req.created_mono
        t.e2e[key].observe(e2e)
        if n_out > 1 and req.first_token_mono is not None:
            t.tpot[key].observe((now - req.first_token_mono) / (n_out - 1))
        t.prompt_hist.observe(req.prompt_tokens)
        t.uncached_prompt_hist.observe(req.prompt_tokens)
        t.generation_hist.observe(n_out)

    # ---- derived ----------------------------------------------------------------------------------
    def busy_seconds(self) -> float:
        return sum(r.busy_s for r in self.ranks)

    def running_total(self) -> int:
        return sum(len(r.running) for r in self.ranks)


def _s(flag: bool) -> str:
    return "true" if flag else "false"
