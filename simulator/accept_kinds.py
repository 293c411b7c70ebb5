"""Requests that accept differently: ``sim serve --accept-kinds 4:0.5,2:0.5``.

Real loads mix requests whose drafts land more or less often (code against chat; the GPU check's constructed
pair: a fixed point that accepts 4 tokens per verify step and a 2-cycle that accepts 2). A kind is an accept
length (tokens per verify step, the bonus token included) and the share of requests that have it. A drafted
step's time is still the profile's (a verify costs what it costs whatever lands); each request then commits
its own kind's tokens. So a drafting stream keeps the requests that accept less for longer, and its batches
hold more of them than a gated stream's do: the request-mix lean that exploration must not measure
(plugin/explore.py, issue #32).

Without kinds every request accepts the profile's ``accept_length`` at the batch size, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Knuth's multiplicative hash: a request's kind by its index, the same on every run
_MULTIPLIER = 2654435761
SHARE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class AcceptKind:
    accept: float  # tokens per verify step, the bonus token included (>= 1)
    share: float  # of the requests (> 0; the kinds' shares sum to 1)


def parse_accept_kinds(text: str, max_accept: float, flag: str = "--accept-kinds") -> tuple[AcceptKind, ...]:
    """``ACCEPT:SHARE,...`` with shares summing to 1 and each accept within 1..``max_accept`` (the profile's
    draft tokens), or ValueError naming ``flag``."""
    kinds = []
    for part in text.split(","):
        accept_text, _, share_text = part.strip().partition(":")
        try:
            accept, share = float(accept_text), float(share_text)
        except ValueError:
            raise ValueError(f"{flag}: expected ACCEPT:SHARE,... (e.g. 4:0.5,2:0.5), got {text!r}") from None
        if not (math.isfinite(accept) and 1.0 <= accept <= max_accept):
            why = f"an accept length must be within 1..{max_accept:g}"
            raise ValueError(f"{flag}: {why}, got {accept_text!r}")
        if not (math.isfinite(share) and 0.0 < share <= 1.0):
            raise ValueError(f"{flag}: a share must be within (0, 1], got {share_text!r}")
        kinds.append(AcceptKind(accept, share))
    total = sum(k.share for k in kinds)
    if abs(total - 1.0) > SHARE_TOLERANCE:
        raise ValueError(f"{flag}: the shares must sum to 1, got {total:g}")
    return tuple(kinds)


def kind_of(index: int, kinds: tuple[AcceptKind, ...]) -> float | None:
    """The accept length of request ``index`` (None without kinds): its kind by a hash of the index."""
    if not kinds:
        return None
    u = (index * _MULTIPLIER) % (1 << 32) / (1 << 32)
    edge = 0.0
    for kind in kinds:
        edge += kind.share
        if u < edge:
            return kind.accept
    return kinds[-1].accept


def harmonic_mean(kinds: tuple[AcceptKind, ...]) -> float:
    """Tokens per request-step of a drafting stream whose requests are equally long in tokens: each request
    stays in the batch for length / accept steps, so the batch is weighted by 1 / accept."""
    return 1.0 / sum(k.share / k.accept for k in kinds)


def arithmetic_mean(kinds: tuple[AcceptKind, ...]) -> float:
    """Tokens per request-step of a drafting batch taken from a gated stream (every request equally long)."""
    return sum(k.share * k.accept for k in kinds)
