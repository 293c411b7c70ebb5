"""Keys never leak: quoted flag values, nested tokens and argv lists are redacted in every stored copy."""

from __future__ import annotations

import json

from spectower.collectors.sglang.server_info import parse_server_info
from spectower.storage.redact import REDACTED, redact, redact_flags

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
