"""What a server's speculation knob is, read from outside: its state as ``/server_info`` reports it
(``KnobState``, per DP rank), the result of a set (``SetResult``), the errors a knob command can meet, and the
checks made once before a set is sent (``check_target``, ``prepare_set``). The client that reads and writes it
over HTTP is ``control/knob.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..collectors.http import check_http_url, is_loopback_url
from ..collectors.sglang.server_info import RankState, ServerInfo, ServerInfoError, parse_server_info
from ..plugin import knob_contract
from ..plugin.knob_contract import KnobRequest
from .sglang_config import (
    PLUGIN_INSTALL_HINT,
    adaptive_config_of,
    bands_allow_zero,
    server_info_problems,
)

# The first plugin release that keeps who holds the knob (older ones take only a plain manual set).
OWNERSHIP_PLUGIN_VERSION = "0.2.0"
Outcome = Literal["confirmed", "not applied", "unknown"]
Writer = Literal["manual", "policy", "sweep"]
KnobMode = Literal["off", "on", "threshold", "mixed", "unknown"]

Target = int | Literal["on", "off"]


class KnobError(Exception):
    """Base of the knob client's errors; each concrete one also subclasses a builtin the CLI shows cleanly."""


class KnobAuthError(KnobError, PermissionError):
    """The server refused the key (HTTP 401/403): wrong or missing."""


class ServerUnreachableError(KnobError, ConnectionError):
    """Nothing answered at the URL (refused, timed out, reset)."""


class NotSGLangServerError(KnobError, LookupError):
    """Something answered, but not an SGLang server's /server_info."""


class PluginMissingError(KnobError, LookupError):
    """The server has no spectower plugin: /server_info has no ``spectower`` state."""


class KnobUnsupportedError(KnobError, ValueError):
    """The server cannot honour the knob: no speculation, no --speculative-adaptive, or no 0 in its bands."""


class KnobValueError(KnobError, ValueError):
    """The requested ceiling is not valid for this server."""


class KnobProtocolError(KnobError, ValueError):
    """The server answered something the contract does not allow."""


def knob_mode(value: int | None, max_running_requests: int | None) -> KnobMode:
    """How a ceiling reads: ``off`` (0), ``on`` (>= max_running_requests: every batch drafts), ``threshold``
    (drafting while the running batch is <= N), ``unknown`` (no value)."""
    if value is None:
        return "unknown"
    if value <= 0:
        return "off"
    if max_running_requests is not None and value >= max_running_requests:
        return "on"
    return "threshold"


def rank_to_dict(rank: RankState) -> dict[str, Any]:
    """One rank as `control get --json` and the Control page show it."""
    return {
        "dp_rank": rank.dp_rank,
        "plugin": rank.plugin,
        "spec_max_bs": rank.spec_max_bs,
        "batches_drafted": rank.batches_drafted,
        "batches_gated": rank.batches_gated,
        "plugin_version": rank.plugin_version,
        "active_num_steps": rank.active_num_steps,
        "accept_length": rank.accept_length,
        "owner": rank.owner,
        **_lock_dict(rank),
        "last_refused": _copy(rank.last_refused),
        "policy_last": _copy(rank.policy_last),
        "server_time": rank.server_time,
        "gated_decode": _copy(rank.gated_decode),
        "seq_lens_mirror": _copy(rank.seq_lens_mirror),
        "explore": _copy(rank.explore),
        "gc": _copy(rank.gc),
        "loop": _copy(rank.loop),
        "launcher": _copy(rank.launcher),
    }


