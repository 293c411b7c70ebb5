"""The request mix of each exploring part: what the requests a window's exploring part started with accepted
while it drafted them, so that a lean of its drafted steps can be told apart from a batch that was larger.

Standard library only (it runs inside SGLang; the simulator's ranks use it too, plugin/engine_counters.py
publishes it as the counters' ``mix`` block).

Why: requests accept differently, and a stream keeps each request for as many steps as it needs. A gated
stream holds a request for its length L, a drafting one for L / a, so a steady drafting stream's tokens per
request-step are the HARMONIC mean H of the accept lengths a over a gated stream's slots (weights 1 / a),
while an exploring part, which starts from the gated stream's batch, starts at their ARITHMETIC mean A; its
batch drifts toward H only as its requests turn over, and a part capped at 3 s lasts about half a long
request's drafted life (plugin/explore.py, WINDOW_EXPLORE_MAX_S). On a GPU the parts' drafted steps read
1.03-1.05x always on's tok/s at 48. With the counters' ``slots`` (per step, its requests) A / H says how much
of that is the requests' mix, and H what the part's drafted steps would commit per request once turned over.

What (``PartMix``): at a part's first batch (a batch the ceiling gates, drafted in a window's exploring part),
its requests and each one's cumulative (verifies, correct drafts) (``sglang_targets.spec_counts``); at the
part's end (the first batch out of it) the same request objects again. A request with a verify in between
accepted ``a = 1 + d(correct drafts) / d(verifies)`` tokens per verify; one that finished within the part
keeps the counts it finished with; one without a verify is left out. Per bin of the part's first batch the
sums ``parts``, ``requests``, ``accept_sum`` (of a) and ``inverse_sum`` (of 1 / a): A = accept_sum / requests,
H = requests / inverse_sum. A part in which a batch ran gated (above the stream's limit), its first one
included, counts nothing: its verifies are not all drafted ones. So does a part whose first batch cannot be
read (no request list, or one that is not the batch being decided).

When a reading is taken: SGLang applies a decode result to its requests right after the plugin's
on_verify_complete hook hears it. The normal loop applies a batch's result before the next batch launches,
so a reading at a launch holds every earlier step and none of its own. The overlap loop launches the next
batch first and applies the previous result after it: a reading at a launch would miss the step before it
(the gated stream's last at a part's start, the part's last at its end). So a reading waits for the results
of the launches before it (``due``: EngineCounters.launches_pending) and is taken as the batch's own result
arrives, before SGLang applies it (``result``): in either loop the part's record spans exactly its own steps.
A launch that never gets a result shifts a reading by one step.

Cost: O(batch) at a part's start and at its end, O(1) per batch and per result otherwise; at most one part's
requests are held, from its start to its end's reading.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import sglang_targets
from .counter_blocks import MIX_FIELDS

Counts = tuple[int, int] | None  # a request's cumulative (verifies, correct drafts); None: unreadable


@dataclass
class _Part:
    """The part being measured: its first batch's size and requests, their counts at its start (None until
    read), and the results still due before each reading (``end_due`` None: the part has not ended)."""

    batch_size: int
    requests: list[Any]
    start_due: int
    before: list[Counts] | None = None
    end_due: int | None = None


class PartMix:
    """One scheduler's (one DP rank's) exploring parts and their request mix. Not thread-safe by itself:
    SGLang calls the hooks on the scheduler thread. ``read``: a request's counts (``sglang_targets.
    spec_counts``)."""

    def __init__(self, read: Callable[[Any], Counts] = sglang_targets.spec_counts) -> None:
        self._read = read
        self.sums: dict[int, list[float]] = {}  # first batch size -> MIX_FIELDS' sums
        self.unread = 0  # parts whose first batch could not be read
        self._in_part = False  # the last batch decided lay in an exploring part
        self._part: _Part | None = None

    def batch(self, in_part: bool, drafts: bool, batch_size: int,
              requests: Callable[[], Sequence[Any] | None], due: int = 0) -> None:  # fmt: skip
        """A decode batch of ``batch_size`` is decided, before it launches: it lies in a window's exploring
        part (``in_part``) and drafts (``drafts``) or not; ``requests()``: its requests, asked only at a
        part's first batch; ``due``: the launches before it whose results have not arrived yet."""
        part = self._part
        if in_part and not self._in_part:
            self._part = self._begin(batch_size, requests, due) if drafts else None
        elif in_part and not drafts:
            self._part = None  # gated above the stream's limit: not a drafted part any more
        elif not in_part and self._in_part and part is not None:
            part.end_due = due
            if due <= 0:
                self._finish(part)
        self._in_part = in_part

    def result(self) -> None:
        """A decode result arrived, before SGLang applies it to its requests: a reading that waits for it is
        taken (the module docstring, "When a reading is taken"); one due after it counts down."""
        part = self._part
        if part is None:
            return
        if part.before is None:
            if part.start_due > 0:
                part.start_due -= 1
            else:
                part.before = [self._read(req) for req in part.requests]
        if part.end_due is not None:
            if part.end_due > 0:
                part.end_due -= 1
            else:
                self._finish(part)

    def _begin(self, batch_size: int, requests: Callable[[], Sequence[Any] | None], due: int) -> _Part | None:
        """The part whose first batch this is, its start read now where no result is due; None (counted in
        ``unread``) where its requests cannot be read."""
        try:
            found = requests()
        except Exception:  # a batch the loop cannot show: the part is not measured, the loop runs on
            found = None
        if found is None or len(found) != batch_size:
            self.unread += 1
            return None
        part = _Part(batch_size, list(found), start_due=due)
        if due <= 0:
            part.before = [self._read(req) for req in part.requests]
        return part

    def _finish(self, part: _Part) -> None:
        """The part's end reading: each request's accept per verify since the start, summed into its bin (a
        part whose start was never read, its first batch's result lost, adds nothing)."""
        self._part = None
        if part.before is None:
            return
        accepts = []
        for req, before in zip(part.requests, part.before, strict=True):
            after = self._read(req)
            if before is None or after is None:
                continue
            verifies, correct = after[0] - before[0], after[1] - before[1]
            if verifies >= 1 and correct >= 0:
                accepts.append(1.0 + correct / verifies)
        sums = self.sums.setdefault(part.batch_size, [0.0] * len(MIX_FIELDS))
        for i, value in enumerate((1, len(accepts), sum(accepts), sum(1.0 / a for a in accepts))):
            sums[i] += value

    def block(self, bins: Sequence[int]) -> dict[str, list[Any]]:
        """The published ``mix`` block: each field's sums per bin of ``bins`` (a part's first batch counts in
        the smallest bin >= its size, the last bin at most, as the counters bin a step)."""
        out = {field: [0.0] * len(bins) for field in MIX_FIELDS}
        for size, sums in self.sums.items():
            i = min(bisect.bisect_left(bins, size), len(bins) - 1)
            for field, value in zip(MIX_FIELDS, sums, strict=True):
                out[field][i] += value
        # parts and requests are counts: published as whole numbers, the sums of a and 1 / a to 1e-9
        return {field: [int(v) if field in ("parts", "requests") else round(v, 9) for v in values]
                for field, values in out.items()}  # fmt: skip
