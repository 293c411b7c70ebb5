"""The client for spectower's speculation knob on a running SGLang server (docs/design.md, "The knob").

``read()`` parses ``GET /server_info`` with the collectors' parser (one model of that document, one
``max_running_requests`` rule) into a ``KnobState``; ``set(N)`` posts ``{"server_args":
{"spectower_spec_max_bs": N}}`` to ``/set_internal_state`` with the admin key and reads ``/server_info`` back
to confirm the value per DP rank. Everything that can be checked before sending is checked once, before
sending (``check_target``, then ``prepare_set`` against the state read), so a refused set changes nothing.
Keys are held privately: they appear in no repr, log line or error message.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from spectower.collectors.auth import auth_headers
from spectower.collectors.http import BodyTooLarge, check_http_url, is_loopback_url, request_bounded_sync
from spectower.collectors.sglang.server_info import RankState, ServerInfo, ServerInfoError, parse_server_info
from spectower.control.sglang_config import (
    PLUGIN_INSTALL_HINT,
    adaptive_config_of,
    bands_allow_zero,
    server_info_problems,
)
from spectower.plugin import knob_contract
from spectower.plugin.knob_contract import KNOB_KEY, KnobRequest

DEFAULT_TIMEOUT = 5.0  # seconds; /server_info and /set_internal_state answer in milliseconds when healthy
DEFAULT_READBACK_ATTEMPTS = 3  # a DP rank may report the new value one scheduler tick late
DEFAULT_READBACK_DELAY_S = 0.2
# After a set whose answer was late or lost: poll /server_info this long for the request's fate.
DEFAULT_SETTLE_S = 10.0
MAX_SERVER_INFO_BYTES = 16 * 1024 * 1024  # a DP=64 server_info is well under 1 MiB
MAX_SET_ANSWER_BYTES = 64 * 1024
# The first plugin release that keeps who holds the knob (older ones take only a plain manual set).
OWNERSHIP_PLUGIN_VERSION = "0.2.0"
Outcome = Literal["confirmed", "not applied", "unknown"]
Writer = Literal["manual", "policy", "sweep"]
KnobMode = Literal["off", "on", "threshold", "mixed", "unknown"]
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the second is SGLang's deprecated alias
SET_PATH = "/set_internal_state"

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


def check_target(target: Target | str) -> Target:
    """Static validation of a requested ceiling (no server needed): 'on', 'off' or an integer >= 0."""
    if isinstance(target, str):
        lowered = target.strip().lower()
        if lowered in ("on", "off"):
            return "on" if lowered == "on" else "off"
        raise KnobValueError(f"max_bs must be 'on', 'off' or a non-negative integer, got {target!r}")
    if isinstance(target, bool) or not isinstance(target, int):
        raise KnobValueError(f"max_bs must be a non-negative integer, got {target!r}")
    if target < 0:
        raise KnobValueError(f"max_bs must be >= 0 (0 switches speculation off), got {target}")
    if target > knob_contract.MAX_SPEC_MAX_BS:
        raise KnobValueError(f"max_bs must be at most {knob_contract.MAX_SPEC_MAX_BS}, got {target}")
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


# ----------------------------------------------------------------------------------------------- client


class AnswerLostError(ServerUnreachableError):
    """A request left, but its answer did not arrive (timeout, reset): the server may have applied it."""


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


class KnobClient:
    """Reads and sets the knob of one server. Use as a context manager, or call :meth:`close`.

    Every read has a deadline (``timeout``, for the whole answer, not per chunk) and a byte cap.
    """

    def __init__(
        self,
        base_url: str,
        admin_key: str | None = None,
        *,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        readback_attempts: int = DEFAULT_READBACK_ATTEMPTS,
        readback_delay_s: float = DEFAULT_READBACK_DELAY_S,
        settle_s: float = DEFAULT_SETTLE_S,
    ) -> None:
        self.base_url = normalize_server_url(base_url)
        if timeout <= 0:
            raise KnobValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.readback_attempts = readback_attempts
        self.readback_delay_s = readback_delay_s
        self.settle_s = settle_s
        self._admin_key = admin_key
        self._api_key = api_key
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    def __repr__(self) -> str:  # no keys in reprs
        return f"KnobClient({self.base_url!r})"

    def __enter__(self) -> KnobClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- HTTP plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        key: str | None,
        body: Any = None,
        max_bytes: int = MAX_SERVER_INFO_BYTES,
    ) -> httpx.Response:
        """One request with a deadline for the whole answer and a cap on its size.

        Raises ServerUnreachableError when nothing was sent (refused, no route), AnswerLostError when the
        request may have reached the server but no complete answer came back in time.
        """
        try:
            return request_bounded_sync(self._http, method, path, timeout_s=self.timeout, max_bytes=max_bytes,
                                        headers=auth_headers(key), json=body)  # fmt: skip
        except BodyTooLarge:
            raise KnobProtocolError(
                f"{self.base_url}{path} answered more than {max_bytes} bytes; refusing to read on"
            ) from None
        except _NOT_SENT as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise ServerUnreachableError(f"cannot reach {self.base_url}: {reason}") from None
        except httpx.TimeoutException:
            late = f"{self.base_url} did not answer {path} within {self.timeout:g} s"
            raise AnswerLostError(late) from None
        except httpx.TransportError as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise AnswerLostError(f"{self.base_url}{path}: the answer was lost ({reason})") from None

    def _auth_error(
        self, response: httpx.Response, what: str, key: str | None, key_vars: str
    ) -> KnobAuthError:
        if key:
            return KnobAuthError(
                f"{self.base_url} refused the key for {what} (HTTP {response.status_code}): wrong key; "
                f"check {key_vars}"
            )
        return KnobAuthError(
            f"{self.base_url} requires a key for {what} (HTTP {response.status_code}) and none is set: "
            f"set {key_vars}"
        )

    # -- public API

    def read(self) -> KnobState:
        """The knob as ``/server_info`` reports it, per DP rank."""
        response: httpx.Response | None = None
        for path in SERVER_INFO_PATHS:
            try:
                response = self._request("GET", path, key=self._api_key)
            except AnswerLostError as exc:  # a read changes nothing: a lost answer is just unreachable
                raise ServerUnreachableError(str(exc)) from None
            if response.status_code != 404:
                break
        assert response is not None
        if response.status_code in (401, 403):
            raise self._auth_error(
                response, "/server_info", self._api_key, "SPECTOWER_API_KEY or SPECTOWER_API_KEY_FILE"
            )
        if response.status_code == 404:
            raise NotSGLangServerError(f"{self.base_url} has no /server_info: is it an SGLang server?")
        if response.status_code != 200:
            raise KnobProtocolError(f"{self.base_url}/server_info answered HTTP {response.status_code}")
        try:
            info = response.json()
        except ValueError:
            raise NotSGLangServerError(f"{self.base_url}/server_info did not answer JSON") from None
        return knob_state(info, self.base_url)

    def set(
        self,
        target: Target,
        *,
        before: KnobState | None = None,
        writer: Writer = "manual",
        hold_s: float | None = None,
        force: bool = False,
    ) -> SetResult:
        """Set the ceiling (``'off'`` = 0, ``'on'`` = max_running_requests, or N) as ``writer``.

        A manual set takes the server's manual lock (for ``hold_s`` seconds, or until released); a policy's
        set is refused by the server while a lock holds. Raises before sending anything when the server
        cannot take the value. After sending, nothing is raised for a late or lost answer: the result's
        ``outcome`` says what the read-back found.
        """
        target = check_target(target)
        state = before if before is not None else self.read()
        return self.write(prepare_set(state, target, writer=writer, hold_s=hold_s, force=force), state)

    def release(
        self,
        *,
        before: KnobState | None = None,
        writer: Writer = "manual",
        value: int | None = None,
        lock_as_manual: bool = False,
        hold_s: float | None = None,
    ) -> SetResult:
        """Clear the lock (manual: any lock; sweep: its own), optionally setting ``value`` in the same
        request; a sweep giving back a knob it borrowed from an operator leaves a manual lock behind."""
        state = before if before is not None else self.read()
        ensure_ready(state)
        request = KnobRequest(
            writer=knob_contract.WRITER_CODES[writer], value=value, release=True,
            lock_as=knob_contract.WRITER_MANUAL if lock_as_manual else None,
            hold_s=hold_s if lock_as_manual else None, request_id=new_request_id(),
        )  # fmt: skip
        return self.write(request, state)

    def write(self, request: KnobRequest, before: KnobState) -> SetResult:
        """Send one contract request, then settle its outcome by reading the server back."""
        if not before.ownership_supported:
            plain = request.writer == knob_contract.WRITER_MANUAL and not request.release
            if not plain or request.hold_s or request.value is None:
                raise KnobUnsupportedError(
                    f"{self.base_url}: the spectower plugin {before.plugin_version or '?'} predates "
                    f"server-side locks (needs {OWNERSHIP_PLUGIN_VERSION} or newer for policy, sweep, hold "
                    "and release writes); upgrade it in the SGLang environment and restart the server"
                )
            body: dict[str, Any] = {"server_args": {KNOB_KEY: request.value}}
        else:
            try:
                body = {"server_args": request.to_server_args()}
            except knob_contract.ContractError as exc:
                raise KnobValueError(str(exc)) from None
        key = self._admin_key or self._api_key  # SGLang: admin key if configured, else the API key
        accepted: tuple[bool, ...] = ()
        lost: str | None = None
        try:
            response = self._request("POST", SET_PATH, key=key, body=body, max_bytes=MAX_SET_ANSWER_BYTES)
        except AnswerLostError as exc:
            lost = str(exc)
        else:
            if response.status_code in (401, 403):
                raise self._auth_error(
                    response, SET_PATH, key, "SPECTOWER_ADMIN_KEY or SPECTOWER_ADMIN_KEY_FILE"
                )
            if response.status_code in (400, 422):
                raise KnobValueError(
                    f"{self.base_url} refused {KNOB_KEY}={request.value}: HTTP {response.status_code}"
                )
            if response.status_code != 200:
                lost = f"{self.base_url}{SET_PATH} answered HTTP {response.status_code}"
            else:
                try:
                    accepted = _parse_set_answer(response, self.base_url)
                except KnobProtocolError as exc:
                    lost = str(exc)
        return self._settle(request, before, accepted, lost)

    def _settle(
        self, request: KnobRequest, before: KnobState, accepted: tuple[bool, ...], lost: str | None
    ) -> SetResult:
        """Read back until every rank says what became of this request (or time runs out: unknown)."""
        definite_no = bool(accepted) and not any(accepted)
        deadline = time.monotonic() + (self.settle_s if lost else 0.0)
        attempts = 0
        after: KnobState | None = None
        read_error: str | None = None
        verdicts: list[str] = []
        while True:
            attempts += 1
            try:
                after = self.read()
                read_error = None
            except KnobError as exc:
                read_error = f"read-back failed: {exc}"
            if after is not None and not after.plugin_installed:
                raise PluginMissingError(
                    f"{self.base_url} does not know {KNOB_KEY} (answered {_bools(accepted)}): the spectower "
                    f"plugin is not installed; {PLUGIN_INSTALL_HINT}"
                )
            if after is not None:
                verdicts = [_rank_verdict(rank, request) for rank in after.ranks]
                if verdicts and "unknown" not in verdicts:
                    break
                if definite_no:  # the server said no on every rank: nothing more to wait for
                    break
            more_tries = attempts < max(1, self.readback_attempts)
            if not (more_tries or time.monotonic() < deadline):
                break
            time.sleep(self.readback_delay_s)
        refused = [
            str((rank.last_refused or {}).get("why") or "")
            for rank, verdict in zip(after.ranks if after else (), verdicts, strict=False)
            if verdict == "refused"
        ]
        why = refused[0] if refused else None
        outcome: Outcome
        if verdicts and all(v == "applied" for v in verdicts) and (not accepted or all(accepted)):
            outcome = "confirmed"
        elif (verdicts and all(v == "refused" for v in verdicts)) or (
            definite_no and "applied" not in verdicts
        ):
            outcome = "not applied"
        else:
            outcome = "unknown"
        previous = _agreed_previous(after, request) if outcome == "confirmed" else None
        if outcome == "confirmed":
            error = None
        elif outcome == "not applied":
            error = f"not applied: the server refused it ({why or 'answered ' + _bools(accepted)})"
        else:
            seen = [rank.spec_max_bs for rank in after.ranks] if after else None
            cause = lost or (f"answered {_bools(accepted)}" if accepted else "no answer")
            found = ", ".join(verdicts) or read_error
            error = f"outcome unknown: {cause}; read-back per rank {seen} ({found})"
            if read_error:
                error += f"; {read_error}"
        return SetResult(
            self.base_url, request.value, before, after, accepted, error, outcome, request.writer_name,
            request.release, request.request_id, previous, lost, why, tuple(verdicts),
        )  # fmt: skip


def _rank_verdict(rank: RankState, request: KnobRequest) -> str:
    """``applied`` / ``refused`` / ``unknown``: what one rank's read-back says about this request."""
    if not rank.ownership or request.request_id is None:  # an old plugin: judge by the value alone
        return "applied" if request.value is not None and rank.spec_max_bs == request.value else "unknown"
    if (rank.last_write or {}).get("request_id") == request.request_id:
        if request.value is not None and rank.spec_max_bs != request.value:
            return "unknown"  # applied, then overwritten by a later writer before we read
        return "applied"
    if (rank.last_refused or {}).get("request_id") == request.request_id:
        return "refused"
    return "unknown"


