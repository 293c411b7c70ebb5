"""The client for spectower's speculation knob on a running SGLang server (docs/design.md, "The knob").

``read()`` parses ``GET /server_info``; ``set(N)`` posts ``{"server_args": {"spectower_spec_max_bs": N}}`` to
``/set_internal_state`` with the admin key and reads ``/server_info`` back to confirm the value per DP rank.
Everything that can be checked before sending is checked before sending, so a refused set changes nothing.
Keys are held privately: they appear in no repr, log line or error message.
"""

from __future__ import annotations

import ipaddress
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from spectower.control import knob_contract
from spectower.control.knob_contract import KnobRequest
from spectower.control.sglang_config import server_info_problems

DEFAULT_TIMEOUT = 5.0  # seconds; /server_info and /set_internal_state answer in milliseconds when healthy
DEFAULT_READBACK_ATTEMPTS = 3  # a DP rank may report the new value one scheduler tick late
DEFAULT_READBACK_DELAY_S = 0.2
# After a set whose answer was late or lost: poll /server_info this long for the request's fate.
DEFAULT_SETTLE_S = 10.0
MAX_SERVER_INFO_BYTES = 16 * 1024 * 1024  # a DP=64 server_info is well under 1 MiB
MAX_SET_ANSWER_BYTES = 64 * 1024
KNOB_KEY = knob_contract.KNOB_KEY
OWNERSHIP_PLUGIN_VERSION = "0.2.0"
Outcome = Literal["confirmed", "not applied", "unknown"]
Writer = Literal["manual", "policy", "sweep"]
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the second is SGLang's deprecated alias
SET_PATH = "/set_internal_state"

# SGLang's bands without --speculative-adaptive-config (docs/sglang-reference.md §1): band 1 has no 0,
# so a server on the defaults has no CUDA graph for "no drafting" at small batch sizes.
SGLANG_DEFAULT_BANDS: dict[str, list[int]] = {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}

INSTALL_HINT = (
    "install it into the SGLang server's Python environment (`pip install spectower` there, or put a "
    "spectower .dist-info with an entry_points.txt for group `sglang.srt.plugins` on its PYTHONPATH) "
    "and restart the server"
)

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


@dataclass(frozen=True)
class RankKnob:
    """The knob as one DP rank reports it in ``internal_states[i]``."""

    dp_rank: int
    plugin: bool  # the rank has a ``spectower`` state
    spec_max_bs: int | None
    batches_drafted: int | None
    batches_gated: int | None
    plugin_version: str | None
    active_num_steps: int | None  # speculative_num_steps with runtime overrides: 0 while gated
    accept_length: float | None  # avg_spec_accept_length, cumulative
    # Ownership (control/knob_contract.py); None on a plugin that predates it.
    owner: str | None = None  # "manual" / "sweep" while that lock holds, else "policy"
    lock: Mapping[str, Any] | None = None  # {"writer", "since", "expires_at"}; None expiry: until released
    last_write: Mapping[str, Any] | None = None
    last_refused: Mapping[str, Any] | None = None
    policy_last: Mapping[str, Any] | None = None
    server_time: float | None = None

    @property
    def ownership(self) -> bool:
        return self.owner is not None

    def lock_left_s(self) -> float | None:
        """Seconds until the lock expires by the server's clock (None: no lock, or until released)."""
        expires = (self.lock or {}).get("expires_at")
        if not isinstance(expires, int | float) or self.server_time is None:
            return None
        return max(0.0, float(expires) - self.server_time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dp_rank": self.dp_rank,
            "plugin": self.plugin,
            "spec_max_bs": self.spec_max_bs,
            "batches_drafted": self.batches_drafted,
            "batches_gated": self.batches_gated,
            "plugin_version": self.plugin_version,
            "active_num_steps": self.active_num_steps,
            "accept_length": self.accept_length,
            "owner": self.owner,
            "lock": dict(self.lock) if self.lock else None,
            "lock_left_s": self.lock_left_s(),
            "last_write": dict(self.last_write) if self.last_write else None,
            "last_refused": dict(self.last_refused) if self.last_refused else None,
            "policy_last": dict(self.policy_last) if self.policy_last else None,
            "server_time": self.server_time,
        }


