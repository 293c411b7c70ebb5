"""Ports for the demo's servers: the one asked for, or the next free one (with a note saying so)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

DEFAULT_SEARCH = 50  # how many ports after the preferred one to try
HOST = "127.0.0.1"


class PortError(OSError):
    """No free port near the one asked for."""


@dataclass(frozen=True)
class PortChoice:
    port: int
    note: str | None  # set when the preferred port was taken


def is_free(port: int, host: str = HOST) -> bool:
    """Whether ``host:port`` can be bound right now (SO_REUSEADDR, as servers bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(
    preferred: int, what: str, taken: set[int] | None = None, search: int = DEFAULT_SEARCH
) -> PortChoice:
    """``preferred`` if free, else the next free port above it; ``taken`` are ports already handed out."""
    taken = taken or set()
    if not 1 <= preferred <= 65535:
        raise PortError(f"{what}: port must be between 1 and 65535, got {preferred}")
    for port in range(preferred, min(65536, preferred + search + 1)):
        if port in taken or not is_free(port):
            continue
        note = None if port == preferred else f"{what}: port {preferred} is taken, using {port}"
        return PortChoice(port, note)
    raise PortError(f"{what}: ports {preferred}..{preferred + search} are all taken; pass another port")
