"""The client for spectower's speculation knob on a running SGLang server (docs/design.md, "The knob").

``read()`` parses ``GET /server_info``; ``set(N)`` posts ``{"server_args": {"spectower_spec_max_bs": N}}`` to
``/set_internal_state`` with the admin key and reads ``/server_info`` back to confirm the value per DP rank.
Everything that can be checked before sending is checked before sending, so a refused set changes nothing.
Keys are held privately: they appear in no repr, log line or error message.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from spectower.control.sglang_config import server_info_problems

DEFAULT_TIMEOUT = 5.0  # seconds; /server_info and /set_internal_state answer in milliseconds when healthy
DEFAULT_READBACK_ATTEMPTS = 3  # a DP rank may report the new value one scheduler tick late
DEFAULT_READBACK_DELAY_S = 0.2
KNOB_KEY = "spectower_spec_max_bs"
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
            "problems": self.problems(),
            "ranks": [rank.to_dict() for rank in self.ranks],
        }


@dataclass(frozen=True)
class SetResult:
    """One set: the server's per-rank answer and the read-back that confirms (or not) each rank."""

    server_url: str
    requested: int
    before: KnobState
    after: KnobState | None  # None when the read-back failed
    accepted: tuple[bool, ...]  # the server's answer, one per DP rank
    error: str | None = None

    @property
    def old_max_bs(self) -> int | None:
        return self.before.spec_max_bs

    @property
    def confirmed_ranks(self) -> tuple[bool, ...]:
        if self.after is None:
            return tuple(False for _ in self.before.ranks)
        return tuple(rank.spec_max_bs == self.requested for rank in self.after.ranks)

    @property
    def confirmed(self) -> bool:
        ranks = self.confirmed_ranks
        return bool(ranks) and all(ranks) and bool(self.accepted) and all(self.accepted)

    def per_rank(self) -> list[dict[str, Any]]:
        after = self.after.ranks if self.after is not None else ()
        rows = []
        for index, confirmed in enumerate(self.confirmed_ranks):
            rows.append(
                {
                    "dp_rank": index,
                    "accepted": self.accepted[index] if index < len(self.accepted) else None,
                    "spec_max_bs": after[index].spec_max_bs if index < len(after) else None,
                    "confirmed": confirmed,
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


class KnobClient:
    """Reads and sets the knob of one server. Use as a context manager, or call :meth:`close`."""

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
    ) -> None:
        self.base_url = normalize_server_url(base_url)
        if timeout <= 0:
            raise KnobValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self.readback_attempts = readback_attempts
        self.readback_delay_s = readback_delay_s
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

    def _request(self, method: str, path: str, *, key: str | None, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            return self._http.request(method, path, json=body, headers=headers)
        except httpx.TimeoutException:
            raise ServerUnreachableError(
                f"{self.base_url} did not answer {path} within {self.timeout:g} s"
            ) from None
        except httpx.TransportError as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise ServerUnreachableError(f"cannot reach {self.base_url}: {reason}") from None

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
            response = self._request("GET", path, key=self._api_key)
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

    def set(self, target: Target, *, before: KnobState | None = None) -> SetResult:
        """Set the ceiling (``'off'`` = 0, ``'on'`` = max_running_requests, or N) and confirm it by read-back.

        Raises before sending anything when the server cannot take the value. After sending, a failed
        read-back is not raised: the set may have applied, so the result says "not confirmed" instead.
        """
        target = check_target(target)
        state = before if before is not None else self.read()
        ensure_ready(state)
        value = resolve_target(state, target)

        key = self._admin_key or self._api_key  # SGLang: admin key if configured, else the API key
        response = self._request("POST", SET_PATH, key=key, body={"server_args": {KNOB_KEY: value}})
        if response.status_code in (401, 403):
            raise self._auth_error(
                response, SET_PATH, key, "SPECTOWER_ADMIN_KEY or SPECTOWER_ADMIN_KEY_FILE"
            )
        if response.status_code in (400, 422):
            raise KnobValueError(f"{self.base_url} refused {KNOB_KEY}={value}: HTTP {response.status_code}")
        if response.status_code != 200:
            raise KnobProtocolError(f"{self.base_url}{SET_PATH} answered HTTP {response.status_code}")
        accepted = _parse_set_answer(response, self.base_url)

        after, error = self._read_back(value)
        if after is not None and not after.plugin_installed:
            # The server answered [false] the way SGLang answers an unknown key: no plugin behind it.
            raise PluginMissingError(
                f"{self.base_url} does not know {KNOB_KEY} (answered {_bools(accepted)}): the spectower "
                f"plugin is not installed; {INSTALL_HINT}"
            )
        if error is None and not all(accepted):
            error = f"the server refused {KNOB_KEY}={value} on some ranks (answered {_bools(accepted)})"
        return SetResult(self.base_url, value, state, after, accepted, error)

    def _read_back(self, value: int) -> tuple[KnobState | None, str | None]:
        after: KnobState | None = None
        for attempt in range(max(1, self.readback_attempts)):
            try:
                after = self.read()
            except KnobError as exc:
                return None, f"read-back failed: {exc}"
            if not after.plugin_installed or all(rank.spec_max_bs == value for rank in after.ranks):
                return after, None
            if attempt + 1 < self.readback_attempts:
                time.sleep(self.readback_delay_s)
        return after, None


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
