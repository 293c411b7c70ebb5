"""Policies that do not learn: a fixed threshold (and always-on / always-off), and SGLang's default bands.

Both answer ``hold`` when the knob's read-back already shows what they want, so a runner does not re-set
(and re-audit) the same value every interval, and ``hold`` on a stale observation.
"""

from __future__ import annotations

from typing import Any

from ...plugin import knob_contract
from .base import Decision, Observation, PolicyError

# SGLang 0.5.23's default --speculative-adaptive bands (speculative/adaptive_spec_params.py):
# band key (padded batch size) -> candidate steps.
SGLANG_DEFAULT_BANDS: dict[int, tuple[int, ...]] = {1: (1, 3, 5, 7), 8: (0, 1, 3), 32: (0, 1), 64: (0,)}
# A band whose candidates include 0 drops to 0 steps when its EMA of accepted drafts per request falls
# to <= 0.5 (AdaptiveStepSlot._recompute_params: drop threshold 0.5 + down_hysteresis 0.0).
SGLANG_ZERO_STEP_EMA = 0.5
SGLANG_EMA_ALPHA = 0.2
# Decode CUDA-graph batch sizes SGLang captures when speculation is on (arg_groups/cuda_graph_hook.py):
# a running batch is padded up to the next one before it is mapped to a band.
SGLANG_SPEC_CUDA_GRAPH_BS: tuple[int, ...] = (
    *range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8), *range(272, 1025, 16)
)


def _check_max_bs(value: int, max_running_requests: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PolicyError(f"threshold must be a non-negative integer, got {value!r}")
    if value > knob_contract.MAX_SPEC_MAX_BS:  # the knob's own bound: no server would take it
        raise PolicyError(f"threshold must be at most {knob_contract.MAX_SPEC_MAX_BS}, got {value}")
    return value


class ThresholdPolicy:
    """Hold the knob at N: draft while the running batch is <= N (vLLM's old ``disable_by_batch_size``)."""

    def __init__(self, max_bs: int, max_running_requests: int, name: str | None = None) -> None:
        self.max_bs = _check_max_bs(max_bs, max_running_requests)
        self.max_running_requests = max_running_requests
        self.name = name or f"threshold:{max_bs}"

    def decide(self, obs: Observation) -> Decision:
        if obs.stale:
            return Decision(None, "hold: metrics stale or server unreachable")
        if obs.spec_max_bs == self.max_bs:
            return Decision(None, f"hold: knob already at {self.max_bs}")
        return Decision(self.max_bs, f"{self.name}: set the ceiling to {self.max_bs}")

    def state(self) -> dict[str, Any]:
        return {"policy": self.name, "max_bs": self.max_bs}

    def load_state(self, state: dict[str, Any]) -> None:
        # Nothing to restore: the threshold comes from the spec, not from history.
        return None


def sglang_default_ceiling(max_running_requests: int) -> int:
    """The largest running batch that SGLang's default bands can draft for.

    A batch is padded to the next captured CUDA-graph size and routed to the largest band key <= that;
    band 64 only offers 0 steps, so drafting stops where padding reaches 64 (at 61 running requests).
    """
    zero_only = min(k for k, steps in SGLANG_DEFAULT_BANDS.items() if steps == (0,))
    last = 0
    for bs in range(1, max_running_requests + 1):
        padded = next((g for g in SGLANG_SPEC_CUDA_GRAPH_BS if g >= bs), bs)
        band = max(k for k in SGLANG_DEFAULT_BANDS if k <= padded)
        if band >= zero_only:
            break
        last = bs
    return last


class SglangDefaultPolicy:
    """The closest emulation of SGLang's default adaptive bands on our one-number knob.

    What SGLang does: per band, an EMA of accepted drafts per request picks among the band's candidate
    steps. Band 1 (batches padded to 1-7) never offers 0, so it always drafts; bands 8 and 32 offer 0 and
    drop to it only when the EMA of accepted drafts is <= 0.5; band 64 (padded >= 64, i.e. > 60 running)
    never drafts. Note the bands look at acceptance, not at throughput: they keep drafting at high load as
    long as drafts are accepted, whether or not that pays.

    The approximation on our knob: one ceiling. It is ``sglang_default_ceiling()`` (60 with the default
    CUDA-graph sizes) while the EMA of accepted drafts (from the accept-length signal) is > 0.5, else 7
    (only band 1 drafts). Not emulated: the choice among 1/3/5/7 steps (our knob is on/off at the
    launch's working step), per-band EMAs (one shared EMA here), and the 5-batch update cadence.
    """

    name = "sglang-default"

    def __init__(self, max_running_requests: int) -> None:
        self.max_running_requests = max_running_requests
        self.high_ceiling = sglang_default_ceiling(max_running_requests)
        self.low_ceiling = min(7, self.high_ceiling)
        # SGLang starts each band's EMA neutral at (steps - 1) of its initial step; >0.5 means drafting.
        self.ema_accepted_drafts = 1.0
        self.last_knob: int | None = None

    def decide(self, obs: Observation) -> Decision:
        if obs.stale:
            return Decision(None, "hold: metrics stale or server unreachable")
        # SGLang's EMA only sees drafted batches. An interval's accept-length gauge also averages in 0-step
        # batches, so feed it only from intervals that sat well inside the drafting region, under a knob
        # that had not just changed (the gauge lags).
        drafted = (obs.spec_max_bs is not None and obs.spec_max_bs == self.last_knob
                   and 1.0 <= obs.num_running_reqs <= obs.spec_max_bs - 1)
        self.last_knob = obs.spec_max_bs
        if drafted and obs.accept_length is not None and obs.accept_length > 1.0:
            self.ema_accepted_drafts = (
                (1 - SGLANG_EMA_ALPHA) * self.ema_accepted_drafts
                + SGLANG_EMA_ALPHA * (obs.accept_length - 1.0)
            )
        drafts_pay = self.ema_accepted_drafts > SGLANG_ZERO_STEP_EMA
        want = self.high_ceiling if drafts_pay else self.low_ceiling
        if obs.spec_max_bs == want:
            return Decision(None, f"hold: knob already at {want}")
        ema = f"accepted-draft EMA {self.ema_accepted_drafts:.2f}"
        why = (f"{ema} > {SGLANG_ZERO_STEP_EMA}: bands 1-32 draft" if drafts_pay
               else f"{ema} <= {SGLANG_ZERO_STEP_EMA}: only band 1 drafts")
        return Decision(want, f"sglang-default: {why}, ceiling {want}")

    def state(self) -> dict[str, Any]:
        return {"policy": self.name, "ema_accepted_drafts": self.ema_accepted_drafts}

    def load_state(self, state: dict[str, Any]) -> None:
        value = state.get("ema_accepted_drafts")
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.ema_accepted_drafts = float(value)
