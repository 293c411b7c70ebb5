"""control.knob at unit level: the real /server_info capture parsed, every refusal path, over MockTransport.

The same client against the real simulator subprocess is in tests/test_control_cli.py and test_runner.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from spectower.control.knob import DEFAULT_TIMEOUT, KnobClient
from spectower.control.knob_state import (
    KnobAuthError,
    KnobProtocolError,
    KnobUnsupportedError,
    KnobValueError,
    NotSGLangServerError,
    PluginMissingError,
    ServerUnreachableError,
    check_target,
    knob_state,
)
from spectower.control.sglang_config import PLUGIN_INSTALL_HINT, bands_allow_zero

from tests.conftest import dead_url
from tests.fake_knob_server import FakeKnobServer, real_server_info

URL = "http://10.1.2.3:30000"


def client_for(fake: FakeKnobServer, key: str | None = None, **kw: object) -> KnobClient:
    options: dict[str, object] = {"readback_delay_s": 0.0, **kw}
    return KnobClient(URL, key, transport=fake.transport(), **options)  # type: ignore[arg-type]


def test_parse_the_real_capture() -> None:
    state = knob_state(real_server_info(), URL)
    assert state.server_version == "0.5.17"
    assert state.speculative_algorithm == "EAGLE3"
    assert state.speculative_adaptive is True
    assert state.max_running_requests == 48
    assert state.plugin_installed
    assert state.spec_max_bs == 0 and state.mode == "off"
    assert state.plugin_version is None  # the stand-in plugin of the capture did not report one
    rank = state.ranks[0]
    assert (rank.batches_drafted, rank.batches_gated) == (8991, 8457)
    assert rank.active_num_steps == 0  # gated: the active adaptive tier is 0
    assert rank.accept_length is not None and rank.accept_length > 1
    # The config is a path on another host: it cannot be read from here, so it is unknown, not "no".
    assert state.bands_allow_zero is None
    assert state.problems() == []


def test_bands_allow_zero_from_a_local_config(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"1": {"candidate_steps": [0, 3]}, "16": {"candidate_steps": [0, 3]}}))
    bad.write_text(json.dumps({"1": {"candidate_steps": [3]}, "16": {"candidate_steps": [0, 3]}}))
    info = real_server_info()
    info["speculative_adaptive_config"] = str(good)
    assert knob_state(info, "http://127.0.0.1:30000").bands_allow_zero is True
    info["speculative_adaptive_config"] = str(bad)
    state = knob_state(info, "http://127.0.0.1:30000")
    assert state.bands_allow_zero is False
    assert any("band 1 does not allow step 0" in p for p in state.problems())
    info["speculative_adaptive_config"] = None  # SGLang's default bands: band 1 has no 0
    assert knob_state(info, URL).bands_allow_zero is False
    assert bands_allow_zero({"1": [0, 1], "8": [0]}) and not bands_allow_zero({})


def test_read_and_set_off_on_n_confirmed() -> None:
    fake = FakeKnobServer(admin_key="s3cret")
    with client_for(fake, "s3cret") as client:
        assert client.timeout == DEFAULT_TIMEOUT
        result = client.set("on")
        assert result.requested == 48 and result.confirmed and result.old_max_bs == 0
        assert fake.posts[-1].headers["authorization"] == "Bearer s3cret"
        sent = json.loads(fake.posts[-1].content)["server_args"]
        assert sent["spectower_spec_max_bs"] == 48 and sent["spectower_writer"] == 1  # manual
        assert 1 <= sent["spectower_request_id"] < 2**53 and set(sent) == {
            "spectower_spec_max_bs", "spectower_writer", "spectower_request_id"}  # fmt: skip
        assert result.outcome == "confirmed" and result.after is not None and result.after.owner == "manual"
        result = client.set(12)
        assert (result.old_max_bs, result.requested, result.confirmed) == (48, 12, True)
        assert result.per_rank() == [{"dp_rank": 0, "accepted": True, "spec_max_bs": 12, "owner": "manual",
                                      "confirmed": True, "outcome": "applied"}]  # fmt: skip
        assert client.read().mode == "threshold"
        result = client.set("off")
        assert result.requested == 0 and result.confirmed
        assert client.read().mode == "off"
    assert fake.values() == [0]


def test_out_of_range_is_refused_before_sending() -> None:
    fake = FakeKnobServer()
    with client_for(fake) as client:
        with pytest.raises(KnobValueError, match=r"exceeds the server's max_running_requests \(48\)"):
            client.set(49)
        with pytest.raises(KnobValueError, match=">= 0"):
            client.set(-1)
        with pytest.raises(KnobValueError):
            client.set(True)  # bool is not an int here
    assert fake.posts == []
    with pytest.raises(KnobValueError, match="'on', 'off'"):
        check_target("sometimes")


def test_wrong_and_missing_key_are_permission_errors_without_the_key() -> None:
    fake = FakeKnobServer(admin_key="right-key")
    with client_for(fake, "wrong-key") as client, pytest.raises(KnobAuthError) as wrong:
        client.set(4)
    assert isinstance(wrong.value, PermissionError)
    assert "wrong key" in str(wrong.value) and "wrong-key" not in str(wrong.value)
    with client_for(fake) as client, pytest.raises(KnobAuthError, match="none is set: set SPECTOWER_ADMIN"):
        client.set(4)
    assert fake.values() == [0]
    assert "wrong-key" not in repr(client_for(fake, "wrong-key"))


def test_plugin_missing_says_how_to_install_and_sends_nothing() -> None:
    fake = FakeKnobServer(plugin=False)
    with client_for(fake) as client:
        state = client.read()
        assert not state.plugin_installed and state.mode == "unknown"
        with pytest.raises(PluginMissingError) as err:
            client.set(0)
    assert isinstance(err.value, LookupError)
    assert PLUGIN_INSTALL_HINT in str(err.value) and "pip install spectower" in str(err.value)
    assert fake.posts == []


def test_plugin_gone_between_read_and_set_answers_false() -> None:
    """The server answers [false] (SGLang's answer to an unknown key) and the read-back has no plugin."""
    fake = FakeKnobServer()
    with client_for(fake) as client:
        before = client.read()
        fake.plugin = False  # e.g. the server was restarted without the plugin
        for state in fake.info["internal_states"]:
            state.pop("spectower")
        with pytest.raises(PluginMissingError, match=r"answered \[false\]"):
            client.set(8, before=before)
    assert len(fake.posts) == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"speculative_adaptive": False}, "relaunch SGLang with --speculative-adaptive"),
        ({"speculative_adaptive_config": None}, "band 1 does not allow step 0"),
        ({"speculative_algorithm": None}, "needs EAGLE or EAGLE3"),
    ],
)
def test_servers_that_cannot_take_the_knob(change: dict[str, object], message: str) -> None:
    fake = FakeKnobServer()
    fake.info.update(change)
    with client_for(fake) as client, pytest.raises(KnobUnsupportedError, match=message):
        client.set(4)
    assert fake.posts == []


