"""The simulator answers with a real SGLang server's shapes (key sets compared with the 0.5.17 captures)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from spectower.plugin import launcher_state
from spectower.plugin.draft_holes import ExtendSkip
from spectower.plugin.gc_pauses import GcPauses
from spectower.plugin.knob_contract import KnobOwner

from benchmarks.simulator_process import SimulatorProcess

# Keys 0.5.23 reports that the 0.5.17 capture lacks (docs/sglang-reference.md §3).
NEWER_TOP_LEVEL = {"launch_command", "frontend"}
# The plugin's block: the knob (the first contract), the engine counters, the exploration block (the
# plugin's Gate.explore_report shape), and who holds the knob (the ownership report both the plugin and the
# simulator take from plugin/knob_contract.py).
# gc (plugin 0.4.5): the process's garbage collections; the simulator times its own (plugin/gc_pauses.py);
# gated_decode: the gated-decode plugin's skips and drains (draft_holes.ExtendSkip.report's keys)
SPECTOWER_KEYS = {"plugin_version", "spec_max_bs", "batches_drafted", "batches_gated", "counters", "explore",
                  "gc", "loop", "launcher", "gated_decode"} | set(KnobOwner().report())  # fmt: skip
SEPARATORS = ("\u2028", "\u0085")
SEPARATOR_TOKENS, SEPARATOR_CLIENTS = 2000, 16


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorProcess]:
    with SimulatorProcess(decode_log_interval=5) as s:
        httpx.post(
            f"{s.base_url}/generate",
            json={"text": "warm", "sampling_params": {"max_new_tokens": 30}},
            timeout=30,
        )
        yield s


def _load(real: Path, name: str) -> Any:
    return json.loads((real / "sglang-0.5.17-h200" / name).read_text())


def _key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Every key path of nested dicts (lists: their first element)."""
    out: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(prefix + k)
            out |= _key_paths(v, prefix + k + ".")
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict):
        out |= _key_paths(obj[0], prefix + "[].")
    return out


def test_server_info_has_the_real_keys(sim: SimulatorProcess, real_data: Path) -> None:
    real = _load(real_data, "server_info_after.json")
    mine = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()
    assert set(real) <= set(mine), f"missing: {sorted(set(real) - set(mine))}"
    assert set(mine) - set(real) <= NEWER_TOP_LEVEL
    real_state = dict(real["internal_states"][0])
    real_state["spectower"] = {k: v for k, v in real_state["spectower"].items() if k != "pid"}
    state = mine["internal_states"][0]
    assert set(real_state) <= set(state), f"missing: {sorted(set(real_state) - set(state))}"
    assert set(state["spectower"]) == SPECTOWER_KEYS
    assert set(state["spectower"]["gc"]) == set(GcPauses().report())
    assert set(state["spectower"]["launcher"]) == set(launcher_state.report())  # plugin 0.4.8's block
    assert set(state["spectower"]["gated_decode"]) == set(ExtendSkip().report())
    assert set(state["memory_usage"]) == set(real_state["memory_usage"])
    # values a client relies on, with SGLang's types
    assert mine["speculative_adaptive"] is True
    assert mine["speculative_algorithm"] == "EAGLE3"
    assert mine["max_running_requests"] == 64
    assert isinstance(state["avg_spec_accept_length"], float)
    assert state["spectower"]["spec_max_bs"] == 64  # initial: always on
    assert mine["api_key"] is None and mine["admin_api_key"] is None


def test_deprecated_aliases_answer_the_same(sim: SimulatorProcess) -> None:
    a = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()
    b = httpx.get(f"{sim.base_url}/get_server_info", timeout=10).json()
    assert set(a) == set(b)
    assert (
        httpx.get(f"{sim.base_url}/get_model_info", timeout=10).json()
        == httpx.get(f"{sim.base_url}/model_info", timeout=10).json()
    )


def test_adaptive_config_every_band_allows_zero(sim: SimulatorProcess) -> None:
    info = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()
    bands = json.loads(Path(info["speculative_adaptive_config"]).read_text())
    assert bands
    for band in bands.values():
        assert 0 in band["candidate_steps"] and info["speculative_num_steps"] in band["candidate_steps"]


