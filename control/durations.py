"""Durations as operators type them (``5s``, ``500ms``, ``2m``, ``1h``, plain seconds ``2.5``): the one parser
every duration flag of the CLI and every duration field of the console goes through, and the range check a
flag or field adds. Standard library only: the CLI's option declarations import it when ``--help`` runs."""

from __future__ import annotations

import math


class DurationError(ValueError):
    """A duration that does not parse or is out of its range; the message names the flag or field."""


def parse_duration(text: str, flag: str = "--interval") -> float:
    """``5s``, ``500ms``, ``2m``, ``1h`` or plain seconds (``2.5``), as seconds; 0, negative, inf and nan are
    no durations."""
    raw = (text or "").strip().lower()
    number, scale = raw, 1.0
    # longest suffix first, so "ms" is not read as "m" + "s"
    for suffix, unit in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if raw.endswith(suffix):
            number, scale = raw[: -len(suffix)], unit
            break
    try:
        value = float(number) * scale
    except ValueError:
        raise DurationError(f"{flag} must be a duration like 5s, 500ms or 2m, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise DurationError(f"{flag} must be a positive duration, got {text!r}")
    return value


def duration_text(seconds: float) -> str:
    """``seconds`` as a duration is typed (``100ms``, ``90s``, ``10m``, ``720h``: the largest unit it is a
    whole number of): how an allowed range is said."""
    for unit, size in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds * 1000:g}ms"


def allowed_range(minimum_s: float, maximum_s: float) -> str:
    """How a flag's or field's range is said, in its help and in its error."""
    return f"between {duration_text(minimum_s)} and {duration_text(maximum_s)}"


def parse_duration_within(text: str, flag: str, minimum_s: float, maximum_s: float) -> float:
    """``parse_duration``, then the range that flag takes: a duration that is no sane value for it (a 1 ms
    collection interval, a 30 s operator's hold) is refused in the same one line, naming the range."""
    seconds = parse_duration(text, flag)
    if not minimum_s <= seconds <= maximum_s:
        allowed = allowed_range(minimum_s, maximum_s)
        raise DurationError(f"{flag} must be {allowed}, got {str(text).strip()!r}")
    return seconds
