"""collectors.sglang.server_info: the real 0.5.17 /server_info (and its deprecated alias), secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.collectors.sglang.server_info import ServerInfoError, parse_server_info
from spectower.storage.redact import REDACTED


def _load(real_data: Path, name: str) -> dict:
    return json.loads((real_data / "sglang-0.5.17-h200" / name).read_text(encoding="utf-8"))


def test_idle_server_info(real_data: Path) -> None:
    info = parse_server_info(_load(real_data, "server_info_idle.json"))
    assert info.version == "0.5.17"
    assert info.served_model_name == ".gpu/tiny/target"
    assert info.speculative_algorithm == "EAGLE3"
    assert info.speculative_num_steps == 3 and info.speculative_adaptive is True
    assert info.max_running_requests == 48
    assert info.decode_log_interval == 10
    assert (info.tp_size, info.dp_size) == (1, 1)
    assert info.enable_metrics is True
    assert len(info.ranks) == 1
    r = info.ranks[0]
    assert r.spec_max_bs == 1073741824 and r.batches_drafted == 9 and r.batches_gated == 0
    assert r.avg_spec_accept_length is None  # absent until speculation has run
    assert info.knob == 1073741824


def test_after_load_server_info(real_data: Path) -> None:
    info = parse_server_info(_load(real_data, "server_info_after.json"))
    r = info.ranks[0]
    assert r.spec_max_bs == 0 and info.knob == 0
    assert (r.batches_drafted, r.batches_gated) == (8991, 8457)
    assert r.speculative_num_steps == 0  # the active adaptive tier while gated
    assert r.avg_spec_accept_length == pytest.approx(1.0002287805994052)
    assert r.last_gen_throughput == pytest.approx(3285.5332058964627)


def test_deprecated_alias_same_content(real_data: Path) -> None:
    a = parse_server_info(_load(real_data, "server_info_idle.json"))
    b = parse_server_info(_load(real_data, "get_server_info_idle.json"))
    assert a.info_hash == b.info_hash


def test_same_launch_same_fingerprint_and_stable_hash(real_data: Path) -> None:
    # Both captures are of one launch (startup_time equal); the knob moved and the adaptive tier changed
    # in internal_states, which must not make a new configuration snapshot.
    a = parse_server_info(_load(real_data, "server_info_idle.json"))
    b = parse_server_info(_load(real_data, "server_info_after.json"))
    assert a.startup_fingerprint == b.startup_fingerprint
    assert a.info_hash == b.info_hash
    assert json.loads(a.startup_fingerprint or "{}")["tokenizer_e2e"] == pytest.approx(38.849960867999926)
    doc = _load(real_data, "server_info_after.json")
    doc["startup_time"]["tokenizer_e2e"] = 40.0  # another launch
    assert parse_server_info(doc).info_hash != b.info_hash


def test_secrets_redacted(real_data: Path) -> None:
    doc = _load(real_data, "server_info_idle.json")
    doc["api_key"] = "sk-live-123"
    doc["admin_api_key"] = "adm-456"
    doc["ssl_keyfile_password"] = "pw"
    doc["launch_command"] = (
        "python -m sglang.launch_server --api-key sk-live-123 --admin-api-key=adm-456 --port 1"
    )
    doc["internal_states"][0]["api_key"] = "sk-live-123"
    info = parse_server_info(doc)
    blob = json.dumps(info.info)
    assert "sk-live-123" not in blob and "adm-456" not in blob and '"pw"' not in blob
    assert info.info["api_key"] == REDACTED and info.info["admin_api_key"] == REDACTED
    assert (
        info.launch_command
        == f"python -m sglang.launch_server --api-key {REDACTED} --admin-api-key={REDACTED} --port 1"
    )
    assert info.info["max_total_num_tokens"] == 6463684  # "token" in a name is not a secret


@pytest.mark.parametrize(
    ("doc", "msg"),
    [
        ([], "expected a JSON object"),
        ({"x": 1}, "neither"),
        ({"version": "1", "internal_states": {}}, "not a list"),
    ],
)
def test_bad_documents(doc: object, msg: str) -> None:
    with pytest.raises(ServerInfoError, match=msg):
        parse_server_info(doc)


def test_one_max_running_requests_rule(real_data: Path) -> None:
    """The most one DP rank runs at once: SGLang's per-rank effective value first (below the server arg under
    DP attention), then the ranks' own value, then the top level; values no column holds are unknown."""
    doc = _load(real_data, "server_info_after.json")
    doc["max_running_requests"], doc["dp_size"] = 96, 2
    rank = {**doc["internal_states"][0], "effective_max_running_requests_per_dp": 48}
    doc["internal_states"] = [{**rank, "dp_rank": i} for i in (0, 1)]
    assert parse_server_info(doc).max_running_requests == 48
    for state in doc["internal_states"]:
        del state["effective_max_running_requests_per_dp"]
        state["max_running_requests"] = 40
    assert parse_server_info(doc).max_running_requests == 40
    for state in doc["internal_states"]:
        state["max_running_requests"] = 10**30
    assert parse_server_info(doc).max_running_requests == 96
    doc["max_running_requests"] = "many"
    assert parse_server_info(doc).max_running_requests is None


