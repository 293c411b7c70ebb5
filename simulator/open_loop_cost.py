"""What long contexts cost an open-loop server (simulator/open_loop.py): decode steps that read more KV, and
the prompts cut to the server's context.

A profile's curves are measured by a sweep with short prompts (64 tokens on the GPU runs), so they price a
decode step whose requests hold a few hundred tokens of context each. Production prompts are longer (Azure's
conversation trace: 1 158 tokens on average at rate scale 0.5, up to the context), and every decode step
reads every running request's KV: a gated step pays ``context_cost.gated_s_per_token`` per context token
over ``reference_tokens`` per request, a drafted one ``drafted_s_per_token`` (the verify's and the draft's
attention over the same context, which on triton costs an order of magnitude more per token than a 1-token
decode's: measured on the H200, a drafted step at batch bin 12 cost 2.5x a gated one under Azure's prompts
and 1.8x under the sweep's). Without ``context_cost`` a profile's curves stand for every context.
"""

from __future__ import annotations

from collections.abc import Callable

from ..plugin.explore import COLD, EXPLORE, ExploreWindows
from .fluid_counters import FluidCounters
from .harness import _Mode
from .profile import Profile

# Besides a prompt and its output, an EAGLE server reserves the draft's slots per request
# (``ServerInfo.reserved_output_tokens``, ``speculative_num_steps + 1``), and ``bench replay`` keeps a token
# or two for a BOS (collectors/bench/replay.py's PROMPT_MARGIN, which this mirrors).
PROMPT_MARGIN = 2


def cut_prompt(profile: Profile, prompt: int, output: int) -> int:
    """``prompt`` cut so that it, ``output`` and the draft's slots fit the server's context (as ``bench
    replay`` cuts an over-long prompt); unchanged where the profile does not say its context."""
    if profile.context_length is None:
        return prompt
    reserved = profile.speculative_num_steps + 1 if profile.speculative else 0
    room = profile.context_length - output - reserved - PROMPT_MARGIN
    return max(1, min(prompt, room))


def step_extras(profile: Profile, batch: int, context: float) -> tuple[float, float]:
    """Seconds a drafted and a gated step at ``batch`` requests holding ``context`` tokens in all take over
    the profile's curves."""
    cost = profile.context_cost
    if cost is None or batch <= 0:
        return 0.0, 0.0
    over = max(0.0, context - batch * cost.reference_tokens)
    return over * cost.drafted_s_per_token, over * cost.gated_s_per_token


def with_context(m: _Mode, extra_drafted_s: float, extra_gated_s: float) -> _Mode:
    """``m`` with each drafted step ``extra_drafted_s`` longer and each gated one ``extra_gated_s``: the
    same steps and tokens, in more time (the mode's share of drafted steps is the batch's, as before)."""
    if m.steps_s <= 0 or (extra_drafted_s <= 0 and extra_gated_s <= 0):
        return m
    step = 1.0 / m.steps_s
    p_d = m.drafted_steps_s * step
    p_g = 1.0 - p_d
    t_d = m.drafted_time * step / p_d + extra_drafted_s if p_d > 0 else 0.0
    t_g = (1.0 - m.drafted_time) * step / p_g + extra_gated_s if p_g > 0 else 0.0
    new_step = p_d * t_d + p_g * t_g
    tokens = m.rate * step  # per step, unchanged
    return _Mode(
        rate=tokens / new_step, accept=m.accept, steps_s=1.0 / new_step, drafted_steps_s=p_d / new_step,
        gated_steps_s=p_g / new_step, drafted_time=p_d * t_d / new_step,
        drafted_tok_share=m.drafted_tok_share,
    )  # fmt: skip


