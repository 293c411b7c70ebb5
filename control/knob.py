"""The client for spectower's speculation knob on a running SGLang server (docs/design.md, "The knob").

``read()`` parses ``GET /server_info`` with the collectors' parser (one model of that document, one
``max_running_requests`` rule) into a ``KnobState``; ``set(N)`` posts ``{"server_args":
{"spectower_spec_max_bs": N}}`` to ``/set_internal_state`` with the admin key and reads ``/server_info`` back
to confirm the value per DP rank. Everything that can be checked before sending is checked once, before
sending (``check_target``, then ``prepare_set`` against the state read), so a refused set changes nothing.
Keys are held privately: they appear in no repr, log line or error message.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx

from ..collectors.auth import auth_headers
from ..collectors.http import BodyTooLarge, request_bounded_sync
from ..collectors.sglang.server_info import RankState
from ..plugin import knob_contract
from ..plugin.knob_contract import KNOB_KEY, KnobRequest
from .knob_state import (
    OWNERSHIP_PLUGIN_VERSION,
    KnobAuthError,
    KnobError,
    KnobProtocolError,
    KnobState,
    KnobUnsupportedError,
    KnobValueError,
    NotSGLangServerError,
    Outcome,
    PluginMissingError,
    ServerUnreachableError,
    SetResult,
    Target,
    Writer,
    check_target,
    ensure_ready,
    knob_state,
    new_request_id,
    normalize_server_url,
    prepare_set,
)
from .sglang_config import PLUGIN_INSTALL_HINT

DEFAULT_TIMEOUT = 5.0  # seconds; /server_info and /set_internal_state answer in milliseconds when healthy
DEFAULT_READBACK_ATTEMPTS = 3  # a DP rank may report the new value one scheduler tick late
DEFAULT_READBACK_DELAY_S = 0.2
# After a set whose answer was late or lost: poll /server_info this long for the request's fate.
DEFAULT_SETTLE_S = 10.0
MAX_SERVER_INFO_BYTES = 16 * 1024 * 1024  # a DP=64 server_info is well under 1 MiB
MAX_SET_ANSWER_BYTES = 64 * 1024
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the second is SGLang's deprecated alias
SET_PATH = "/set_internal_state"
FREEZE_GC_PATH = "/freeze_gc"  # SGLang's: gc.freeze() in its tokenizer manager and scheduler
MAX_FREEZE_ANSWER_BYTES = 4 * 1024  # "Garbage collection frozen."


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

    def set_explore_share(
        self, share: float, *, before: KnobState | None = None, writer: Writer = "policy"
    ) -> SetResult:
        """Set the server's exploration share alone (``spectower_explore_share``: no ceiling, hold or
        release, so no lock moves); a policy's is refused by the server while a lock holds, as its sets are.
        The result's ``after`` carries the read-back (``explore_share_of``)."""
        try:
            share = knob_contract.explore_share_of(share, "explore_share")
        except knob_contract.ContractError as exc:
            raise KnobValueError(str(exc)) from None
        state = before if before is not None else self.read()
        ensure_ready(state)
        request = KnobRequest(writer=knob_contract.WRITER_CODES[writer], explore_share=share,
                              request_id=new_request_id())  # fmt: skip
        return self.write(request, state)

    def freeze_gc(self) -> str:
        """POST SGLang's ``/freeze_gc`` with the admin key; its answer's text. It moves every object the
        launcher and the scheduler hold now out of the collector's scans (control/gc_freeze.py reads it back);
        a lost answer raises AnswerLostError: the server may have frozen."""
        response = self._request("POST", FREEZE_GC_PATH, key=self._admin_key,
                                 max_bytes=MAX_FREEZE_ANSWER_BYTES)  # fmt: skip
        if response.status_code in (401, 403):
            raise self._auth_error(response, FREEZE_GC_PATH, self._admin_key,
                                   "SPECTOWER_ADMIN_KEY or SPECTOWER_ADMIN_KEY_FILE")  # fmt: skip
        if response.status_code == 404:
            raise KnobUnsupportedError(f"{self.base_url} has no {FREEZE_GC_PATH} (an older SGLang)")
        if response.status_code != 200:
            raise KnobProtocolError(f"{self.base_url}{FREEZE_GC_PATH} answered HTTP {response.status_code}")
        return response.text.strip()

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


def explore_share_of(state: KnobState) -> float | None:
    """The exploration share every DP rank reports (its ``explore`` block), or None: a rank does not report
    one (no plugin, an older one) or the ranks disagree."""
    shares: set[float] = set()
    for rank in state.ranks:
        raw = (rank.explore or {}).get("share")
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            return None
        shares.add(float(raw))
    return shares.pop() if len(shares) == 1 else None


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
