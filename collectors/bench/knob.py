"""Setting and reading the speculation knob (docs/design.md's contract), behind a small protocol.

The CLI hands the sweep a knob backed by ``control.knob.KnobClient`` (audited); ``HttpKnob`` is the plain
HTTP implementation the sweep uses on its own (collectors may not import control).
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx
from spectower.collectors.bench.errors import KnobError, ServerUnreachable
from spectower.collectors.bench.server import SERVER_INFO_PATH, auth_headers

SET_PATH = "/set_internal_state"
KNOB_KEY = "spectower_spec_max_bs"


class Knob(Protocol):
    async def read(self) -> list[int | None]:
        """The live value per DP rank (None where a rank does not report it)."""
        ...

    async def set(self, max_bs: int, reason: str) -> None:
        """Set the value and confirm it on every rank, or raise ``KnobError``."""
        ...


def knob_values(info: dict[str, Any]) -> list[int | None]:
    out: list[int | None] = []
    for state in info.get("internal_states") or []:
        spec = state.get("spectower") if isinstance(state, dict) else None
        value = spec.get("spec_max_bs") if isinstance(spec, dict) else None
        out.append(value if isinstance(value, int) else None)
    return out


class HttpKnob:
    def __init__(self, client: httpx.AsyncClient, admin_key: str | None) -> None:
        self._client = client
        self._admin_key = admin_key

    async def read(self) -> list[int | None]:
        try:
            resp = await self._client.get(SERVER_INFO_PATH)
            resp.raise_for_status()
            return knob_values(resp.json())
        except (httpx.HTTPError, ValueError) as exc:
            raise ServerUnreachable(f"knob read-back from {SERVER_INFO_PATH} failed: {exc}") from None

    async def set(self, max_bs: int, reason: str) -> None:
        try:
            resp = await self._client.post(
                SET_PATH, json={"server_args": {KNOB_KEY: max_bs}}, headers=auth_headers(self._admin_key)
            )
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"knob: {SET_PATH} unreachable ({exc})") from None
        if resp.status_code in (401, 403):
            raise KnobError(
                f"knob refused: {SET_PATH} answered HTTP {resp.status_code}; set SPECTOWER_ADMIN_KEY "
                "or SPECTOWER_ADMIN_KEY_FILE to the server's --admin-api-key"
            )
        if resp.status_code != 200:
            raise KnobError(f"knob refused: {SET_PATH} answered HTTP {resp.status_code}: {resp.text[:200]}")
        answer = resp.json()
        if not isinstance(answer, list) or not answer or not all(a is True for a in answer):
            raise KnobError(
                f"knob refused: {KNOB_KEY}={max_bs} answered {answer!r} (is the spectower plugin installed "
                "and the server launched with --speculative-adaptive?)"
            )
        values = await self.read()
        if not values or any(v != max_bs for v in values):
            raise KnobError(f"knob not confirmed: set {KNOB_KEY}={max_bs}, server reports {values}")
