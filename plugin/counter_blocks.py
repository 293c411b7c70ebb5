"""The shape of a published decode-counters snapshot, and reading it without trusting it: the modes and
fields every plugin publishes (``validate``) and the optional blocks only some publish, each read by its own
helper that answers None where a snapshot lacks it (an older plugin) or holds a malformed one (a bad block
must not stop a reader of the counts beside it).

plugin/engine_counters.py documents each block (what it counts, why, from which plugin version) and counts
them; it re-exports every public name here, so readers import them from there. Standard library only (it
runs inside SGLang).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

MODES = ("drafted", "gated")
FIELDS = ("steps", "tokens", "time_s")
# The ``extend`` block's two kinds of steady gated step.
EXTEND_KINDS = ("kept", "skipped")
# kind -> field -> per bin
ExtendBlock = dict[str, dict[str, list[float]]]
# The ``prefilled`` block: mode -> field -> per bin, the steps that carried a prefill.
PrefilledBlock = dict[str, dict[str, list[float]]]
# The ``mix`` block's sums per bin (plugin/part_mix.py): exploring parts, their requests with a verify, the
# sum of those requests' accept lengths and of their inverses.
MIX_FIELDS = ("parts", "requests", "accept_sum", "inverse_sum")


def _counts(values: list[Any]) -> bool:
    """Whether every one of ``values`` is a finite non-negative number (not a bool): what a counted list
    holds. /server_info is JSON, whose Python reader takes ``Infinity``: one such value would be stored and
    read back as a rate of 0."""
    return all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
               for v in values)  # fmt: skip


def extend_block(snapshot: Mapping[str, Any] | None) -> ExtendBlock | None:
    """A snapshot's ``extend`` block when it has a well-formed one (lists as long as its bins, non-negative
    numbers), else None: a plugin before 0.4.6 has none, and a malformed one must not stop a reader of the
    counters it sits beside."""
    return _fields_block(snapshot, "extend", EXTEND_KINDS)


def prefilled_block(snapshot: Mapping[str, Any] | None) -> PrefilledBlock | None:
    """A snapshot's ``prefilled`` block (the steps that carried a prefill, per mode) when it has a
    well-formed one, else None: a plugin before 0.4.14 has none."""
    return _fields_block(snapshot, "prefilled", MODES)


def _fields_block(snapshot: Mapping[str, Any] | None, name: str,
                  kinds: Sequence[str]) -> dict[str, dict[str, list[float]]] | None:  # fmt: skip
    """A snapshot's block ``name`` of ``kinds``, each with the three fields (steps, tokens, time_s) as lists
    as long as its bins of non-negative numbers, else None (absent or malformed: the counters beside it are
    read as they are)."""
    if snapshot is None:
        return None
    block, bins = snapshot.get(name), snapshot.get("bins")
    if not isinstance(block, Mapping) or not isinstance(bins, list):
        return None
    out: dict[str, dict[str, list[float]]] = {}
    for kind in kinds:
        entry = block.get(kind)
        if not isinstance(entry, Mapping):
            return None
        out[kind] = {}
        for field in FIELDS:
            values = entry.get(field)
            if not isinstance(values, list) or len(values) != len(bins):
                return None
            if not _counts(values):
                return None
            out[kind][field] = list(values)
    return out


def outside_block(snapshot: Mapping[str, Any] | None) -> dict[str, list[float]] | None:
    """A snapshot's ``outside`` block when it has a well-formed one (a list per mode as
    long as its bins, non-negative numbers), else None: a plugin before 0.4.13 has none."""
    return _lists_block(snapshot, "outside", MODES)


def slots_block(snapshot: Mapping[str, Any] | None) -> dict[str, list[float]] | None:
    """A snapshot's ``slots`` block (per mode, the batch sizes of its counted steps summed per bin) when it
    has a well-formed one, else None: a plugin before 0.4.15 has none."""
    return _lists_block(snapshot, "slots", MODES)


def mix_block(snapshot: Mapping[str, Any] | None) -> dict[str, list[float]] | None:
    """A snapshot's ``mix`` block (the exploring parts' request mix: ``MIX_FIELDS`` per bin of a part's first
    batch) when it has a well-formed one, else None: a plugin before 0.4.15 has none."""
    return _lists_block(snapshot, "mix", MIX_FIELDS)


def _lists_block(snapshot: Mapping[str, Any] | None, name: str,
                 keys: Sequence[str]) -> dict[str, list[float]] | None:  # fmt: skip
    """A snapshot's block ``name``: for each of ``keys`` a list as long as its bins of non-negative numbers
    (as floats), else None (absent or malformed: the counters beside it are read as they are)."""
    if snapshot is None:
        return None
    block, bins = snapshot.get(name), snapshot.get("bins")
    if not isinstance(block, Mapping) or not isinstance(bins, list):
        return None
    out: dict[str, list[float]] = {}
    for key in keys:
        values = block.get(key)
        if not isinstance(values, list) or len(values) != len(bins):
            return None
        if not _counts(values):
            return None
        out[key] = [float(v) for v in values]
    return out


def validate(snapshot: object) -> str | None:
    """Why ``snapshot`` is not a counters block of this shape, or None (for readers of /server_info). The
    optional blocks (``settling``, ``extend``, ``outside``, ``prefilled``, ``slots``, ``mix``) are not judged
    here: a reader takes each through its own helper (``extend_block``, ``outside_block``,
    ``prefilled_block``, ``slots_block``, ``mix_block``), which leaves a malformed one out, so an older
    plugin's snapshot, or a bad diagnostic, never stops the counts."""
    if not isinstance(snapshot, dict):
        return "counters must be an object"
    bins = snapshot.get("bins")
    if not isinstance(bins, list) or not bins or not all(isinstance(b, int) and b > 0 for b in bins):
        return "counters.bins must be a non-empty list of positive integers"
    if bins != sorted(set(bins)):
        return "counters.bins must be strictly ascending"
    for mode in MODES:
        block = snapshot.get(mode)
        if not isinstance(block, dict):
            return f"counters.{mode} must be an object"
        for field in FIELDS:
            values = block.get(field)
            if not isinstance(values, list) or len(values) != len(bins):
                return f"counters.{mode}.{field} must be a list as long as bins"
            if not _counts(values):
                return f"counters.{mode}.{field} must hold finite non-negative numbers"
    return None
