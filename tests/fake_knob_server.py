"""A unit-level stand-in for an SGLang server's knob endpoints, for ``httpx.MockTransport``.

It starts from the REAL ``/server_info`` captured on an H200 (SGLang 0.5.17 with a stand-in plugin) and
follows the knob contract (plugin/knob_contract.py, the same ``KnobOwner`` the plugin and the simulator
run): ``/set_internal_state`` answers one boolean per DP rank, applies a valid request on every rank, answers
``[false]`` for unknown keys, refused writes or when no plugin is installed, 400 for non-numbers, 401 when
the admin key does not match. ``lose_answers`` makes the next N sets apply (or not, ``lose_before_apply``)
and then lose their answer (a read timeout), as a late or dropped HTTP answer does. Integration tests use the
real simulator subprocess instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from spectower.plugin import knob_contract

from tests.conftest import REAL_DATA

CAPTURE = REAL_DATA / "sglang-0.5.17-h200" / "server_info_after.json"
KNOB_KEY = "spectower_spec_max_bs"


def real_server_info() -> dict[str, Any]:
    return json.loads(Path(CAPTURE).read_text())


@dataclass
class FakeKnobServer:
    info: dict[str, Any] = field(default_factory=real_server_info)
    admin_key: str | None = None
    plugin: bool = True
    dp_size: int = 1
    stuck_ranks: frozenset[int] = frozenset()  # ranks that answer true but keep their old value
    requests: list[httpx.Request] = field(default_factory=list)
    on_request: Callable[[httpx.Request], None] | None = None  # runs before each answer (race tests)
    ownership: bool = True  # False: a plugin that predates server-side locks (0.1.0)
    lose_answers: int = 0  # the next N sets lose their answer (ReadTimeout)
    lose_before_apply: bool = False  # ...before the server applied them (else after)
    clock: Callable[[], float] = field(default=lambda: 1_800_000_000.0)
    owner: knob_contract.KnobOwner = field(init=False)

    def __post_init__(self) -> None:
        self.owner = knob_contract.KnobOwner(clock=lambda: self.clock())
        base = self.info["internal_states"][0]
        states = []
        for rank in range(self.dp_size):
            state = copy.deepcopy(base)
            if self.plugin:
                version = "0.2.0" if self.ownership else "0.1.0"
                state["spectower"] = {"plugin_version": version, "spec_max_bs": 0,
                                      "batches_drafted": 10, "batches_gated": 5}  # fmt: skip
            else:
                state.pop("spectower", None)
            state["dp_rank"] = rank
            states.append(state)
        self.info["internal_states"] = states
        # The capture's config path lives on the GPU machine; point at bands that allow 0 by default.
        self.info["speculative_adaptive_config"] = '{"1": {"candidate_steps": [0, 3]}}'

    @property
    def posts(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == "POST"]

    def values(self) -> list[int | None]:
        return [s.get("spectower", {}).get("spec_max_bs") for s in self.info["internal_states"]]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.on_request is not None:
            self.on_request(request)
        if request.url.path in ("/server_info", "/get_server_info") and request.method == "GET":
            info = copy.deepcopy(self.info)
            if self.plugin and self.ownership:
                for state in info["internal_states"]:
                    state["spectower"].update(self.owner.report())
            return httpx.Response(200, json=info)
        if request.url.path == "/set_internal_state" and request.method in ("POST", "PUT"):
            given = request.headers.get("authorization")
            if self.admin_key is not None and given != f"Bearer {self.admin_key}":
                return httpx.Response(401, json={"error": "Unauthorized"})
            body = json.loads(request.content)
            args = body.get("server_args", {})
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in args.values()):
                return httpx.Response(400, json={"error": "server_args accepts numbers only"})
            lose = self.lose_answers > 0
            if lose:
                self.lose_answers -= 1
                if self.lose_before_apply:
                    raise httpx.ReadTimeout("the answer was lost", request=request)
            ok = self.apply(args)
            if lose:
                raise httpx.ReadTimeout("the answer was lost", request=request)
            return httpx.Response(200, json=[ok] * self.dp_size)
        return httpx.Response(404, json={"detail": "Not Found"})

    def apply(self, args: dict[str, Any]) -> bool:
        if not self.plugin or not self.ownership:
            value = args.get(KNOB_KEY)
            ok = self.plugin and set(args) == {KNOB_KEY} and isinstance(value, int) and value >= 0
            if ok:
                self._set_value(int(args[KNOB_KEY]))
            return ok
        try:
            req = knob_contract.parse_request(args)
        except knob_contract.ContractError as exc:
            self.owner.refuse(args, str(exc))
            return False
        if req is None or set(args) - set(knob_contract.KEYS):
            return False
        why = self.owner.check(req)
        if why is not None:
            self.owner.refuse(args, why)
            return False
        previous = self.values()[0]
        if req.value is not None:
            self._set_value(req.value)
        self.owner.commit(req, previous)
        return True

    def _set_value(self, value: int) -> None:
        for rank, state in enumerate(self.info["internal_states"]):
            if rank not in self.stuck_ranks:
                state["spectower"]["spec_max_bs"] = value
