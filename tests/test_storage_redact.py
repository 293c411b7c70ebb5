"""Keys never leak: quoted flag values, nested tokens and argv lists are redacted in every stored copy."""

from __future__ import annotations

import json
from pathlib import Path

from spectower.collectors.sglang.server_info import parse_server_info
from spectower.storage.redact import REDACTED, _key_kind, redact, redact_flags

SECRET = "s3cr3t value"


def test_quoted_flag_values_are_redacted_whole() -> None:
    for cmd in (
        f"python -m sglang.launch_server --ssl-keyfile-password '{SECRET}' --port 30000",
        f'python -m sglang.launch_server --ssl-keyfile-password "{SECRET}" --port 30000',
        f"python -m sglang.launch_server --api-key='{SECRET}' --port 30000",
        "python -m sglang.launch_server --admin-api-key plainkey --hf-token hf_abc --port 30000",
    ):
        out = redact_flags(cmd)
        assert SECRET not in out and "value" not in out and "plainkey" not in out and "hf_abc" not in out
        assert out.endswith("--port 30000") and REDACTED in out


def test_nested_tokens_and_argv_lists() -> None:
    doc = {
        "version": "0.5.23",
        "model_loader_extra_config": {"hub": {"hf_token": "hf_nested", "max_token": 7}},
        "argv": ["python", "-m", "sglang.launch_server", "--api-key", "k1", "--token=k2", "--port", "1"],
        "env": [{"HF_TOKEN": "hf_upper"}],
    }
    out = redact(doc)
    text = json.dumps(out)
    for secret in ("hf_nested", "k1", "k2", "hf_upper"):
        assert secret not in text
    assert out["model_loader_extra_config"]["hub"]["max_token"] == 7  # a count is not a secret
    assert out["argv"][-2:] == ["--port", "1"]
    info = parse_server_info({**doc, "launch_command": f"x --ssl-keyfile-password '{SECRET}'"})
    assert SECRET not in json.dumps(info.info) and "value" not in json.dumps(info.info)


def test_a_key_name_is_judged_once_however_often_the_collector_reads_it(real_data: Path) -> None:
    # the collector redacts every /server_info it reads (a few hundred keys, every 5 s per server): the
    # key patterns are asked once per name, and a document with no secrets comes back equal
    doc = json.loads((real_data / "sglang-0.5.17-h200/server_info_after.json").read_text())
    _key_kind.cache_clear()
    first = redact(doc)
    misses = _key_kind.cache_info().misses
    assert redact(doc) == first
    assert _key_kind.cache_info().misses == misses  # the second read asked no pattern
    assert first["api_key"] in (None, REDACTED) and first["model_path"] == doc["model_path"]


def test_the_redacted_copy_shares_nothing_the_caller_could_change() -> None:
    doc = {"api_key": ["k1"], "hub": {"password": {"x": 1}, "n": [1, {"token": "t"}]}, "hf_token": 3}
    out = redact(doc)
    assert out == {"api_key": REDACTED, "hub": {"password": REDACTED, "n": [1, {"token": REDACTED}]},
                   "hf_token": 3}  # fmt: skip
    out["hub"]["n"][1]["token"] = "changed"
    assert doc["hub"]["n"][1] == {"token": "t"} and doc["api_key"] == ["k1"]
