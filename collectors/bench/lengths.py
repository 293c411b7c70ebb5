"""Mixed output lengths for closed-loop measurements: ``--output-len 64-448``.

Why: requests of one length finish in waves, so a counter read over a window moves in steps of
(concurrency x length) tokens, and two identical servers read up to 0.83 apart (issue #32). Lengths spread
over a range desynchronise the finishes. Each request's length is a function of its index alone, so two
servers given the same prompt indices (benchmarks/gpu/knob_max_ab.py's paired rounds) get the same lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import BenchError
from .limits import MAX_TOKENS, check_between

# Knuth's multiplicative hash: consecutive indices land far apart in the range, deterministically.
_MULTIPLIER = 2654435761


@dataclass(frozen=True)
class OutputLengths:
    """Output tokens per request: ``low`` .. ``high`` inclusive (one value when they are equal)."""

    low: int
    high: int

    def of(self, index: int) -> int:
        """The length of request ``index`` (the same index, the same length, on every server)."""
        span = self.high - self.low + 1
        return self.low + (index * _MULTIPLIER) % (1 << 32) % span

    def check(self, minimum: int, flag: str = "--output-len") -> None:
        """A config's lengths (built in code, not parsed): each ``minimum`` .. MAX_TOKENS, low <= high."""
        check_between(self.low, flag, minimum, MAX_TOKENS)
        check_between(self.high, flag, self.low, MAX_TOKENS)

    @property
    def mixed(self) -> bool:
        return self.high > self.low

    def __str__(self) -> str:
        return f"{self.low}-{self.high}" if self.mixed else str(self.low)


def as_lengths(setting: int | OutputLengths) -> OutputLengths:
    """A config's ``output_len`` (one length, or a range) as a range."""
    return setting if isinstance(setting, OutputLengths) else OutputLengths(setting, setting)


def parse_output_lengths(text: str, flag: str = "--output-len", minimum: int = 2) -> OutputLengths:
    """``N`` or ``LOW-HIGH`` (inclusive), each ``minimum`` .. MAX_TOKENS, or BenchError naming ``flag``."""
    parts = text.strip().split("-")
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        low, high = int(parts[0]), int(parts[-1])
    except ValueError:
        raise BenchError(f"{flag}: expected N or LOW-HIGH tokens, got {text!r}") from None
    if not minimum <= low <= high <= MAX_TOKENS:
        bounds = f"{minimum} <= LOW <= HIGH <= {MAX_TOKENS}"
        raise BenchError(f"{flag}: lengths must satisfy {bounds}, got {text!r}")
    return OutputLengths(low, high)