def _copy(mapping: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return dict(mapping) if mapping else None


def _lock_dict(held: RankState | KnobState) -> dict[str, Any]:
    """The lock and the last write, as a rank and the whole server (its first rank's) report them."""
    return {"lock": _copy(held.lock), "lock_left_s": held.lock_left_s(), "last_write": _copy(held.last_write)}


@dataclass(frozen=True)
class KnobState:
    """What ``/server_info`` (the collectors' ``ServerInfo``) says about the knob and whether this server can
    honour it."""

    server_url: str
    info: ServerInfo
    bands_allow_zero: bool | None  # None: cannot tell from here (config file on another host)
    readiness_problems: tuple[str, ...] = ()

    @property
    def server_version(self) -> str | None:
        return self.info.version

    @property
    def speculative_algorithm(self) -> str | None:
        return self.info.speculative_algorithm or None

    @property
    def speculative_adaptive(self) -> bool:
        return bool(self.info.speculative_adaptive)

    @property
    def adaptive_config(self) -> str | None:
        config = self.info.speculative_adaptive_config
        return config if isinstance(config, str) or config is None else json.dumps(config)

    @property
    def max_running_requests(self) -> int | None:
        return self.info.max_running_requests

    @property
    def ranks(self) -> tuple[RankState, ...]:
        return self.info.ranks

    @property
    def plugin_installed(self) -> bool:
        return bool(self.ranks) and all(rank.plugin for rank in self.ranks)

    @property
    def plugin_version(self) -> str | None:
        versions = {rank.plugin_version for rank in self.ranks if rank.plugin_version}
        return ", ".join(sorted(versions)) if versions else None

    @property
    def spec_max_bs(self) -> int | None:
        """The ceiling when every rank agrees on it, else None."""
        return self.info.knob

    @property
    def mode(self) -> KnobMode:
        """``off``, ``on``, ``threshold``, ``mixed`` (ranks disagree) or ``unknown``."""
        if not self.plugin_installed:
            return "unknown"
        value = self.spec_max_bs
        if value is None:
            return "mixed" if len({r.spec_max_bs for r in self.ranks}) > 1 else "unknown"
        return knob_mode(value, self.max_running_requests)

    def problems(self) -> list[str]:
        """Why the knob cannot work on this server (empty when it can), from control.sglang_config's check."""
        return list(self.readiness_problems)

    @property
    def ownership_supported(self) -> bool:
        """Every rank's plugin keeps who holds the knob (plugin >= 0.2.0, or the simulator)."""
        return self.plugin_installed and all(rank.ownership for rank in self.ranks)

    @property
    def owner(self) -> str | None:
        """"manual" / "sweep" (a lock holds), "policy" (no lock), "mixed" (ranks disagree), None (unknown)."""
        owners = {rank.owner for rank in self.ranks}
        if not self.ownership_supported or not owners:
            return None
        return next(iter(owners)) if len(owners) == 1 else "mixed"

    @property
    def locked(self) -> bool:
        return self.owner not in (None, knob_contract.OWNER_FREE)

    @property
    def lock(self) -> Mapping[str, Any] | None:
        return self.ranks[0].lock if self.locked and self.ranks else None

    def lock_left_s(self) -> float | None:
        return self.ranks[0].lock_left_s() if self.locked and self.ranks else None

    @property
    def last_write(self) -> Mapping[str, Any] | None:
        return self.ranks[0].last_write if self.ranks else None

    @property
    def policy_last(self) -> Mapping[str, Any] | None:
        return self.ranks[0].policy_last if self.ranks else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "server_url": self.server_url,
            "server_version": self.server_version,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_adaptive": self.speculative_adaptive,
            "adaptive_config": self.adaptive_config,
            "bands_allow_zero": self.bands_allow_zero,
            "max_running_requests": self.max_running_requests,
            "plugin_installed": self.plugin_installed,
            "plugin_version": self.plugin_version,
            "spec_max_bs": self.spec_max_bs,
            "mode": self.mode,
            "ownership_supported": self.ownership_supported,
            "owner": self.owner,
            **_lock_dict(self),
            "policy_last": _copy(self.policy_last),
            "problems": self.problems(),
            "ranks": [rank_to_dict(rank) for rank in self.ranks],
        }


@dataclass(frozen=True)
class SetResult:
    """One write (a set or a release): the server's per-rank answer, and what the read-back says happened.

    ``outcome``: ``confirmed`` (every rank applied this very request: its request id is the rank's
    ``last_write``), ``not applied`` (refused, or never sent) or ``unknown`` (the answer was late or lost
    and the read-back could not tell, or the ranks disagree). The audit records exactly this.
    """

    server_url: str
    requested: int | None  # None: a release that leaves the value as it is
    before: KnobState
    after: KnobState | None  # None when the read-back failed
    accepted: tuple[bool, ...]  # the server's answer, one per DP rank (empty: no answer arrived)
    error: str | None = None
    outcome: Outcome = "unknown"
    writer: str = "manual"
    release: bool = False
    request_id: int | None = None
    previous: int | None = None  # the value the server replaced, as the server recorded it atomically
    answer_lost: str | None = None  # why no answer arrived (then the outcome comes from the read-back)
    refused_why: str | None = None  # the server's reason when it refused (e.g. a lock holds)
    rank_outcomes: tuple[str, ...] = field(default=())

    @property
    def old_max_bs(self) -> int | None:
        return self.previous if self.previous is not None else self.before.spec_max_bs

    @property
    def confirmed_ranks(self) -> tuple[bool, ...]:
        if self.rank_outcomes:
            return tuple(outcome == "applied" for outcome in self.rank_outcomes)
        if self.after is None:
            return tuple(False for _ in self.before.ranks)
        return tuple(rank.spec_max_bs == self.requested for rank in self.after.ranks)

    @property
    def confirmed(self) -> bool:
        return self.outcome == "confirmed"

    @property
    def refused_by_lock(self) -> bool:
        return self.outcome == "not applied" and "locked" in (self.refused_why or "")

    def per_rank(self) -> list[dict[str, Any]]:
        after = self.after.ranks if self.after is not None else ()
        rows = []
        for index, confirmed in enumerate(self.confirmed_ranks):
            rows.append(
                {
                    "dp_rank": index,
                    "accepted": self.accepted[index] if index < len(self.accepted) else None,
                    "spec_max_bs": after[index].spec_max_bs if index < len(after) else None,
                    "owner": after[index].owner if index < len(after) else None,
                    "confirmed": confirmed,
                    "outcome": self.rank_outcomes[index] if index < len(self.rank_outcomes) else None,
                }
            )
        return rows


