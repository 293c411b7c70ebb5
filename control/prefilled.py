"""A decode mode's rate without the lean of the prefills around it (plugin 0.4.14's ``prefilled`` block).

SGLang's overlap loop runs a prefill while a decode step is in flight, so the prefill's GPU time lies inside
the next decode step's span, and the counters count it in that step's mode and bin. In a closed loop every
finished request is replaced by a prefill, so prefill seconds per output token are the same whichever mode
decodes: a prefill per request, requests of the same lengths. Per decode *step* they are not: a drafting
stream finishes requests faster, so its steps carry more prefills each. A drafting bin's explored gated
steps sit in that stream and carry its prefills (on an H100, 2026-12-06: EXTEND batches per DECODE batch
2.4-2.5x a gated stream's at 8-32, and explored gated steps 2.4-3.2 points further short of steady than the
windows' warm parts, `data/gpu-runs/h100-8b-pair-triton-kept-extend-per-bin-2026-12-06`); a gated bin's
explored drafting steps carry the gated stream's fewer.

Here, per mode and bin: the steps split by whether their span held a prefill; the pure (prefill-free) step
time; the prefill seconds, the prefilled steps' time over what as many pure steps take; and the mode's rate
with the prefill seconds per output token of the whole bin put back in, the same for every mode of the bin:
``tokens / (pure seconds + p * tokens)`` with ``p = sum(prefill seconds) / sum(tokens)`` over the bin's modes.
In a bin that ran one mode that is the plain rate again (``tokens / seconds``): what a steady stream served.
Standard library only, as the rest of the estimator's inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Fewer pure steps than this in a mode and bin: its pure step time is not read (the prefilled steps are a
# tenth to a quarter of a bin's; a pure step time from a handful would carry the prefill seconds' noise).
MIN_PURE_STEPS = 20


@dataclass(frozen=True)
class ModeSteps:
    """One mode's decode steps in one bin: all of them (``steps``, ``tokens``, ``time_s``: step time with
    the seconds outside the steps) and those whose span held a prefill (``prefilled_*``, the same way)."""

    steps: float
    tokens: float
    time_s: float
    prefilled_steps: float = 0.0
    prefilled_tokens: float = 0.0
    prefilled_time_s: float = 0.0

    @property
    def pure_steps(self) -> float:
        return self.steps - self.prefilled_steps

    @property
    def pure_time_s(self) -> float:
        return self.time_s - self.prefilled_time_s

    def pure_step_s(self) -> float | None:
        """Seconds of a step without a prefill; None with fewer than ``MIN_PURE_STEPS`` of them."""
        if self.pure_steps < MIN_PURE_STEPS or self.pure_time_s <= 0:
            return None
        return self.pure_time_s / self.pure_steps

    def prefill_s(self) -> float | None:
        """The prefilled steps' seconds over what as many pure steps take (never below 0); None where the
        pure step time is not known."""
        pure = self.pure_step_s()
        if pure is None:
            return None
        return max(0.0, self.prefilled_time_s - self.prefilled_steps * pure)

    def pure_s(self) -> float | None:
        """Every step at the pure step time: the mode's seconds without the prefills in its spans."""
        pure = self.pure_step_s()
        return None if pure is None else self.steps * pure


def prefill_s_per_token(modes: Sequence[ModeSteps]) -> float | None:
    """The bin's prefill seconds per output token over its modes; None where a mode with steps has no pure
    step time (its prefill seconds are not known) or no mode has tokens."""
    seconds, tokens = 0.0, 0.0
    for mode in modes:
        if mode.steps <= 0:
            continue
        prefill = mode.prefill_s()
        if prefill is None:
            return None
        seconds += prefill
        tokens += mode.tokens
    return seconds / tokens if tokens > 0 else None


def levelled_tok_s(mode: ModeSteps, per_token_s: float) -> float | None:
    """The mode's output tok/s with the bin's prefill seconds per token in place of its own spans' share."""
    pure = mode.pure_s()
    if pure is None or mode.tokens <= 0:
        return None
    return mode.tokens / (pure + per_token_s * mode.tokens)