@dataclass(frozen=True)
class KnobState:
    """What ``/server_info`` says about the knob and whether this server can honour it."""

    server_url: str
    server_version: str | None
    speculative_algorithm: str | None
    speculative_adaptive: bool
    adaptive_config: str | None
    bands_allow_zero: bool | None  # None: cannot tell from here (config file on another host)
    max_running_requests: int | None
    ranks: tuple[RankKnob, ...]
    readiness_problems: tuple[str, ...] = ()

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
        values = {rank.spec_max_bs for rank in self.ranks}
        if len(values) != 1:
            return None
        return next(iter(values))

    @property
    def mode(self) -> str:
        """``off``, ``on``, ``threshold``, ``mixed`` (ranks disagree) or ``unknown``."""
        if not self.plugin_installed:
            return "unknown"
        value = self.spec_max_bs
        if value is None:
            return "mixed" if len({r.spec_max_bs for r in self.ranks}) > 1 else "unknown"
        if value == 0:
            return "off"
        if self.max_running_requests is not None and value >= self.max_running_requests:
            return "on"
        return "threshold"

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

    def _first(self, attr: str) -> Any:
        return getattr(self.ranks[0], attr) if self.ranks else None

    @property
    def lock(self) -> Mapping[str, Any] | None:
        return self._first("lock") if self.locked else None

    def lock_left_s(self) -> float | None:
        return self.ranks[0].lock_left_s() if self.locked and self.ranks else None

    @property
    def last_write(self) -> Mapping[str, Any] | None:
        return self._first("last_write")

    @property
    def policy_last(self) -> Mapping[str, Any] | None:
        return self._first("policy_last")

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
            "lock": dict(self.lock) if self.lock else None,
            "lock_left_s": self.lock_left_s(),
            "last_write": dict(self.last_write) if self.last_write else None,
            "policy_last": dict(self.policy_last) if self.policy_last else None,
            "problems": self.problems(),
            "ranks": [rank.to_dict() for rank in self.ranks],
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


def bands_allow_zero(config: Mapping[str, Any]) -> bool:
    """True when every band of an adaptive config lists step 0 (``{"band": {"candidate_steps": [...]}}``
    or the shorthand ``{"band": [...]}``)."""
    if not config:
        return False
    for band in config.values():
        steps = band.get("candidate_steps") if isinstance(band, Mapping) else band
        if not isinstance(steps, list) or 0 not in steps:
            return False
    return True