# ---------------------------------------------------------------------------------------------- parsing


def knob_state(doc: Any, server_url: str) -> KnobState:
    """One decoded ``/server_info`` document (through the collectors' parser) as a :class:`KnobState`."""
    try:
        info = parse_server_info(doc)
    except ServerInfoError as exc:
        raise NotSGLangServerError(f"{server_url} answered {exc}") from None
    # The config file is only ours to read when the server runs on this host (a same-named file elsewhere
    # would say nothing about that server).
    local = is_loopback_url(server_url)
    config = adaptive_config_of(info, read_local_config=local)
    return KnobState(
        server_url=server_url,
        info=info,
        bands_allow_zero=bands_allow_zero(config) if isinstance(config, Mapping) else None,
        # One check shared with `spectower sglang-config`.
        readiness_problems=tuple(server_info_problems(info, read_local_config=local)),
    )


def normalize_server_url(url: str) -> str:
    """``http(s)://host:port`` without a trailing slash; anything else is refused naming --server."""
    text = (url or "").strip().rstrip("/")
    return check_http_url(text, "--server", KnobValueError)


def check_target(target: Target | str, field: str = "max_bs") -> Target:
    """Static validation of a requested ceiling (no server needed): 'on', 'off' or an integer >= 0.
    ``field`` names it in the refusal as the caller's user typed it (the CLI's ``--max-bs``)."""
    if isinstance(target, str):
        lowered = target.strip().lower()
        if lowered in ("on", "off"):
            return "on" if lowered == "on" else "off"
        raise KnobValueError(f"{field} must be 'on', 'off' or a non-negative integer, got {target!r}")
    if isinstance(target, bool) or not isinstance(target, int):
        raise KnobValueError(f"{field} must be a non-negative integer, got {target!r}")
    if target < 0:
        raise KnobValueError(f"{field} must be >= 0 (0 switches speculation off), got {target}")
    if target > knob_contract.MAX_SPEC_MAX_BS:
        raise KnobValueError(f"{field} must be at most {knob_contract.MAX_SPEC_MAX_BS}, got {target}")
    return target


def resolve_target(state: KnobState, target: Target) -> int:
    """The integer ceiling for a checked ``target`` (``check_target``) on this server; out-of-range values
    are refused, not clipped."""
    limit = state.max_running_requests
    if target == "off":
        return 0
    if target == "on":
        if limit is None:
            raise KnobUnsupportedError(
                f"{state.server_url} does not report max_running_requests, so 'on' has no value; "
                "pass --max-bs N"
            )
        return limit
    if limit is not None and target > limit:
        raise KnobValueError(
            f"max_bs {target} exceeds the server's max_running_requests ({limit}); "
            f"use --on (= {limit}) to keep speculation always on"
        )
    return target


def ensure_ready(state: KnobState) -> None:
    """Raise the error that says why this server cannot take the knob, if any."""
    if not state.plugin_installed:
        missing = [str(r.dp_rank) for r in state.ranks if not r.plugin]
        where = f" (DP ranks {', '.join(missing)})" if state.ranks else ""
        raise PluginMissingError(
            f"the spectower plugin is not installed in the SGLang server at {state.server_url}{where}: "
            f"{PLUGIN_INSTALL_HINT}"
        )
    problems = state.problems()
    if problems:
        raise KnobUnsupportedError(f"{state.server_url}: " + "; ".join(problems))


def prepare_set(
    state: KnobState,
    target: Target,
    *,
    writer: Writer = "manual",
    hold_s: float | None = None,
    force: bool = False,
) -> KnobRequest:
    """Everything a set can be refused for before it is sent, judged once against ``state``: the server
    takes the knob, the (checked) target resolves to a ceiling, the hold fits. Returns the request to
    ``KnobClient.write``; raises the KnobError that says why not."""
    ensure_ready(state)
    value = resolve_target(state, target)
    if hold_s is not None and (writer == "policy" or not 0 < hold_s <= knob_contract.MAX_HOLD_S):
        raise KnobValueError(
            f"--hold must be a duration up to {knob_contract.MAX_HOLD_S / 86400:g} days, for a manual "
            f"or sweep set, got {hold_s:g} s as {writer}"
        )
    return KnobRequest(
        writer=knob_contract.WRITER_CODES[writer], value=value, hold_s=hold_s, force=force,
        request_id=new_request_id(),
    )  # fmt: skip


def new_request_id() -> int:
    return random.SystemRandom().randrange(1, knob_contract.MAX_REQUEST_ID)
