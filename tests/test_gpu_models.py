"""benchmarks/gpu/make_models.py: the constructed EAGLE-3 pair the GPU check serves (issue #12).

The fast tests run the construction here (numpy only): the 8B table has Llama-3.1-8B's tensors, the files are
valid sparse safetensors, and ``expect()`` says what the construction claims. The ``sglang`` tests write the
tiny pair inside the SGLang venv and check it with real model code (tests/gpu_model_checks/check_pair.py says
what is real there): transformers' LlamaForCausalLM decodes each prompt greedily as ``expect()`` says, and
SGLang's own LlamaForCausalLMEagle3 (0.5.23, and the 0.5.17 the GPU bundle carries) loads every draft tensor
and guesses what the construction says, so a speculative loop over the two accepts what ``expect()`` says.
That check runs in the plugin checks' batch of each version (tests/sglang_checks.py). Without
``SPECTOWER_SGLANG_PYTHON`` those skip, unless ``SPECTOWER_REQUIRE_SGLANG=1`` (then they fail): the plugin
tests' fixtures.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import test_sglang_plugin as plugin_tests
from tests.conftest import REPO_ROOT
from tests.sglang_checks import PAIR_MISS_SHARE, PAIR_SHARE, SglangChecks
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

# The SGLang venv's python and version (skip / fail rules, the 0.5.17 overlay): the plugin tests' fixtures.
sglang_python = plugin_tests.sglang_python
sglang_version = plugin_tests.sglang_version


def load_make_models() -> Any:
    script = REPO_ROOT / "benchmarks" / "gpu" / "make_models.py"
    spec = importlib.util.spec_from_file_location("make_models", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_models"] = module
    spec.loader.exec_module(module)
    return module


mm = load_make_models()


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return 8 + length, json.loads(f.read(length))


# ---- the construction, without SGLang --------------------------------------------------------------------


def test_8b_target_has_llama_31_8b_tensors() -> None:
    pair = mm.Pair(mm.SHAPES["8b"])
    tensors = {t.name: t.shape for t in mm.target_tensors(pair)}
    count = 0
    for shape in tensors.values():
        n = 1
        for dim in shape:
            n *= dim
        count += n
    assert count == 8_030_261_248  # Llama-3.1-8B's parameter count
    assert tensors["model.embed_tokens.weight"] == (128256, 4096)
    assert tensors["model.layers.31.self_attn.k_proj.weight"] == (1024, 4096)
    assert tensors["model.layers.0.mlp.down_proj.weight"] == (4096, 14336)
    assert len(tensors) == 3 + 32 * 9


def test_8b_draft_is_in_the_public_eagle3_format() -> None:
    pair = mm.Pair(mm.SHAPES["8b"])
    tensors = {t.name: (t.dtype, t.shape) for t in mm.draft_tensors(pair)}
    assert tensors["fc.weight"] == ("BF16", (4096, 3 * 4096))
    assert tensors["midlayer.self_attn.q_proj.weight"] == ("BF16", (4096, 2 * 4096))
    assert tensors["midlayer.self_attn.k_proj.weight"] == ("BF16", (1024, 2 * 4096))
    assert tensors["midlayer.hidden_norm.weight"] == ("BF16", (4096,))
    assert tensors["lm_head.weight"] == ("BF16", (32000, 4096))
    assert tensors["d2t"] == ("I64", (32000,))
    assert tensors["t2d"] == ("BOOL", (128256,))
    assert "model.embed_tokens.weight" not in tensors  # SGLang hands the draft the target's embedding


def test_8b_draft_file_is_sparse(tmp_path: Path) -> None:
    path = tmp_path / "draft.safetensors"
    mm.write_safetensors(path, mm.draft_tensors(mm.Pair(mm.SHAPES["8b"])))
    base, header = read_header(path)
    stat = path.stat()
    assert stat.st_size == base + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert stat.st_size > 800e6
    assert stat.st_blocks * 512 < 0.05 * stat.st_size  # the zero tensors are holes


def test_tiny_files_hold_the_construction(tmp_path: Path) -> None:
    """Parse the written safetensors by hand: contiguous layout, the one-hot embedding, heads, fc, d2t."""
    import numpy as np

    pair = mm.Pair(mm.SHAPES["tiny"], 0.5)
    s = pair.shape
    path = tmp_path / "t.safetensors"
    # the target's tensors and two of the draft's in one file (the draft's names prefixed to stay unique)
    extra = [
        dataclasses.replace(t, name="draft." + t.name)
        for t in mm.draft_tensors(pair)
        if t.name in {"fc.weight", "d2t"}
    ]
    mm.write_safetensors(path, mm.target_tensors(pair) + extra)
    base, header = read_header(path)
    assert header.pop("__metadata__") == {"format": "pt"}
    offsets = [v["data_offsets"] for v in header.values()]
    assert offsets[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(offsets))
    raw = path.read_bytes()

    def array(name: str) -> np.ndarray:
        meta = header[name]
        lo, hi = meta["data_offsets"]
        data = raw[base + lo : base + hi]
        if meta["dtype"] == "BF16":
            bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(meta["shape"])
        return np.frombuffer(data, dtype="<i8").reshape(meta["shape"])

    embed = array("model.embed_tokens.weight")
    assert (embed != 0).sum(axis=1).tolist() == [1] * s.vocab
    assert embed.argmax(axis=1).tolist() == pair.routes().tolist()
    head = array("lm_head.weight")
    assert sorted(map(tuple, np.argwhere(head).tolist())) == sorted(
        (tok, route) for route, tok in pair.route_target().items()
    )
    assert not array("model.layers.2.mlp.up_proj.weight").any()
    assert array("model.layers.2.input_layernorm.weight").tolist() == [1.0] * s.hidden
    fc = array("draft.fc.weight")
    assert np.array_equal(fc[:, : s.hidden], np.eye(s.hidden)) and not fc[:, s.hidden :].any()
    d2t = array("draft.d2t")
    assert (d2t + np.arange(s.draft_vocab)).tolist() == pair.draft_vocab()


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_fixed_share_sets_the_share_of_fixed_point_ids(share: float) -> None:
    pair = mm.Pair(mm.SHAPES["8b"], share)
    routes = pair.routes()
    assert [pair.route(t) for t in range(0, 128256, 97)] == routes[::97].tolist()
    assert abs(pair.realized_share() - share) < 0.002
    bench_ids = range(10, 1000)  # what spectower bench sends as input_ids
    assert abs(sum(pair.route(t) == mm.TO_FIX for t in bench_ids) / len(bench_ids) - share) < 0.02


def test_expect_fixed_point_and_cycle() -> None:
    pair = mm.Pair(mm.SHAPES["8b"], 0.5)
    s = pair.shape
    fixed = pair.expect([7, s.fix], 24)
    assert fixed["continuation"] == [s.fix] * 24
    assert fixed["correct_drafts"] == [3] * 6 and fixed["tokens_per_verify"] == [4, 4, 4, 4, 4, 3]
    assert fixed["spec_verify_ct"] == 6 and fixed["spec_accept_length"] == 4.0
    cycle = pair.expect([7, s.cyc_a], 24)
    assert cycle["continuation"] == [s.cyc_b, s.cyc_a] * 12
    assert cycle["correct_drafts"] == [1] * 12 and cycle["tokens_per_verify"] == [2] * 11 + [1]
    assert cycle["spec_verify_ct"] == 12 and cycle["spec_accept_length"] == 2.0
    entering = next(t for t in range(10, 100) if pair.route(t) == mm.TO_A)
    assert pair.expect([entering], 5)["continuation"] == [s.cyc_a, s.cyc_b, s.cyc_a, s.cyc_b, s.cyc_a]
    assert mm.encode("t7 t90001 t0 t1 t0003 hello t128256", 128256) == [7, 90001, 0, 0, 0, 0, 0]


def test_mix_gives_the_load_figure() -> None:
    # half the requests accept 4 per verify, half 2: the server gauge is 1 / (0.5/4 + 0.5/2) = 2.67
    mix = mm.Pair(mm.SHAPES["8b"], 0.5).mix(range(10, 1000), 256)
    assert mix["server_spec_accept_length"] == pytest.approx(2.67, abs=0.02)
    assert mm.Pair(mm.SHAPES["8b"], 1.0).mix(range(10, 1000), 256)["server_spec_accept_length"] == 4.0


def _closed_loop_tokens_per_slot(
    accepts: list[float], length: int, drafting: bool, steps: int = 4000
) -> float:
    """A batch of len(accepts) closed-loop slots, each serving requests of ``length`` tokens in turn from
    the population ``accepts`` (round robin): the mean of the slots' accept lengths per step, i.e. what
    a drafting step carries per request, with the stream drafting (a request advances by its accept
    length) or gated (by one token)."""
    slots = list(range(len(accepts)))  # slot -> index of the request it serves (into accepts)
    left = [float(length)] * len(slots)
    nxt = len(slots)
    total = 0.0
    for _ in range(steps):
        total += sum(accepts[i % len(accepts)] for i in slots) / len(slots)
        for k, i in enumerate(slots):
            left[k] -= accepts[i % len(accepts)] if drafting else 1.0
            if left[k] <= 0:
                slots[k], left[k], nxt = nxt, float(length), nxt + 1
    return total / steps


def test_a_gated_stream_holds_more_of_the_requests_that_accept_more() -> None:
    # Why learn's drafted estimate leaned high on the H200 (data/gpu-runs/NOTEBOOK.md): a drafting stream's
    # batches hold the requests that accept less for longer; a gated stream holds every request equally long.
    pair = mm.Pair(mm.SHAPES["8b"], 0.5)
    mix = pair.mix(range(10, 1000), 256)
    accepts = [pair.expect([t], 256)["steady_accept_length"] for t in range(10, 74)]
    steady = _closed_loop_tokens_per_slot(accepts, 256, drafting=True)
    explored = _closed_loop_tokens_per_slot(accepts, 256, drafting=False)
    assert explored / steady == pytest.approx(mix["explored_over_steady"], abs=0.02)
    # (4 + 2) / 2 against 1 / (1/8 + 1/4)
    assert mix["explored_over_steady"] == pytest.approx(9 / 8, abs=0.01)
    assert mm.Pair(mm.SHAPES["8b"], 1.0).mix(range(10, 1000), 256)["explored_over_steady"] == 1.0


# ---- against transformers and SGLang's own draft class ----------------------------------------------------


@plugin_tests.sglang_check
def test_pair_decodes_and_drafts_as_constructed(sglang_checks: SglangChecks, sglang_version: str) -> None:
    share, miss = PAIR_SHARE[sglang_version], PAIR_MISS_SHARE[sglang_version]
    result = sglang_checks.result(sglang_version, "pair")  # check_pair.py REPO_ROOT MODELS share miss
    pair = mm.Pair(mm.SHAPES["tiny"], share, miss)
    s = pair.shape

    # the folders load: no missing / unexpected target tensors, every draft tensor reaches its parameter
    assert result["target_loading"] == {}
    assert result["draft_not_loaded"] == []
    assert result["hot_token_id"]["got"] == result["hot_token_id"]["expected"] == pair.draft_vocab()
    tok = result["tokenizer"]
    assert tok["ids"] == tok["expected"] and tok["decoded"] == tok["text"]
    assert result["aux_is_embedding"]  # zero layers: the residual stream is the embedding at every depth

    # the draft's first guess after every possible previous token is the token two steps on
    assert result["first_guess_mismatches"] == []

    cases = result["cases"]
    for name, case in cases.items():
        expected = case["expected"]
        assert expected == pair.expect(case["prompt"], len(expected["continuation"])), name
        # (a) the target's greedy decoding is the construction's
        assert case["greedy"] == expected["continuation"], name
        # (b) with SGLang's draft and the target in EAGLE's loop: the same tokens, accepted as expected
        spec = case["speculative"]
        for key in ("continuation", "spec_verify_ct", "correct_drafts", "tokens_per_verify"):
            assert spec[key] == expected[key], (name, key)
    assert cases["fixed point"]["greedy"] == [s.fix] * 14
    assert cases["fixed point"]["speculative"]["correct_drafts"] == [3] * 4
    assert cases["into the fixed point"]["speculative"]["correct_drafts"] == [3] * 4
    assert cases["2-cycle at a"]["greedy"] == [s.cyc_b, s.cyc_a] * 7
    assert cases["into the 2-cycle"]["greedy"] == [s.cyc_a, s.cyc_b] * 7
    for name in ("2-cycle at a", "2-cycle at b", "into the 2-cycle"):
        assert cases[name]["speculative"]["correct_drafts"] == [1] * 7, name
    if miss:  # the route the draft never guesses: one token per verify step, the bonus token
        for name in ("miss point", "into the miss point"):
            assert cases[name]["greedy"] == [s.miss] * 14, name
            assert cases[name]["speculative"]["correct_drafts"] == [0] * 13, name


def test_a_miss_share_adds_a_fixed_point_the_draft_never_guesses() -> None:
    # issue #32's early-crossover pair: fixed share 0.1, miss share 0.2 accept ~1.74 per verify step
    pair = mm.Pair(mm.SHAPES["8b"], 0.1, 0.2)
    s = pair.shape
    bench_ids = range(10, 1000)
    assert abs(sum(pair.route(t) == mm.TO_MISS for t in bench_ids) / len(bench_ids) - 0.2) < 0.02
    assert pair.routes().tolist()[:2000] == [pair.route(t) for t in range(2000)]
    miss = pair.expect([7, s.miss], 24)
    assert miss["continuation"] == [s.miss] * 24 and set(miss["correct_drafts"]) == {0}
    assert miss["steady_accept_length"] == 1.0
    assert miss["spec_accept_length"] == 24 / 23  # prefill emits the first token, each verify one more
    mix = pair.mix(bench_ids, 256)
    assert 1.70 < mix["server_spec_accept_length"] < 1.78
    assert mix["explored_over_steady"] > 1.1  # the kinds accept 4, 2 and 1: a larger request-mix lean
    # without a miss share the construction is the one every earlier run served
    assert mm.Pair(mm.SHAPES["8b"], 0.5).route_target() == mm.Pair(mm.SHAPES["8b"], 0.5, 0.0).route_target()
    assert mm.TO_MISS not in mm.Pair(mm.SHAPES["8b"], 0.5).routes().tolist()


def test_the_miss_route_is_in_the_written_heads(tmp_path: Path) -> None:
    pair = mm.Pair(mm.SHAPES["tiny"], 0.3, 0.2)
    s = pair.shape
    head = next(t for t in mm.draft_tensors(pair) if t.name == "lm_head.weight")
    draft_id = {t: d for d, t in enumerate(pair.draft_vocab())}
    # the draft's head row of `fix` reads both the fixed point's route and the miss route (its wrong guess)
    rows = sorted((int(i) // s.hidden, int(i) % s.hidden) for i in head.index)
    assert (draft_id[s.fix], mm.TO_MISS) in rows and (draft_id[s.fix], mm.TO_FIX) in rows
    target_head = next(t for t in mm.target_tensors(pair) if t.name == "lm_head.weight")
    assert s.miss * s.hidden + mm.TO_MISS in set(target_head.index.tolist())


def test_the_command_line_refuses_shares_over_one() -> None:
    script = str(REPO_ROOT / "benchmarks/gpu/make_models.py")
    proc = subprocess.run([sys.executable, script, "mix", "--fixed-share", "0.9", "--miss-share", "0.2"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 2 and "--miss-share must be within [0, 1 - --fixed-share]" in proc.stderr