def test_unreachable_and_not_sglang() -> None:
    dead = KnobClient(dead_url(), timeout=2.0)
    with dead as client, pytest.raises(ServerUnreachableError, match="cannot reach") as err:
        client.read()
    assert isinstance(err.value, ConnectionError)
    not_sglang = httpx.MockTransport(lambda request: httpx.Response(404, text="nope"))
    with KnobClient(URL, transport=not_sglang) as client, pytest.raises(NotSGLangServerError):
        client.read()
    with pytest.raises(KnobValueError, match="--server must be an http"):
        KnobClient("ftp://example")


def test_read_back_mismatch_is_not_confirmed_per_rank() -> None:
    fake = FakeKnobServer(dp_size=2, stuck_ranks=frozenset({1}))
    with client_for(fake, readback_attempts=2) as client:
        result = client.set(7)
    assert result.accepted == (True, True)
    assert result.confirmed_ranks == (True, False)
    assert not result.confirmed
    assert [row["spec_max_bs"] for row in result.per_rank()] == [7, 0]


def test_refused_value_is_not_confirmed() -> None:
    fake = FakeKnobServer()
    answers = httpx.MockTransport(
        lambda r: httpx.Response(200, json=[False]) if r.method == "POST" else fake.handle(r)
    )
    with KnobClient(URL, transport=answers, readback_delay_s=0.0) as client:
        result = client.set(5)
    assert not result.confirmed and result.error and "refused" in result.error


