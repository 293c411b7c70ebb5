"""simulator/profile.py: loading, validation (errors name the key), interpolation, crossover."""

from __future__ import annotations

import copy
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from spectower.simulator.profile import ProfileError, builtin_profile_names, load_profile, parse_profile

GLM5 = "glm5-nvfp4-8x-rtx-pro-6000"
LLAMA = "llama31-8b-1x-h100"


@pytest.fixture
def glm5_raw() -> dict[str, Any]:
    return load_profile(GLM5).to_json()


def test_shipped_profiles_load_by_name() -> None:
    assert {GLM5, LLAMA} <= set(builtin_profile_names())
    for name in (GLM5, LLAMA):
        p = load_profile(name)
        assert p.name == name
        assert p.concurrency == tuple(sorted(p.concurrency))


def test_profile_loads_from_a_path(tmp_path: Path, glm5_raw: dict[str, Any]) -> None:
    path = tmp_path / "mine.json"
    glm5_raw["name"] = "mine"
    path.write_text(json.dumps(glm5_raw))
    assert load_profile(path).name == "mine"
    assert load_profile(str(path)).output_tok_s(8, False) == pytest.approx(590.0)


def _without(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node = out
    *parents, last = dotted.split(".")
    for p in parents:
        node = node[p]
    del node[last]
    return out


@pytest.mark.parametrize(
    "key",
    [
        "concurrency",
        "output_tok_s",
        "output_tok_s.spec_on",
        "output_tok_s.spec_off",
        "accept_length",
        "max_running_requests",
        "speculative_num_steps",
        "prefill_tok_s",
        "noise_cv",
        "gpus",
        "gpus.count",
        "gpus.name",
        "gpus.memory_mib",
        "gpus.power_limit_w",
        "served_model_name",
    ],
)
def test_missing_key_is_named(glm5_raw: dict[str, Any], key: str) -> None:
    with pytest.raises(ProfileError, match=f"missing key '{key}'"):
        parse_profile(_without(glm5_raw, key))


def test_unsorted_concurrency_refused(glm5_raw: dict[str, Any]) -> None:
    glm5_raw["concurrency"] = [1, 4, 2, 8, 16, 32, 64]
    with pytest.raises(ProfileError, match=r"'concurrency'.*ascending"):
        parse_profile(glm5_raw)


def test_duplicate_concurrency_refused(glm5_raw: dict[str, Any]) -> None:
    glm5_raw["concurrency"] = [1, 2, 2, 8, 16, 32, 64]
    with pytest.raises(ProfileError, match="'concurrency'"):
        parse_profile(glm5_raw)


@pytest.mark.parametrize("key", ["output_tok_s.spec_on", "output_tok_s.spec_off", "accept_length"])
def test_length_mismatch_names_the_key(glm5_raw: dict[str, Any], key: str) -> None:
    node = glm5_raw["output_tok_s"] if key.startswith("output_tok_s") else glm5_raw
    leaf = key.split(".")[-1]
    node[leaf] = node[leaf][:-1]
    with pytest.raises(ProfileError, match=f"'{re_escape(key)}' has 6 values but 'concurrency' has 7"):
        parse_profile(glm5_raw)


def re_escape(s: str) -> str:
    import re

    return re.escape(s)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("prefill_tok_s", -1.0),
        ("noise_cv", -0.1),
        ("gpus.memory_mib", -5),
        ("gpus.power_limit_w", -600),
        ("max_running_requests", -1),
        ("speculative_num_steps", -3),
        ("gpus.count", -8),
    ],
)
def test_negative_scalar_names_the_key(glm5_raw: dict[str, Any], key: str, value: float) -> None:
    node = glm5_raw
    *parents, leaf = key.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    with pytest.raises(ProfileError, match=re_escape(f"'{key}'")):
        parse_profile(glm5_raw)


def test_negative_series_value_names_the_index(glm5_raw: dict[str, Any]) -> None:
    glm5_raw["output_tok_s"]["spec_on"][3] = -610.0
    with pytest.raises(ProfileError, match=re_escape("'output_tok_s.spec_on[3]'")):
        parse_profile(glm5_raw)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_refused(glm5_raw: dict[str, Any], bad: float) -> None:
    data = copy.deepcopy(glm5_raw)
    data["output_tok_s"]["spec_off"][2] = bad
    with pytest.raises(ProfileError, match=re_escape("'output_tok_s.spec_off[2]'")):
        parse_profile(data)
    data = copy.deepcopy(glm5_raw)
    data["prefill_tok_s"] = bad
    with pytest.raises(ProfileError, match="'prefill_tok_s'"):
        parse_profile(data)


def test_non_finite_in_json_text_refused(tmp_path: Path, glm5_raw: dict[str, Any]) -> None:
    # Python's json module reads the non-standard token Infinity: the validator must still refuse it.
    text = json.dumps(glm5_raw).replace('"noise_cv": 0.03', '"noise_cv": Infinity')
    path = tmp_path / "inf.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match="'noise_cv'"):
        load_profile(path)


def test_bad_json_and_unknown_name(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no shipped profile"):
        load_profile("no-such-profile")
    # each of these was a traceback (UnicodeDecodeError, RecursionError) or read for ever (/dev/zero)
    binary = tmp_path / "p.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ProfileError, match=r"not UTF-8 text \(byte 0\)"):
        load_profile(binary)
    binary.write_text("[" * 100_000)
    with pytest.raises(ProfileError, match=r"not usable JSON \(nested too deeply\)"):
        load_profile(binary)
    with pytest.raises(ProfileError, match=r"^profile '/dev/zero': more than 1048576 bytes$"):
        load_profile("/dev/zero")


def test_interpolation_hits_points_and_stays_between_neighbours() -> None:
    p = load_profile(GLM5)
    for c, off, on in zip(p.concurrency, p.spec_off_tok_s, p.spec_on_tok_s, strict=True):
        assert p.output_tok_s(c, False) == pytest.approx(off)
        assert p.output_tok_s(c, True) == pytest.approx(on)
    for lo, hi in zip(p.concurrency, p.concurrency[1:], strict=False):
        mid = math.sqrt(lo * hi)
        for spec_on in (False, True):
            a, b = p.output_tok_s(lo, spec_on), p.output_tok_s(hi, spec_on)
            assert min(a, b) <= p.output_tok_s(mid, spec_on) <= max(a, b)
    # monotone where the points are monotone (the curves only rise here)
    xs = [1 + i * 0.25 for i in range(int(63 / 0.25) + 1)]
    ys = [p.output_tok_s(x, False) for x in xs]
    assert all(b >= a for a, b in itertools.pairwise(ys))
    # below the first point: linear per-request rate; beyond the last: flat
    assert p.output_tok_s(0.5, False) == pytest.approx(89.5 / 2)
    assert p.output_tok_s(0, True) == 0.0
    assert p.output_tok_s(500, True) == pytest.approx(1500.0)
    assert 2.45 <= p.accept_length_at(12) <= 2.55


def test_crossover_glm5_between_8_and_16_llama_none() -> None:
    x = load_profile(GLM5).crossover()
    assert x is not None and 8 < x < 16
    p = load_profile(GLM5)
    assert p.speedup(x * 0.9) > 1.0 > p.speedup(x * 1.1)
    assert load_profile(LLAMA).crossover() is None
