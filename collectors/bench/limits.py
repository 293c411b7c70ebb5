"""How large a benchmark's numbers may be: one place for the bounds every bench flag is checked against.

A request shape or a client count past these is a typo, not a benchmark: without a bound, ``--max-concurrency
1e20`` had the load walker allocate clients until the kernel killed it, and ``--input-len 1e20`` built a
prompt for ever, each while holding the server's knob.
"""

from __future__ import annotations

from .errors import BenchError

MAX_CONCURRENCY = 4096  # clients at once; SGLang's max_running_requests is far below
MAX_TOKENS = 1 << 20  # a prompt or an answer, in tokens (words): past any model's context
MAX_ROUNDS = 1000
MAX_WARMUP = 100_000  # warm-up requests before a point
MAX_REQUESTS_PER_LEVEL = 10_000_000


def check_between(value: int, flag: str, lo: int, hi: int) -> int:
    """``value`` when ``lo <= value <= hi``, else a ``BenchError`` naming ``flag`` and the range."""
    if not lo <= value <= hi:
        raise BenchError(f"{flag}: must be between {lo} and {hi}, got {value}")
    return value
