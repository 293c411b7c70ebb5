"""SGLang's auth rules (docs/sglang-reference.md §4): the pure decision, then over HTTP, the real process."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from spectower.simulator.auth import bearer_token, is_allowed

from benchmarks.simulator_process import SimulatorFactory

KNOB = {"server_args": {"spectower_spec_max_bs": 0}}


@pytest.mark.parametrize(
    ("path", "auth", "api", "admin", "allowed"),
    [
        # no keys: everything open
        ("/set_internal_state", None, None, None, True),
        ("/generate", None, None, None, True),
        # api key only: admin-optional needs it, inference needs it
        ("/set_internal_state", None, "A", None, False),
        ("/set_internal_state", "Bearer A", "A", None, True),
        ("/generate", "Bearer A", "A", None, True),
        ("/generate", "Bearer B", "A", None, False),
        # admin key set: admin-optional needs the admin key, the api key is not enough
        ("/set_internal_state", "Bearer A", "A", "X", False),
        ("/set_internal_state", "Bearer X", "A", "X", True),
        ("/flush_cache", "Bearer X", None, "X", True),
        ("/flush_cache", None, None, "X", False),
        # admin key only: inference stays open
        ("/generate", None, None, "X", True),
        # always open
        ("/health", None, "A", "X", True),
        ("/metrics", None, "A", "X", True),
        ("/ready", None, "A", "X", True),
        ("/health_generate", None, "A", "X", True),
        ("/metrics/extra", None, "A", "X", True),
        # wrong scheme
        ("/set_internal_state", "Basic X", None, "X", False),
    ],
)
def test_decision(path: str, auth: str | None, api: str | None, admin: str | None, allowed: bool) -> None:
    assert is_allowed(path, auth, api, admin) is allowed


def test_bearer_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer abc") == "abc"
    assert bearer_token("Bearer  abc") == " abc"  # verbatim after the first space, as SGLang compares it
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def _spec_max_bs(base_url: str, headers: dict[str, str]) -> int:
    info = httpx.get(f"{base_url}/server_info", headers=headers, timeout=10).json()
    return int(info["internal_states"][0]["spectower"]["spec_max_bs"])


def test_admin_key_required_and_nothing_changes_without_it(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(admin_key="adm-secret")
    url = f"{sim.base_url}/set_internal_state"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "adm-secret"}):
        r = httpx.post(url, json=KNOB, headers=headers, timeout=10)
        assert r.status_code == 401
        assert r.json() == {"error": "Unauthorized"}
    assert _spec_max_bs(sim.base_url, {}) == 64
    r = httpx.post(url, json=KNOB, headers={"Authorization": "Bearer adm-secret"}, timeout=10)
    assert r.status_code == 200 and r.json() == [True]
    assert _spec_max_bs(sim.base_url, {}) == 0
    # the key never shows in /server_info or the process output
    assert "adm-secret" not in httpx.get(f"{sim.base_url}/server_info", timeout=10).text
    assert "adm-secret" not in sim.output()
    # flush_cache is admin-optional too
    assert httpx.post(f"{sim.base_url}/flush_cache", timeout=10).status_code == 401


def test_api_key_rules(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(api_key="api-secret")
    gen = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    assert httpx.post(f"{sim.base_url}/generate", json=gen, timeout=10).status_code == 401
    ok = {"Authorization": "Bearer api-secret"}
    assert httpx.post(f"{sim.base_url}/generate", json=gen, headers=ok, timeout=10).status_code == 200
    assert httpx.get(f"{sim.base_url}/v1/models", timeout=10).status_code == 401
    # admin-optional endpoint, only --api-key set: the api key opens it
    assert httpx.post(f"{sim.base_url}/set_internal_state", json=KNOB, timeout=10).status_code == 401
    assert httpx.post(f"{sim.base_url}/set_internal_state", json=KNOB, headers=ok, timeout=10).json() == [
        True
    ]
    assert httpx.get(f"{sim.base_url}/health", timeout=10).status_code == 200


def test_both_keys_api_key_is_not_admin(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(api_key="api-secret", admin_key="adm-secret")
    api = {"Authorization": "Bearer api-secret"}
    adm = {"Authorization": "Bearer adm-secret"}
    assert (
        httpx.post(f"{sim.base_url}/set_internal_state", json=KNOB, headers=api, timeout=10).status_code
        == 401
    )
    assert httpx.post(f"{sim.base_url}/set_internal_state", json=KNOB, headers=adm, timeout=10).json() == [
        True
    ]
    assert _spec_max_bs(sim.base_url, api) == 0


def test_keys_from_files(simulator_factory: SimulatorFactory, tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text("file-secret\n")
    sim = simulator_factory(profile="llama31-8b-1x-h100", admin_api_key_file=str(key_file))
    assert httpx.post(f"{sim.base_url}/set_internal_state", json=KNOB, timeout=10).status_code == 401
    assert httpx.post(
        f"{sim.base_url}/set_internal_state",
        json=KNOB,
        timeout=10,
        headers={"Authorization": "Bearer file-secret"},
    ).json() == [True]
    sim.stop()
    assert "file-secret" not in sim.output()
