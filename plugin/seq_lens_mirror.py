"""Off means off on flashinfer: a gated batch's lengths are known on the host; the next batch waits for none.

Runs INSIDE SGLang (registered by ``gated_decode.register``, the same entry point), so it imports only
the standard library and, lazily, torch.

Why. With the gated verify planned as decode (``gated_decode``), a gated step's GPU time on the H200
with flashinfer matched a plain server's (4.73 against 4.69 ms at batch 1, 5.85 against 6.05 ms at 64), yet
the knob at 0 served only 0.75-0.88 of the plain server at every load (data/gpu-runs/NOTEBOOK.md,
"Flashinfer"). The difference was host time: one ``cudaStreamSynchronize`` of about 1 ms per gated step, where
a plain server has none. Flashinfer plans on host-side lengths (``needs_cpu_seq_lens``), and an EAGLE v2
step's new lengths depend on how many drafts were accepted, so before every batch SGLang's
``FutureMap.resolve_seq_lens_cpu`` waits for the previous verify to publish them and copies them to the host
(0.5.17 and 0.5.23). While drafting, that wait overlaps the draft model's extend; a gated batch has no draft
work left to hide it behind (the extend is skipped at knob 0), so the GPU idles while the host plans the next
step. Triton plans on device lengths and never waits (``needs_cpu_seq_lens = False``): its knob-at-0 served
0.97-0.99.

What. A gated batch's verify is one token per request whose only outcome is the bonus token: every request
in it is exactly one token longer afterwards. A prefill publishes each request's prefilled length, which the
prefill batch holds on the host already (SGLang's spec-v2 convention, 0.5.17 and 0.5.23:
``new_seq_lens = batch.seq_lens``). This module remembers, per request (its ``Req`` object), the length it
will start its next batch with, from the last gated batch or its prefill since (``SeqLensMirror``). A
request that joins a gated load (its prefill) therefore costs no host wait either; at 64 requests of 256
tokens one joins about every 4 steps. When every request of the batch being resolved is remembered,
``resolve_seq_lens_cpu`` runs SGLang's own device-only path (its ``needs_cpu_seq_lens = False`` branch:
the event wait and the gather on the GPU, no host copy) and the host lengths come from the mirror.
Anything else resolves as SGLang does: a step after drafting (its acceptance is data), a mixed or prebuilt
batch, a failed step.

Safety. The first remembered resolve and every ``SPECTOWER_SEQ_LENS_VERIFY_EVERY``-th after it (default
256; 0 never) also run SGLang's host copy and compare. Any difference turns the mirror off for the process,
logs the first one, and keeps SGLang's lengths; so does any failure of the mirror's own bookkeeping (it
never raises into SGLang's scheduler). ``SPECTOWER_SEQ_LENS_MIRROR=0`` turns it off from the start. The
counts are in the knob plugin's state block (``seq_lens_mirror``). Reviewed against both versions'
scheduler: no other path changes a running request's length between the hooks (retraction and
re-prefill, aborts, chunked and mixed prefill, PD-disaggregation's prebuilt joins, which are unknown to
the mirror and so resolved by SGLang).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import sglang_targets

logger = logging.getLogger(__name__)

DISABLE_ENV = "SPECTOWER_SEQ_LENS_MIRROR"
VERIFY_ENV = "SPECTOWER_SEQ_LENS_VERIFY_EVERY"
DEFAULT_VERIFY_EVERY = 256
FUTURE_MAP_CLASS = ("sglang.srt.managers.overlap_utils", "FutureMap")
RESOLVE_METHOD = "resolve_seq_lens_cpu"


def _verify_every_from_env() -> int:
    try:
        return max(0, int(os.environ.get(VERIFY_ENV, DEFAULT_VERIFY_EVERY)))
    except ValueError:
        return DEFAULT_VERIFY_EVERY


class SeqLensMirror:
    """Per request (SGLang's ``Req``, hashed by identity), its length when its next batch starts, known from
    the last batch it ran in: a gated decode batch (one token longer) or its prefill (SGLang's spec-v2
    convention: the prefilled length).

    One per scheduler process (SGLang calls the hooks on its scheduler thread). ``active`` turns on at the
    first resolve whose backend needs host lengths: a triton server never pays the bookkeeping."""

    # A prefilled request normally decodes in the next batch; one aborted first would stay: a bound.
    MAX_PREFILLED = 4096

    def __init__(self, enabled: bool | None = None, verify_every: int | None = None) -> None:
        self.enabled = os.environ.get(DISABLE_ENV, "1") != "0" if enabled is None else enabled
        self.verify_every = _verify_every_from_env() if verify_every is None else max(0, verify_every)
        self.active = False
        self.decoded: dict[Any, int] = {}  # the last gated batch's requests
        self.prefilled: dict[Any, int] = {}  # requests prefilled since, not decoded yet
        self.hits = 0
        self.syncs = 0
        self.verified = 0
        self.mismatches = 0
        # Gated batches SGLang's host copy resolved: a miss inside a gated stream, where the mirror should
        # answer every batch but the first after drafting (what is left of off on flashinfer at 64
        # requests, 0.94 of plain on 2026-12-02, is either such misses or host time per gated step).
        self.gated_syncs = 0
        self.last_by_sglang = False  # the last resolve, until the batch it resolved has run
        self.off_reason: str | None = None
        self.spent_s = 0.0  # its own bookkeeping in SGLang's scheduler, SGLang's calls excluded

    def lengths_for(self, reqs: Sequence[Any]) -> list[int] | None:
        """Every request's length if each one is remembered, else None (SGLang resolves it)."""
        if not self.enabled or not reqs:
            return None
        decoded, prefilled = self.decoded, self.prefilled
        lengths = []
        for req in reqs:
            length = decoded.get(req)
            if length is None:
                length = prefilled.get(req)
                if length is None:
                    return None
            lengths.append(length)
        return lengths

    def after_decode(self, reqs: Sequence[Any], lengths: Sequence[int] | None, gated: bool) -> None:
        """A decode batch ran: a gated one grew each request by its bonus token; a drafting one's growth is
        its acceptance, data on the GPU."""
        if gated and self.last_by_sglang:
            self.gated_syncs += 1
        self.last_by_sglang = False
        for req in reqs:
            self.prefilled.pop(req, None)
        if gated and lengths is not None and len(lengths) == len(reqs):
            # Replaced, not merged: a request that left the batch (finished, retracted) is forgotten.
            self.decoded = {req: int(length) + 1 for req, length in zip(reqs, lengths, strict=True)}
        else:
            self.decoded = {}

    def after_prefill(self, reqs: Sequence[Any], lengths: Sequence[int] | None) -> None:
        """A prefill ran: SGLang publishes each request's prefilled length as its next batch's start."""
        self.last_by_sglang = False
        for req in reqs:
            self.decoded.pop(req, None)  # a retracted request prefilled again
        if lengths is None or len(lengths) != len(reqs):
            for req in reqs:
                self.prefilled.pop(req, None)
            return
        if len(self.prefilled) + len(reqs) > self.MAX_PREFILLED:
            self.prefilled = {}
        self.prefilled.update(zip(reqs, (int(length) for length in lengths), strict=True))

    def forget(self) -> None:
        """A mixed or unknown batch ran (or a step failed): SGLang says every length from here."""
        self.last_by_sglang = False
        self.decoded = {}
        self.prefilled = {}

    def due_for_check(self) -> bool:
        """The first remembered resolve is checked, then every ``verify_every``-th."""
        return self.verify_every > 0 and (self.hits == 1 or self.hits % self.verify_every == 0)

    def check(self, reqs: Sequence[Any], predicted: Sequence[int], actual: Sequence[int]) -> bool:
        """Compare a remembered resolve with SGLang's host copy; a difference turns the mirror off."""
        self.verified += 1
        if list(predicted) == list(actual):
            return True
        self.mismatches += 1
        if len(predicted) != len(actual):
            self.off_reason = f"{len(predicted)} lengths remembered, SGLang gave {len(actual)}"
        else:
            first = next(i for i, (p, a) in enumerate(zip(predicted, actual, strict=True)) if p != a)
            name = getattr(reqs[first], "rid", reqs[first])
            self.off_reason = f"request {name!r}: remembered {predicted[first]}, SGLang {actual[first]}"
        self.turn_off(self.off_reason)
        return False

    def turn_off(self, reason: str) -> None:
        """Off for this process: SGLang's host copy resolves every batch from now on."""
        self.off_reason = reason
        self.enabled = False
        self.forget()
        logger.warning("spectower seq-lens mirror: OFF for this process (%s); SGLang's host copy resolves "
                       "every batch from now on", reason)  # fmt: skip

    def report(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "active": self.active,
            "resolved_from_mirror": self.hits,
            "resolved_by_sglang": self.syncs,
            "verified": self.verified,
            "mismatches": self.mismatches,
            "gated_by_sglang": self.gated_syncs,
            "off_reason": self.off_reason,
            "seconds": self.spent_s,
        }


_MIRROR: SeqLensMirror | None = None
_REGISTERED = False


def registered() -> bool:
    """Whether this process hooked ``resolve_seq_lens_cpu`` (what the knob plugin's state block shows)."""
    return _REGISTERED


def mirror() -> SeqLensMirror:
    """This process's mirror (created on first use)."""
    global _MIRROR
    if _MIRROR is None:
        _MIRROR = SeqLensMirror()
    return _MIRROR


def _reqs(batch: Any) -> list[Any]:
    # The request objects themselves are the keys: SGLang's Req hashes by identity, so a retried request id
    # is a new key (a prebuilt join on a PD decode server never passes the forward hook), and a retracted
    # request keeps its object.
    return list(getattr(batch, "reqs", ()))


def _answer(state: SeqLensMirror, batch: Any) -> tuple[list[Any], list[int]] | None:
    """(requests, their lengths) when the mirror answers this batch's resolve, else None."""
    if getattr(batch.spec_info, "future_indices", None) is None:  # SGLang returns early and sets nothing
        return None
    reqs = _reqs(batch)
    predicted = state.lengths_for(reqs)
    return None if predicted is None else (reqs, predicted)


def hook_resolve_seq_lens_cpu(original: Callable[..., Any], future_map: Any, batch: Any, *args: Any,
                              **kwargs: Any) -> Any:  # fmt: skip
    """``FutureMap.resolve_seq_lens_cpu(batch, ...)``: the device-only path plus remembered host lengths.
    The mirror's own failure never reaches SGLang: it turns the mirror off and SGLang resolves."""
    state = mirror()
    needs = getattr(future_map, "needs_cpu_seq_lens", False)
    if not needs:
        return original(future_map, batch, *args, **kwargs)
    state.active = True  # from the first batch on, a prefill included: its lengths are remembered too
    if getattr(batch, "spec_info", None) is None:  # SGLang resolves nothing for it
        return original(future_map, batch, *args, **kwargs)
    start = time.perf_counter()
    try:
        answer = _answer(state, batch)
    except Exception as exc:  # a batch shaped unlike 0.5.17's or 0.5.23's
        state.turn_off(f"could not read the batch ({exc!r})")
        answer = None
    state.spent_s += time.perf_counter() - start
    if answer is None:
        state.syncs += 1
        state.last_by_sglang = True
        return original(future_map, batch, *args, **kwargs)
    reqs, predicted = answer
    state.hits += 1
    state.last_by_sglang = False
    if state.due_for_check():
        result = original(future_map, batch, *args, **kwargs)
        try:
            state.check(reqs, predicted, [int(x) for x in batch.seq_lens_cpu.tolist()])
        except Exception as exc:
            state.turn_off(f"could not compare with SGLang's lengths ({exc!r})")
        return result
    future_map.needs_cpu_seq_lens = False  # SGLang's own device-only branch: the wait and gather, no copy
    try:
        result = original(future_map, batch, *args, **kwargs)
    finally:
        future_map.needs_cpu_seq_lens = needs
    start = time.perf_counter()
    import torch

    batch.seq_lens_cpu = torch.tensor(predicted, dtype=torch.int64)
    batch.seq_lens_sum = sum(predicted)
    state.spent_s += time.perf_counter() - start
    return result


Noted = tuple[str, list[Any], list[int] | None]


def before_forward(batch: Any, decode: bool) -> Noted | None:
    """What ``after_forward`` needs of a batch: its kind, requests and start lengths. None when the mirror
    is idle (a triton server) or the batch is neither a plain decode batch nor a prefill."""
    state = mirror()
    if not state.active or not state.enabled:
        return None
    start = time.perf_counter()
    try:
        if getattr(batch, "is_extend_in_batch", False):  # a mixed batch: prefill and decode in one
            state.forget()
            return None
        spec_info = getattr(batch, "spec_info", None)
        is_verify_input = getattr(spec_info, "is_verify_input", None)
        if decode and callable(is_verify_input) and is_verify_input():  # 0.5.23's PP relay: built elsewhere
            state.forget()
            return None
        lengths = getattr(batch, "seq_lens_cpu", None)
        return "decode" if decode else "prefill", _reqs(batch), None if lengths is None else lengths.tolist()
    except Exception as exc:  # never into SGLang's forward
        state.turn_off(f"could not read the batch ({exc!r})")
        return None
    finally:
        state.spent_s += time.perf_counter() - start


def after_forward(noted: Noted | None, worker: Any, ran: bool = True) -> None:
    """The batch ran (a decode batch at the worker's step count: 0 is a gated one-token verify), or failed."""
    if noted is None:
        return
    state = mirror()
    start = time.perf_counter()
    try:
        if not ran:
            state.forget()
            return
        kind, reqs, lengths = noted
        if kind == "prefill":
            state.after_prefill(reqs, lengths)
        else:
            state.after_decode(reqs, lengths, gated=getattr(worker, "speculative_num_steps", None) == 0)
    except Exception as exc:
        state.turn_off(f"could not note the batch ({exc!r})")
    finally:
        state.spent_s += time.perf_counter() - start


def missing_target() -> str | None:
    """What the hook needs that this SGLang lacks (0.5.17 and 0.5.23 have it), else None."""
    missing = sglang_targets.missing_methods(*FUTURE_MAP_CLASS, [RESOLVE_METHOD])
    return missing[0] if missing else None


def register() -> str | None:
    """Registers the resolve hook (the forward hook is ``gated_decode``'s); returns what it hooked."""
    if not mirror().enabled:
        return None
    missing = missing_target()
    if missing is not None:
        logger.warning("spectower seq-lens mirror: NOT hooking (missing %s)", missing)
        return None
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    module_name, class_name = FUTURE_MAP_CLASS
    HookRegistry.register(f"{module_name}.{class_name}.{RESOLVE_METHOD}", hook_resolve_seq_lens_cpu,
                          HookType.AROUND)  # fmt: skip
    global _REGISTERED
    _REGISTERED = True
    return f"{class_name}.{RESOLVE_METHOD} (a gated batch's lengths remembered)"
