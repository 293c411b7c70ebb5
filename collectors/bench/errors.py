"""The one error a sweep or a load walk raises on purpose for bad input; it names the flag.

A server that does not answer is the collectors' ``collectors.http.ServerUnreachable``; a knob the server
refuses is control's ``control.knob.KnobError`` (the sweep moves the knob through control's client).
"""

from __future__ import annotations


class BenchError(ValueError):
    """Bad input to a sweep (a flag's value), named in the message."""
