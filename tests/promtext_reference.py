"""The reference for collectors/promtext.py: what spectower read before it had its own parser, i.e. the
lines of the families asked for (HELP lines dropped) through prometheus_client's text parser. Used by
tests only, to show the collector's parser returns the same samples."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families
from spectower.collectors.promtext import MetricsParseError, PromSample


def _line_name(line: str) -> str | None:
    if line.startswith("#"):
        parts = line.split(None, 3)
        return parts[2] if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") else None
    end = len(line)
    for ch in ("{", " "):
        i = line.find(ch)
        if i != -1:
            end = min(end, i)
    return line[:end]


def select_lines(text: str, families: frozenset[str]) -> str:
    keep: list[str] = []
    for line in text.split("\n"):
        if not line or line.startswith("# HELP"):
            continue
        name = _line_name(line)
        if name is None:
            continue
        if name in families or name.rsplit("_", 1)[0] in families:
            keep.append(line)
    return "\n".join(keep) + "\n" if keep else ""


def reference_parse(text: str, families: frozenset[str]) -> list[PromSample]:
    """prometheus_client's reading of ``families`` in ``text``; MetricsParseError where it refuses it."""
    if text and not text.endswith("\n"):
        raise MetricsParseError("truncated")
    out: list[PromSample] = []
    try:
        for fam in text_string_to_metric_families(select_lines(text, families)):
            for s in fam.samples:
                value = float(s.value)
                if math.isfinite(value):
                    out.append(PromSample(s.name, fam.name, fam.type, dict(s.labels), value))
    except Exception as exc:  # the parser raises ValueError, IndexError, KeyError... on garbage
        raise MetricsParseError(f"{type(exc).__name__}: {exc}") from None
    return out