def _agreed_previous(after: KnobState | None, request: KnobRequest) -> int | None:
    if after is None:
        return None
    values = set()
    for rank in after.ranks:
        write = rank.last_write or {}
        if write.get("request_id") != request.request_id:
            return None
        previous = write.get("previous")
        values.add(previous if isinstance(previous, int) and not isinstance(previous, bool) else None)
    return next(iter(values)) if len(values) == 1 else None


def _bools(values: tuple[bool, ...]) -> str:
    return "[" + ", ".join("true" if v else "false" for v in values) + "]"


def _parse_set_answer(response: httpx.Response, base_url: str) -> tuple[bool, ...]:
    """SGLang answers one boolean per DP rank; tolerate the shapes older releases used."""
    try:
        body = response.json()
    except ValueError:
        raise KnobProtocolError(f"{base_url}{SET_PATH} did not answer JSON") from None
    if isinstance(body, bool):
        return (body,)
    if isinstance(body, Mapping) and isinstance(body.get("updated"), bool):
        return (body["updated"],)
    if isinstance(body, list) and body:
        values: list[bool] = []
        for item in body:
            if isinstance(item, bool):
                values.append(item)
            elif isinstance(item, Mapping) and isinstance(item.get("updated"), bool):
                values.append(item["updated"])
            else:
                raise KnobProtocolError(f"{base_url}{SET_PATH} answered an unexpected list item: {item!r}")
        return tuple(values)
    raise KnobProtocolError(f"{base_url}{SET_PATH} answered {body!r}, expected one boolean per DP rank")