def count_stall(counters: FluidCounters, batch: int, m: _Mode, seconds: float, kept: float | None = None,
                counted: bool = True) -> None:  # fmt: skip
    """A prefill that ran while ``batch`` requests decoded in mode ``m``: the plugin's step time runs from
    one verify result to the next (overlap scheduling), so the prefill's seconds land in the decode step in
    flight, split between the modes as that batch's step time is; they publish with the next whole step.
    ``kept``: the share of ``m``'s gated steps that keep the draft extend (None: not known), whose kinds in
    the ``extend`` block get the gated share too, counted or not (settling steps are in that block);
    ``counted``: whether the bins count the step (a settling one is in none)."""
    if batch <= 0 or seconds <= 0:
        return
    if kept is not None:
        counters.stall_extend(batch, m, seconds, kept)
    if not counted:
        return
    i = counters.bin_index(batch)
    counters.partial["drafted"][i][2] += m.drafted_time * seconds
    counters.partial["gated"][i][2] += (1.0 - m.drafted_time) * seconds


class WindowStreams:
    """The exploration windows of the batches the ceiling gates, as the plugin runs them: one
    ``ExploreWindows`` (plugin/explore.py) stepped once per whole gated-by-ceiling decode step of the fluid
    model. Its exploring part is a stream of drafted batches in a row (twice the cycle's share, 328 at the
    default 2 %) up to the stream's limit (``ExploreWindows.limit``: twice the ceiling, at least 8, doubled
    after each part above it: plugin 0.4.3); a batch above it runs gated with the draft extend,
    settling. Before plugin 0.4.2 the stream drafted at whatever batch size the load had then: under a burst
    a drafted step at 32-64 requests costs 2.5-4.5x a gated one where prompts are long, and the whole batch
    waits through it. A fluid share of drafting spread over every
    batch (what the closed-loop harness's tables do) has the same mean cost but not that tail. The warm part
    (the extend runs until the holed requests finish), the exploring part's turnover (its first drafted
    batches) and its batches above the limit are settling: the counters leave them out, as the plugin does."""

    # False: count batches only, as plugin 0.4.1 did (before ExploreWindows.step(now=...) kept time)
    TIMED = True
    # False: a window explores on a full server too, as plugin 0.4.11 did (before it yielded to one)
    YIELD = True
    # the batches in a row with room before a window begins (None: the plugin's, ExploreWindows.room_batches)
    ROOM_BATCHES: int | None = None

    def drafts(self, batch: int, ceiling: int) -> bool:
        """Whether a batch of the exploring part drafts: the plugin's rule (``ExploreWindows.drafts``: the
        limit with its doublings)."""
        return self.windows.drafts(batch, ceiling)

    def __init__(self, start: int = 0) -> None:
        """``start``: gated batches the windows have counted already (a server that ran before: where in its
        cycle a window falls decides which burst its drafting stream meets)."""
        self.windows = ExploreWindows(room_batches=self.ROOM_BATCHES)
        self.windows.yield_to_full = self.YIELD
        self._carry = 0.0  # fractional steps not yet stepped
        for _ in range(start):
            self.windows.step()

    @property
    def phase(self) -> str:
        """The phase of the last batch stepped: the next batches run in it (a segment lags by one step)."""
        return self.windows.phase

    def counted(self, period: int) -> bool:
        """Whether batches now count in the decode counters (cold, or the exploring part's drafted batches
        past its turnover; a batch above the stream's limit never counts: the caller knows it)."""
        w = self.windows
        return w.phase == COLD or (w.phase == EXPLORE and w.past_turnover(period))

    def advance(self, steps: float, period: int, holes_pending: Callable[[], bool], now: float,
                batch: int, ceiling: int, full: bool = False) -> bool:  # fmt: skip
        """Step the windows by ``steps`` gated-by-ceiling batches of ``batch`` requests under ``ceiling``,
        ``full`` while requests wait that could not be admitted (a window yields: plugin 0.4.12); True when a
        warm part ran out with holed requests left (they are forgotten: they recover cold)."""
        self._carry += steps
        cut = False
        while self._carry >= 1.0:
            self._carry -= 1.0
            self.windows.step(holes_pending, period, now if self.TIMED else None, full)
            if self.windows.phase == EXPLORE:
                self.windows.stream(self.drafts(batch, ceiling), period)
            cut = cut or self.windows.cut_now
        return cut
