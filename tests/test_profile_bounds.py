"""Every profile field is bounded (issue #15.2): a value no real server could have is one error line naming
the key, before the simulator or the harness allocates anything for it; at the bounds `sim evaluate` stays
small."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Any

import pytest
from spectower.simulator import profile as prof
from spectower.simulator.harness import evaluate
from spectower.simulator.profile import ProfileError, load_profile, parse_profile
from spectower.simulator.traces import load_trace

from tests.conftest import cli_in_process

BASE = load_profile("llama31-8b-1x-h100").to_json()


def _with(path: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(BASE))
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    return data


def _long(n: int, value: float = 100.0) -> list[float]:
    return [value] * n


CASES = [
    ("max_running_requests", 10**9, "'max_running_requests' must be an integer <= 4096"),
    ("speculative_num_steps", 65, "'speculative_num_steps' must be an integer <= 64"),
    ("prefill_tok_s", 1e12, "'prefill_tok_s' must be <= 1e+08"),
    ("gpus.count", 10**6, "'gpus.count' must be an integer <= 1024"),
    ("gpus.memory_mib", 1e12, "'gpus.memory_mib' must be <="),
    ("gpus.power_limit_w", 1e9, "'gpus.power_limit_w' must be <="),
    ("gpus.name", "x" * 10_000, "'gpus.name' must be a non-empty string of at most 256"),
    ("served_model_name", "m" * 10_000, "'served_model_name' must be a non-empty string of at most 256"),
    ("name", "n" * 10_000, "'name' must be a non-empty string of at most 256"),
    ("output_tok_s.spec_on", [1e12] * 7, "'output_tok_s.spec_on[0]' must be <= 1e+08"),
    ("output_tok_s.plain", [1e12] * 7, "'output_tok_s.plain[0]' must be <= 1e+08"),
    ("output_tok_s.plain", [100.0] * 6, "'output_tok_s.plain' has 6 values but 'concurrency' has 7"),
    ("output_tok_s.knob_off", [100.0] * 7, "'output_tok_s.knob_off' is not a curve"),
    ("accept_length", [100.0] * 7, "'accept_length[0]' must be <= 65"),
    ("concurrency", [1, 2, 4, 8, 16, 32, 1e9], "'concurrency[6]' must be <= 65536"),
    ("concurrency", list(range(1, 200)), "'concurrency' has 199 points; at most 128"),
    ("speculative_algorithm", 3, "'speculative_algorithm' must be a name (e.g. EAGLE3) or null"),
]


@pytest.mark.parametrize(("key", "value", "message"), CASES, ids=[f"{k}-{i}" for i, (k, _, _) in
                                                                 enumerate(CASES)])  # fmt: skip
def test_out_of_bounds_is_one_line_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ProfileError) as info:
        parse_profile(_with(key, value), source="p.json")
    text = str(info.value)
    assert message in text
    assert "\n" not in text and len(text) < 300, text  # one short line, never the offending megabyte


def test_values_at_the_bounds_load() -> None:
    n = prof.MAX_POINTS
    data = _with("concurrency", [1.0 + i * (prof.MAX_CONCURRENCY - 1) / (n - 1) for i in range(n)])
    data["output_tok_s"] = {k: _long(n, prof.MAX_TOK_S) for k in ("spec_on", "spec_off", "plain")}
    data["accept_length"] = _long(n, prof.MAX_ACCEPT_LENGTH)
    data |= {"max_running_requests": prof.MAX_RUNNING_REQUESTS, "speculative_num_steps": prof.MAX_SPEC_STEPS,
             "prefill_tok_s": prof.MAX_TOK_S}  # fmt: skip
    data["gpus"] |= {"count": prof.MAX_GPUS, "memory_mib": prof.MAX_GPU_MEMORY_MIB, "power_limit_w": 1e5}
    loaded = parse_profile(data)
    assert loaded.max_running_requests == 4096 and loaded.plain_tok_s is not None


def test_a_file_over_a_megabyte_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(BASE) + " " * (prof.MAX_PROFILE_BYTES + 1))
    with pytest.raises(ProfileError, match=r"huge.json': more than 1048576 bytes$"):
        load_profile(path)


def test_evaluate_at_the_bounds_stays_small() -> None:
    """The harness tabulates every batch size up to max_running_requests: at 4096 with 128-point curves that
    is a few hundred kB (1e9 made it grow to 8.5 GB before the bound)."""
    n = prof.MAX_POINTS
    data = _with("concurrency", [1.0 + 32 * i for i in range(n)])
    data["output_tok_s"] = {k: [100.0 + i * f for i in range(n)] for k, f in (("spec_on", 3), ("spec_off", 2),
                                                                             ("plain", 4))}  # fmt: skip
    data["accept_length"] = _long(n, 2.0)
    data["max_running_requests"] = prof.MAX_RUNNING_REQUESTS
    big = parse_profile(data)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = evaluate(big, load_trace("diurnal", duration_s=600), "threshold:30", baselines=())
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert out["has_plain_curve"] and 0 < out["efficiency"] <= 1.0
    assert grown_mib < 64, grown_mib


def test_sim_evaluate_refuses_a_billion_running_requests_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "huge-mrr.json"
    path.write_text(json.dumps(_with("max_running_requests", 10**9)))
    t0 = time.monotonic()
    proc = cli_in_process("sim", "evaluate", "--profile", str(path), "--trace", "diurnal")
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "'max_running_requests' must be an integer <= 4096" in lines[0], proc.stderr
    assert time.monotonic() - t0 < 60  # refused up front, not after tabulating


def test_sim_serve_refuses_it_too(tmp_path: Path) -> None:
    path = tmp_path / "huge-mrr.json"
    path.write_text(json.dumps(_with("max_running_requests", 10**9)))
    proc = cli_in_process(
        "serve", "--profile", str(path), "--port", "0", module="spectower.simulator.__main__"
    )
    assert proc.returncode == 2
    assert "max_running_requests" in proc.stderr and "4096" in proc.stderr