def test_api_key_is_sent_on_reads() -> None:
    fake = FakeKnobServer()
    with KnobClient(URL, api_key="api-k", transport=fake.transport()) as client:
        client.read()
    assert fake.requests[-1].headers["authorization"] == "Bearer api-k"


# ------------------------------------------------------------------ ownership and outcomes (issue #13)


def test_a_lost_answer_is_settled_by_read_back() -> None:
    """The server applied the set but its answer never arrived: the read-back finds this request applied."""
    fake = FakeKnobServer(lose_answers=1)
    with client_for(fake, settle_s=5.0) as client:
        result = client.set(0, hold_s=7200)
    assert result.outcome == "confirmed" and result.confirmed and result.accepted == ()
    assert result.answer_lost and "did not answer /set_internal_state" in result.answer_lost
    assert result.old_max_bs == 0 and result.after is not None and result.after.owner == "manual"
    assert result.after.lock_left_s() == 7200


def test_a_request_that_never_reached_the_server_is_unknown_not_failed() -> None:
    fake = FakeKnobServer(lose_answers=1, lose_before_apply=True)
    with client_for(fake, settle_s=0.2) as client:
        result = client.set(5)
    assert result.outcome == "unknown" and not result.confirmed
    assert result.error and result.error.startswith("outcome unknown:") and "did not answer" in result.error
    assert fake.values() == [0]


def test_policy_write_is_refused_by_the_server_while_a_manual_lock_holds() -> None:
    fake = FakeKnobServer()
    with client_for(fake) as client:
        assert client.set(0).confirmed  # manual: takes the lock
        refused = client.set(20, writer="policy")
        assert refused.outcome == "not applied" and refused.refused_by_lock
        assert refused.error and "locked by a manual write until released" in refused.error
        state = client.read()
        assert state.owner == "manual" and state.spec_max_bs == 0
        assert state.policy_last is not None and state.policy_last["applied"] is False
        released = client.release()
        assert released.confirmed and released.after is not None and released.after.owner == "policy"
        assert client.set(20, writer="policy").confirmed
    assert fake.values() == [20]


def test_old_plugin_takes_only_a_plain_manual_set() -> None:
    fake = FakeKnobServer(ownership=False)
    with client_for(fake) as client:
        assert not client.read().ownership_supported
        with pytest.raises(KnobUnsupportedError, match="predates server-side locks"):
            client.set(4, writer="policy")
        with pytest.raises(KnobUnsupportedError, match="predates"):
            client.set(4, hold_s=60)
        result = client.set(4)
        assert result.confirmed and json.loads(fake.posts[-1].content) == {"server_args": {KNOB: 4}}


def test_values_no_database_can_hold_are_refused_with_one_line() -> None:
    with pytest.raises(KnobValueError, match="at most 2147483647"):
        check_target(10**30)
    fake = FakeKnobServer()
    # a max_running_requests no column holds is not a value (collectors' ServerInfo), so "on" has none
    fake.info["max_running_requests"] = 10**30
    for state in fake.info["internal_states"]:
        state["max_running_requests"] = state["effective_max_running_requests_per_dp"] = 10**30
    with client_for(fake) as client:
        assert client.read().max_running_requests is None
        with pytest.raises(KnobUnsupportedError, match="does not report max_running_requests"):
            client.set("on")
    assert fake.posts == []


def test_answers_are_capped_in_size() -> None:
    huge = httpx.MockTransport(lambda r: httpx.Response(200, content=b"[" + b"1," * 10_000_000 + b"1]"))
    with KnobClient(URL, transport=huge) as client, pytest.raises(KnobProtocolError, match="more than"):
        client.read()


KNOB = "spectower_spec_max_bs"
