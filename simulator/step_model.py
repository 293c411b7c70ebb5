"""What a step count between 0 and the launch's ``speculative_num_steps`` would serve, in the simulator's
model: whether a middle count (1 or 2 of 3) beats both ends of the knob at some batch size.

A profile measures two step counts per batch size ``B``: the launch's ``K`` (``spec_on``, with its accept
length ``AL_K``) and 0 (``spec_off``, the knob at 0). The model interpolates between them:

- **Step time: a fixed share, then linear in the step count**:
  ``t_k = t_0 + (t_K - t_0) * (f + (1 - f) * k / K)`` for ``k >= 1``, with ``t_0 = B / off`` and
  ``t_K = B * AL_K / on``. Any drafting iteration pays the share ``f`` of the launch's extra time whatever its
  step count (the verify's bookkeeping and tree build, the draft's KV extend, the scheduler's work around
  them); each draft step (a draft-model forward, one more verify token per request) adds an equal part of the
  rest. ``f = DRAFT_FIXED_SHARE`` is fitted to the H200 pair's K-step servers (``fit_fixed_share``; ``f = 0``
  is the purely linear model, which predicted 1 of 3 steps beating both ends by 11 % at 48 requests where
  the GPU measured 0.84 of the better end).
- **Acceptance is geometric**: a chain draft (``--speculative-eagle-topk 1``) keeps position ``i`` only if
  every position before it was accepted, each with the same probability ``alpha`` fitted so that
  ``1 + alpha + ... + alpha**K = AL_K``; then ``AL_k = 1 + alpha + ... + alpha**k``. Real drafts accept their
  first positions more often than their last, so a real ``AL_1`` is at least the model's: the model leans
  against a middle count, not for it.

``serve(k) = B * AL_k / t_k``; ``k = 0`` and ``k = K`` give back the profile's two curves exactly. Which count
really wins is for a GPU to say (``benchmarks/gpu/measure_off.sh``'s ``steps`` phase measures K-step servers
against the launch's, ``data/gpu-runs/h200-8b-pair-triton-steps-explore-2026-12-01``: no middle count beat
both ends at any level); this says where the profile's own numbers point, with the step cost's shape measured
once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..plugin.engine_counters import counter_bins
from .profile import Profile
from .traces import Trace

# A middle count "beats both ends" when it serves at least this much more than the better end: below it the
# model's own assumptions (the step cost's shape, geometric acceptance) are larger than the difference.
MIN_GAIN = 0.01
_BISECTION_STEPS = 60
# The share of a drafting iteration's extra time that does not shrink with fewer draft steps: fitted by
# fit_fixed_share to 1 and 2 of 3 steps against the launch's 3 at 4-64 requests on the H200 pair (1-step
# servers served 0.82-0.86 of the launch's throughput, 2-step ones 0.87-0.96); 0.44 gives each back within
# 0.1.
DRAFT_FIXED_SHARE = 0.44


@dataclass(frozen=True)
class StepRow:
    """One batch-size bin: output tok/s at each step count 0..K, in the model."""

    batch_size: int
    tok_s: tuple[float, ...]  # index = step count
    alpha: float  # the fitted per-position acceptance

    @property
    def launch_steps(self) -> int:
        return len(self.tok_s) - 1

    @property
    def best_end(self) -> float:
        """What the knob alone can do here: the better of 0 and K steps."""
        return max(self.tok_s[0], self.tok_s[-1])

    @property
    def best_steps(self) -> int:
        return max(range(len(self.tok_s)), key=lambda k: self.tok_s[k])

    @property
    def best_middle(self) -> int | None:
        """The best count strictly between 0 and K (None when K < 2)."""
        middle = range(1, self.launch_steps)
        return max(middle, key=lambda k: self.tok_s[k]) if middle else None

    @property
    def middle_gain(self) -> float:
        """The best middle count's tok/s over the best end's, minus 1 (negative: an end is better)."""
        k = self.best_middle
        return self.tok_s[k] / self.best_end - 1.0 if k is not None and self.best_end > 0 else 0.0

    @property
    def middle_pays(self) -> bool:
        return self.middle_gain >= MIN_GAIN


def accept_length(alpha: float, steps: int) -> float:
    """Expected tokens per verify of a ``steps``-long chain draft whose positions each land with ``alpha``."""
    return sum(alpha**i for i in range(steps + 1))


def fit_alpha(accept: float, steps: int) -> float:
    """The per-position acceptance whose ``steps``-long chain accepts ``accept`` tokens per verify."""
    if steps <= 0 or accept <= 1.0:
        return 0.0
    if accept >= steps + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(_BISECTION_STEPS):  # accept_length rises with alpha
        mid = (lo + hi) / 2
        if accept_length(mid, steps) < accept:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def step_row(profile: Profile, batch_size: int, fixed_share: float = DRAFT_FIXED_SHARE) -> StepRow:
    """Output tok/s at every step count 0..K for ``batch_size`` requests decoding together."""
    steps = profile.speculative_num_steps
    off = profile.output_tok_s(batch_size, spec_on=False)
    on = profile.output_tok_s(batch_size, spec_on=True)
    accept = profile.accept_length_at(batch_size)
    alpha = fit_alpha(accept, steps)
    t0 = batch_size / off
    extra = batch_size * accept_length(alpha, steps) / on - t0  # the launch's step time over a gated one

    def step_time(k: int) -> float:
        return t0 if k == 0 else t0 + extra * (fixed_share + (1.0 - fixed_share) * k / steps)

    tok_s = tuple(batch_size * accept_length(alpha, k) / step_time(k) for k in range(steps + 1))
    return StepRow(batch_size=batch_size, tok_s=tok_s, alpha=alpha)


def fit_fixed_share(profile: Profile, measured: Mapping[int, Mapping[int, float]], grid: int = 100) -> float:
    """The fixed share (0..1, on a grid of ``grid`` steps) whose model best gives back measured middle
    counts: ``measured[B][k]`` = what a k-step server served over the launch's K at B requests (least
    squares over every B and k)."""
    if not measured or not any(measured.values()):
        raise ValueError("fit_fixed_share needs at least one measured middle count")

    def error(share: float) -> float:
        total = 0.0
        for batch_size, ratios in measured.items():
            row = step_row(profile, batch_size, share)
            total += sum((row.tok_s[k] / row.tok_s[-1] - ratio) ** 2 for k, ratio in ratios.items())
        return total

    return min((i / grid for i in range(grid + 1)), key=error)


def step_table(profile: Profile, fixed_share: float = DRAFT_FIXED_SHARE) -> list[StepRow]:
    """One row per engine-counter bin up to the profile's ``max_running_requests`` (the bins the plugin
    counts in, so a per-bin step count would be decided on the same grid)."""
    if not profile.speculative or profile.speculative_num_steps < 1:
        return []
    top = profile.max_running_requests
    return [step_row(profile, b, fixed_share) for b in counter_bins(top) if b <= top]


def best_count_gain(
    profile: Profile, running: Iterable[int], fixed_share: float = DRAFT_FIXED_SHARE
) -> float:
    """Over a load (running requests, one entry per equal slice of time): the tokens of an oracle that
    picks the best step count 0..K at every batch size, over those of one that picks only between 0 and K
    (the knob's two ends), minus 1. What a per-batch-size step count could add to the best on/off ceiling,
    in the model."""
    counts: dict[int, int] = {}
    for b in running:
        if b > 0:
            counts[b] = counts.get(b, 0) + 1
    if not counts or not profile.speculative or profile.speculative_num_steps < 1:
        return 0.0
    rows = {b: step_row(profile, b, fixed_share) for b in counts}
    best = sum(max(rows[b].tok_s) * n for b, n in counts.items())
    ends = sum(rows[b].best_end * n for b, n in counts.items())
    return best / ends - 1.0 if ends > 0 else 0.0


def load_gain(profile: Profile, trace: Trace, duration_s: float | None = None) -> float:
    """``best_count_gain`` over a load trace, read once a second for ``duration_s`` (default: the trace's
    length), each reading's running requests capped at the profile's ``max_running_requests``."""
    seconds = int(trace.duration_s if duration_s is None else duration_s)
    top = profile.max_running_requests
    return best_count_gain(profile, (min(round(trace.concurrency_at(float(t))), top) for t in range(seconds)))


def summary(profile: Profile, fixed_share: float = DRAFT_FIXED_SHARE) -> str:
    """One line: where a middle step count beats both ends in the model, and by how much."""
    rows = step_table(profile, fixed_share)
    steps = profile.speculative_num_steps
    if steps < 2:
        return f"{profile.name}: launched at {steps} step(s): no count between 0 and {steps}"
    paying = [r for r in rows if r.middle_pays]
    if not paying:
        best = max(rows, key=lambda r: r.middle_gain)
        return (
            f"{profile.name}: no middle count beats both ends by {MIN_GAIN:.0%} at any bin (closest: "
            f"{best.best_middle} steps at B={best.batch_size}, {best.middle_gain:+.1%})"
        )
    top = max(paying, key=lambda r: r.middle_gain)
    bins = ", ".join(f"{r.batch_size} ({r.best_middle}: {r.middle_gain:+.1%})" for r in paying)
    return (
        f"{profile.name}: a middle count beats both ends at B = {bins}; at most {top.middle_gain:+.1%} "
        f"({top.best_middle} of {steps} steps at B={top.batch_size})"
    )