def test_a_pd_routers_decode_workers_are_read(real_data: Path) -> None:
    worker = _load(real_data, "server_info_after.json")
    info = parse_server_info({"prefill": [worker], "decode": [worker, worker]})
    assert info.version == "0.5.17" and [r.dp_rank for r in info.ranks] == [0, 1]
    assert info.max_running_requests == 48 and info.knob == 0
    assert "prefill" in info.info  # the document as it came is what is kept


def test_the_collector_and_storage_share_one_snapshot_hash(real_data: Path, tmp_path: Path) -> None:
    """Volatile keys are left out at every depth (a PD router nests whole worker documents), and the
    database keeps a new snapshot exactly when the collector's hash changes."""
    from spectower.storage import open_database
    from spectower.storage.snapshots import stable_server_info_hash

    worker = _load(real_data, "server_info_after.json")
    router = {"prefill": [worker], "decode": [worker]}
    busy = json.loads(json.dumps(router))
    busy["decode"][0]["internal_states"][0]["spectower"]["spec_max_bs"] = 7
    busy["decode"][0]["last_gen_throughput"] = 1.0
    a, b = parse_server_info(router), parse_server_info(busy)
    assert a.info_hash == b.info_hash == stable_server_info_hash(a.info)
    relaunched = json.loads(json.dumps(router))
    relaunched["decode"][0]["max_running_requests"] = 64
    c = parse_server_info(relaunched)
    assert c.info_hash != a.info_hash
    with open_database(tmp_path / "s.db") as db:
        sid = db.server_id("http://pd-router:8000")
        stored = [db.record_server_info(sid, x.info, ts=i) for i, x in enumerate((a, b, c))]
    assert stored == [True, False, True]


def test_the_plugin_block_is_typed_per_rank(real_data: Path) -> None:
    doc = _load(real_data, "server_info_after.json")
    doc["internal_states"][0]["spectower"].update(
        owner="manual", lock={"writer": "manual", "since": 1.0, "expires_at": 101.0}, server_time=41.0,
        refused="", plugin_version="0.2.0",
    )  # fmt: skip
    doc["internal_states"].append({"dp_rank": 1, "spectower": {"owner": "root", "batches_drafted": 3}})
    first, second = parse_server_info(doc).ranks
    assert first.plugin and first.owner == "manual" and first.lock_left_s() == 60.0
    assert first.plugin_version == "0.2.0" and not first.refused
    # a block without the knob is not the plugin; an owner the contract does not know is unknown
    assert not second.plugin and second.owner is None and second.batches_drafted == 3
    assert parse_server_info(doc).info["internal_states"][1]["spectower"]["owner"] == "root"  # raw kept
