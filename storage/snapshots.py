"""When a server's ``/server_info`` deserves a new stored snapshot: the one stable hash of the document.

The collector compares it between scrapes and ``Database.record_server_info`` against the latest stored
snapshot, so both must leave out the same keys: the values that change on their own while the server runs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Keys that change from one scrape to the next without the configuration changing; left out at every depth
# (a PD router's answer nests whole worker documents, each with its own internal_states).
VOLATILE_SERVER_INFO_KEYS = frozenset(
    {
        "internal_states",
        "last_gen_throughput",
        "avg_spec_accept_length",
        "memory_usage",
        "status",
        "load",
        "timestamp",
    }
)


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_SERVER_INFO_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def stable_server_info_hash(info: Any) -> str:
    """SHA-256 of the document without its volatile keys (key order and spacing do not matter)."""
    blob = json.dumps(_stable(info), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
