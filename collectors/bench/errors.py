"""The errors a sweep raises on purpose: each names the field or peer that was wrong."""

from __future__ import annotations


class BenchError(ValueError):
    """Bad input to a sweep (a flag's value), named in the message."""


class ServerUnreachable(ConnectionError):
    """The server did not answer (connection refused, timeout, not an SGLang server)."""


class KnobError(PermissionError):
    """The server refused or did not apply the speculation knob."""
