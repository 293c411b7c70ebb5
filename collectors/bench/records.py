"""What the client records about one streamed request."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass
class RequestRecord:
    """One request, timed on the client's monotonic clock (``time.perf_counter`` seconds).

    ``chunk_times`` / ``chunk_tokens``: arrival time of every streamed chunk that carried output and how many
    output tokens it carried (with speculation one chunk can carry several), so throughput can be counted
    over any time window.
    """

    index: int
    start: float
    warmup: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    e2e_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    success: bool = False
    aborted: bool = False  # cancelled before it finished (Ctrl-C), not a server error
    error: str | None = None
    spec_verify_ct: int | None = None  # /generate reports it per request

    @property
    def itl_s(self) -> list[float]:
        """Inter-token latencies as SGLang's client counts them: the gaps between streamed chunks."""
        times = self.chunk_times
        return [b - a for a, b in itertools.pairwise(times)]

    @property
    def decode_rate(self) -> float | None:
        """Output tokens/s of this request between its first and its last chunk, the last chunk left out.

        The last chunk of a speculative request carries only what was left to reach max_tokens (a capped
        step), so counting it would make every short request look slower than the server decodes."""
        times, tokens = self.chunk_times, self.chunk_tokens
        if not self.success or len(times) < 3 or times[-2] <= times[0]:
            tpot = self.tpot_s
            return 1.0 / tpot if tpot else None
        return sum(tokens[1:-1]) / (times[-2] - times[0])

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.e2e_s is None or self.output_tokens <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)