def _is_loopback(server_url: str) -> bool:
    host = urlsplit(server_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _detect_bands_allow_zero(info: Mapping[str, Any], server_url: str) -> bool | None:
    """Whether the server's bands all allow 0, as far as /server_info lets us tell.

    The plugin may report it (``spectower.bands_allow_zero``); without a config SGLang uses its default
    bands (no 0 in band 1); a config path is only readable from here when the server runs on this host.
    """
    for state in info.get("internal_states") or []:
        reported = (state.get("spectower") or {}).get("bands_allow_zero") if isinstance(state, dict) else None
        if isinstance(reported, bool):
            return reported
    config = info.get("speculative_adaptive_config")
    if config in (None, ""):
        return bands_allow_zero(SGLANG_DEFAULT_BANDS)
    if isinstance(config, Mapping):
        return bands_allow_zero(config)
    if not isinstance(config, str):
        return None
    text: str | None = config if config.lstrip().startswith("{") else None
    if text is None and _is_loopback(server_url):
        try:
            text = Path(config).read_text(encoding="utf-8")
        except OSError:
            return None
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return bands_allow_zero(parsed) if isinstance(parsed, Mapping) else None


def _opt_int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _opt_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


_OWNERS = (*knob_contract.WRITER_NAMES.values(), knob_contract.OWNER_FREE)


def _opt_map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def parse_server_info(info: Mapping[str, Any], server_url: str) -> KnobState:
    """Turn one ``/server_info`` JSON object into a :class:`KnobState`."""
    if not isinstance(info, Mapping) or ("internal_states" not in info and "version" not in info):
        raise NotSGLangServerError(f"{server_url} answered /server_info without SGLang's fields")
    ranks: list[RankKnob] = []
    for index, state in enumerate(info.get("internal_states") or []):
        if not isinstance(state, Mapping):
            continue
        spectower = state.get("spectower")
        plugin = isinstance(spectower, Mapping) and "spec_max_bs" in spectower
        knob: Mapping[str, Any] = spectower if plugin else {}  # type: ignore[assignment]
        version = knob.get("plugin_version")
        owner = knob.get("owner")
        ranks.append(
            RankKnob(
                dp_rank=_opt_int(state.get("dp_rank")) or index,
                plugin=plugin,
                spec_max_bs=_opt_int(knob.get("spec_max_bs")),
                batches_drafted=_opt_int(knob.get("batches_drafted")),
                batches_gated=_opt_int(knob.get("batches_gated")),
                plugin_version=str(version) if version is not None else None,
                active_num_steps=_opt_int(state.get("speculative_num_steps")),
                accept_length=_opt_float(state.get("avg_spec_accept_length")),
                owner=owner if isinstance(owner, str) and owner in _OWNERS else None,
                lock=_opt_map(knob.get("lock")),
                last_write=_opt_map(knob.get("last_write")),
                last_refused=_opt_map(knob.get("last_refused")),
                policy_last=_opt_map(knob.get("policy_last")),
                server_time=_opt_float(knob.get("server_time")),
            )
        )
    max_running = _opt_int(info.get("max_running_requests"))
    if max_running is None and info.get("internal_states"):
        first = info["internal_states"][0]
        max_running = _opt_int(first.get("max_running_requests")) if isinstance(first, Mapping) else None
    config = info.get("speculative_adaptive_config")
    return KnobState(
        server_url=server_url,
        server_version=str(info["version"]) if info.get("version") is not None else None,
        speculative_algorithm=info.get("speculative_algorithm") or None,
        speculative_adaptive=bool(info.get("speculative_adaptive")),
        adaptive_config=config if isinstance(config, str) else (json.dumps(config) if config else None),
        bands_allow_zero=_detect_bands_allow_zero(info, server_url),
        max_running_requests=max_running,
        ranks=tuple(ranks),
        # One check shared with `spectower sglang-config`; the config file is only ours to read when the
        # server runs on this host (a same-named file elsewhere would say nothing about that server).
        readiness_problems=tuple(server_info_problems(info, read_local_config=_is_loopback(server_url))),
    )


def normalize_server_url(url: str) -> str:
    """``http(s)://host:port`` without a trailing slash; anything else is refused naming --server."""
    text = (url or "").strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KnobValueError(f"--server must be an http(s) URL like http://127.0.0.1:30000, got {url!r}")
    return text


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
    """The integer ceiling for ``target`` on this server; out-of-range values are refused, not clipped."""
    target = check_target(target)
    limit = state.max_running_requests
    if target == "off":
        return 0
    if target == "on":
        if limit is None:
            raise KnobUnsupportedError(
                f"{state.server_url} does not report max_running_requests, so 'on' has no value; "
                "pass --max-bs N"
            )
        if limit > knob_contract.MAX_SPEC_MAX_BS:
            raise KnobValueError(
                f"{state.server_url} reports max_running_requests {limit}, beyond any valid ceiling "
                f"(at most {knob_contract.MAX_SPEC_MAX_BS}); pass --max-bs N"
            )
        return limit
    assert isinstance(target, int)
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
            f"{INSTALL_HINT}"
        )
    problems = state.problems()
    if problems:
        raise KnobUnsupportedError(f"{state.server_url}: " + "; ".join(problems))


# ----------------------------------------------------------------------------------------------- client


class AnswerLostError(ServerUnreachableError):
    """A request left, but its answer did not arrive (timeout, reset): the server may have applied it."""


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def new_request_id() -> int:
    return random.SystemRandom().randrange(1, knob_contract.MAX_REQUEST_ID)


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
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream(method, path, json=body, headers=headers) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise KnobProtocolError(
                            f"{self.base_url}{path} answered more than {max_bytes} bytes; refusing to read on"
                        )
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("deadline passed while reading the answer")
                    chunks.append(chunk)
                return httpx.Response(
                    response.status_code, headers=response.headers, content=b"".join(chunks),
                    request=response.request,
                )  # fmt: skip
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
        return parse_server_info(info, self.base_url)

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
        ensure_ready(state)
        value = resolve_target(state, target)
        if hold_s is not None and (writer == "policy" or not 0 < hold_s <= knob_contract.MAX_HOLD_S):
            raise KnobValueError(
                f"--hold must be a duration up to {knob_contract.MAX_HOLD_S / 86400:g} days, for a manual "
                f"or sweep set, got {hold_s:g} s as {writer}"
            )
        request = KnobRequest(
            writer=knob_contract.WRITER_CODES[writer], value=value, hold_s=hold_s, force=force,
            request_id=new_request_id(),
        )  # fmt: skip
        return self.write(request, state)

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
                    f"plugin is not installed; {INSTALL_HINT}"
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


def _rank_verdict(rank: RankKnob, request: KnobRequest) -> str:
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
        values.add(_opt_int(write.get("previous")))
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