def test_loads_json_matches_capture(sim: SimulatorProcess, real_data: Path) -> None:
    real = _load(real_data, "loads_all_after.json")
    mine = httpx.get(f"{sim.base_url}/v1/loads", params={"include": "all"}, timeout=10).json()
    assert set(mine) == set(real)
    assert _key_paths(mine["loads"][0]) >= _key_paths(real["loads"][0]) - {"decode_moments"}
    core = httpx.get(f"{sim.base_url}/v1/loads", timeout=10).json()["loads"][0]
    assert "memory" not in core and "num_running_reqs" in core
    spec = httpx.get(f"{sim.base_url}/v1/loads", params={"include": "spec"}, timeout=10).json()["loads"][0]
    assert set(spec["speculative"]) == {"accept_length", "accept_rate"}
    assert httpx.get(f"{sim.base_url}/v1/loads", params={"include": "bogus"}, timeout=10).status_code == 400


def test_loads_prometheus_matches_capture(sim: SimulatorProcess, real_data: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    real_text = (real_data / "sglang-0.5.17-h200" / "loads_prom.txt").read_text()
    real = {f.name for f in text_string_to_metric_families(real_text)}
    text = httpx.get(
        f"{sim.base_url}/v1/loads", params={"format": "prometheus", "include": "all"}, timeout=10
    ).text
    mine = {f.name: f for f in text_string_to_metric_families(text)}
    assert real <= set(mine), f"missing: {sorted(real - set(mine))}"
    assert all(s.labels == {"dp_rank": "0"} for f in mine.values() for s in f.samples)


def _real_events(real_data: Path) -> list[dict[str, Any]]:
    raw = (real_data / "sglang-0.5.17-h200" / "generate_stream.txt").read_bytes()
    events = [e for e in raw.split(b"\n\n") if e.strip()]
    assert events[-1].strip() == b"data: [DONE]"
    return [json.loads(e[len(b"data: ") :]) for e in events[:-1]]


def test_generate_stream_matches_capture(sim: SimulatorProcess, real_data: Path) -> None:
    real = _real_events(real_data)
    with (
        httpx.Client(timeout=30) as client,
        connect_sse(
            client,
            "POST",
            f"{sim.base_url}/generate",
            json={"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 24}},
        ) as source,
    ):
        assert source.response.headers["content-type"].startswith("text/event-stream")
        datas = [sse.data for sse in source.iter_sse()]
    assert datas[-1] == "[DONE]"
    mine = [json.loads(d) for d in datas[:-1]]
    assert set(mine[0]) == set(real[0]) == {"text", "output_ids", "meta_info"}
    assert set(mine[0]["meta_info"]) == set(real[0]["meta_info"])
    assert set(mine[1]["meta_info"]) == set(real[1]["meta_info"])
    assert set(mine[-1]["meta_info"]) == set(real[-1]["meta_info"])
    assert mine[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 24}
    # cumulative, like SGLang without --incremental-streaming-output
    assert len(mine[-1]["output_ids"]) == mine[-1]["meta_info"]["completion_tokens"] == 24
    assert all(a["text"] == b["text"][: len(a["text"])] for a, b in itertools.pairwise(mine))


def test_generate_non_stream_and_input_ids(sim: SimulatorProcess) -> None:
    r = httpx.post(
        f"{sim.base_url}/generate",
        json={"input_ids": list(range(50)), "sampling_params": {"max_new_tokens": 7}},
        timeout=30,
    )
    body = r.json()
    assert set(body) == {"text", "output_ids", "meta_info"}
    assert body["meta_info"]["prompt_tokens"] == 50 and body["meta_info"]["completion_tokens"] == 7
    # text prompt: ceil(len / 4) tokens
    r = httpx.post(
        f"{sim.base_url}/generate",
        json={"text": "x" * 41, "sampling_params": {"max_new_tokens": 1}},
        timeout=30,
    )
    assert r.json()["meta_info"]["prompt_tokens"] == 11
    assert httpx.post(f"{sim.base_url}/generate", json={"sampling_params": {}}, timeout=10).status_code == 400


def test_chat_completion_matches_capture(sim: SimulatorProcess, real_data: Path) -> None:
    real = _load(real_data, "chat_nonstream.json")
    mine = httpx.post(
        f"{sim.base_url}/v1/chat/completions",
        json={"model": "default", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16},
        timeout=30,
    ).json()
    assert _key_paths(mine) == _key_paths(real)
    assert mine["usage"]["completion_tokens"] == 16
    assert mine["choices"][0]["finish_reason"] == "length"


def _sse_data(url: str, body: dict[str, Any]) -> list[str]:
    """The ``data`` of every SSE event a streamed POST answers, ``[DONE]`` included."""
    with httpx.Client(timeout=30) as client, connect_sse(client, "POST", url, json=body) as source:
        return [sse.data for sse in source.iter_sse()]


def test_chat_stream_with_usage_chunk(sim: SimulatorProcess) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    url = f"{sim.base_url}/v1/chat/completions"
    datas = _sse_data(url, chat | {"max_tokens": 12, "stream_options": {"include_usage": True}})
    assert datas[-1] == "[DONE]"
    chunks = [json.loads(d) for d in datas[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 12
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
    assert text
    # without include_usage: no usage chunk
    chunks = [json.loads(d) for d in _sse_data(url, chat | {"max_tokens": 5}) if d != "[DONE]"]
    assert all(c["choices"] for c in chunks)


def test_completions_stream_and_plain(sim: SimulatorProcess) -> None:
    body = httpx.post(
        f"{sim.base_url}/v1/completions", json={"model": "m", "prompt": "Once", "max_tokens": 6}, timeout=30
    ).json()
    assert body["object"] == "text_completion" and body["usage"]["completion_tokens"] == 6
    streamed = {"model": "m", "prompt": "Once", "max_tokens": 6, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
    chunks = [json.loads(d) for d in _sse_data(f"{sim.base_url}/v1/completions", streamed) if d != "[DONE]"]
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) != ""


def test_models_and_model_info(sim: SimulatorProcess, real_data: Path) -> None:
    real = _load(real_data, "v1_models.json")
    mine = httpx.get(f"{sim.base_url}/v1/models", timeout=10).json()
    assert _key_paths(mine) == _key_paths(real)
    assert mine["data"][0]["id"] == "glm-5-nvfp4"
    real_info = _load(real_data, "model_info.json")
    info = httpx.get(f"{sim.base_url}/model_info", timeout=10).json()
    assert set(real_info) <= set(info)
    # its breakable-CUDA-graph block is the server args' prefill graph config, as on the real server
    assert info["embedding"] == real_info["embedding"]
    prefill = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["cuda_graph_config"]["prefill"]
    assert info["embedding"]["bcg"]["capture_batch_sizes"] == prefill["bs"]


def test_health_ready_and_flush(sim: SimulatorProcess) -> None:
    for path in ("/health", "/health_generate", "/ready"):
        assert httpx.get(f"{sim.base_url}{path}", timeout=10).status_code == 200
    r = httpx.post(f"{sim.base_url}/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed.")
    state = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()["internal_states"][0]
    assert "avg_spec_accept_length" not in state  # reset: absent until speculation runs again


def test_awkward_line_separators_reach_clients(sim: SimulatorProcess) -> None:
    # Real servers emit U+2028 / U+0085 raw inside JSON strings; the simulator does too (deterministic per
    # request: about one token in 97, textgen.AWKWARD_EVERY). 2000 tokens leave no room for a request
    # history without one (a chance of e^-20); asked as 16 requests at once they take ~2 s instead of ~20.
    def generate(_: int) -> httpx.Response:
        body = {"text": "go", "sampling_params": {"max_new_tokens": SEPARATOR_TOKENS // SEPARATOR_CLIENTS}}
        return httpx.post(f"{sim.base_url}/generate", json=body, timeout=120)

    with ThreadPoolExecutor(SEPARATOR_CLIENTS) as pool:
        responses = list(pool.map(generate, range(SEPARATOR_CLIENTS)))
    seen = [(r, ch) for r in responses for ch in SEPARATORS if ch in r.json()["text"]]
    assert seen
    for r, ch in seen:
        assert ch.encode() in r.content, r.content  # raw, not \\u-escaped
