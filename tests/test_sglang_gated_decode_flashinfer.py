"""Off means off on flashinfer (issue #12): the gated-decode plugin, loaded by SGLang's real load_plugins()
from its entry point, against SGLang's own ``FlashInferAttnBackend`` (0.5.23 and 0.5.17): a gated batch's
one-token verify is planned on the decode indices updater and decode wrappers (eager, CUDA-graph capture and
replay) and runs ``forward_decode``; a drafting verify, an FP4 dequant-workspace backend and a prefill keep
SGLang's prefill path. What is real and what is constructed:
tests/sglang_plugin_checks/check_gated_decode_flashinfer.py.

That check runs in a batch of its own (one SGLang import per version, the check forked from it by
tests/sglang_plugin_checks/run_all.py, on and off), not in tests/sglang_checks.py's shared batch. The first
test, ``is_one_token_verify`` as pure logic, needs no SGLang.
"""

from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest
from spectower.plugin.gated_decode import is_one_token_verify

from tests import sglang_checks as batches
from tests import test_sglang_plugin as plugin_tests
from tests.namespace_tree import link_tree, write_dist_info
from tests.sglang_checks import SglangChecks

ENTRY = "spectower-gated-decode"
CHECK = batches.CHECKS / "check_gated_decode_flashinfer.py"
RUNS = {"on": {}, "off": {"SPECTOWER_GATED_DECODE": "0"}}
PRELOAD = (*batches.PRELOAD, "sglang.srt.layers.attention.flashinfer_backend")


class _Mode:
    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def is_target_verify(self) -> bool:
        return self.verify


def _batch(width: int | None, verify: bool = True) -> Any:
    spec = None if width is None else types.SimpleNamespace(draft_token_num=width)
    return types.SimpleNamespace(forward_mode=_Mode(verify), spec_info=spec)


def test_one_token_verify_is_recognised_on_flashinfer_and_triton_unchanged() -> None:
    """Flashinfer's backend keeps no width: the verify's own says it. Triton's rule is as it was."""
    flashinfer = types.SimpleNamespace(decode_uses_dequant_workspace=False)
    assert is_one_token_verify(flashinfer, _batch(1))
    assert not is_one_token_verify(flashinfer, _batch(4))  # a drafting state's verify
    assert not is_one_token_verify(flashinfer, _batch(None))  # no verify input: nothing says one token
    assert not is_one_token_verify(flashinfer, _batch(1, verify=False))  # prefill, draft extend, decode
    fp4 = types.SimpleNamespace(decode_uses_dequant_workspace=True)
    assert not is_one_token_verify(fp4, _batch(1))
    rows = [(1, 1, True, True), (1, None, True, True), (1, 4, True, False), (4, 1, True, False),
            (4, 4, True, False), (1, 1, False, False)]  # fmt: skip
    for width, spec_width, verify, expected in rows:
        triton = types.SimpleNamespace(num_draft_tokens=width)
        row = (width, spec_width, verify)
        assert is_one_token_verify(triton, _batch(spec_width, verify)) is expected, row


class FlashInferChecks(SglangChecks):
    """SglangChecks' reading of results, over a batch of this file's check (on and off) per version."""

    def batch(self, version: str) -> dict[str, Any]:
        if version not in self._batches:
            batches.require_version(self.python, version)
            folder = self.shared / f"sglang-{version}"
            folder.mkdir(parents=True, exist_ok=True)
            self._batches[version] = self._run(version, folder)
        return self._batches[version]

    def _run(self, version: str, folder: Path) -> dict[str, Any]:
        site = link_tree(folder / "plugin-site")
        write_dist_info(site)
        checks = [{"id": name, "script": str(CHECK), "args": [], "env": env, "cwd": str(site),
                   "timeout_s": batches.CHECK_TIMEOUT_S} for name, env in RUNS.items()]  # fmt: skip
        plan, results = folder / "plan.json", folder / "results.json"
        plan.write_text(json.dumps({"preload": list(PRELOAD), "checks": checks}))
        env = batches.check_environment(self.python, version, site)
        argv = [self.python, str(batches.RUNNER), str(plan), str(results)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=site,
                              timeout=batches.RUNNER_TIMEOUT_S)  # fmt: skip
        if proc.returncode != 0 or not results.is_file():
            tail = (proc.stdout + proc.stderr)[-8000:]
            return {
                "error": f"run_all.py for SGLang {version} failed ({proc.returncode}):\n{tail}",
                "checks": {},
            }
        batch: dict[str, Any] = json.loads(results.read_text())
        return batch


@pytest.fixture(scope="session")
def flashinfer_checks(tmp_path_factory: pytest.TempPathFactory) -> FlashInferChecks:
    return FlashInferChecks(batches.sglang_python(), tmp_path_factory.mktemp("gated-decode-flashinfer"))


# Each version's tests on one worker: its batch runs once there.
VERSIONS = [
    pytest.param(v, marks=pytest.mark.xdist_group(f"sglang-flashinfer-{v}")) for v in batches.VERSIONS
]


@pytest.fixture(params=VERSIONS)
def checked(request: pytest.FixtureRequest, flashinfer_checks: FlashInferChecks) -> dict[str, Any]:
    return flashinfer_checks.result(request.param, "on")


def _planned(phase: dict[str, Any]) -> list[dict[str, Any]]:
    """What the indices updaters were asked to plan (the wrappers by name; their ids in ``_planned_ids``)."""
    return [{k: v for k, v in c.items() if k not in ("call", "wrapper_ids")} for c in phase["calls"]
            if c["call"] == "update"]  # fmt: skip


def _decode_plan(seq_lens: list[int], wrapper: str) -> dict[str, Any]:
    """A decode plan over these lengths (host copy and sum alike), on that wrapper, without spec info."""
    lengths = {"seq_lens": seq_lens, "seq_lens_cpu": seq_lens, "seq_lens_sum": sum(seq_lens)}
    return {"updater": "decode", **lengths, "wrappers": [wrapper], "spec_info": None}


def _planned_ids(phase: dict[str, Any]) -> list[list[int]]:
    return [c["wrapper_ids"] for c in phase["calls"] if c["call"] == "update"]


def _ran(phase: dict[str, Any]) -> list[str]:
    return [c["wrapper"] for c in phase["calls"] if c["call"] == "attention"]


@plugin_tests.sglang_check
def test_a_gated_verify_is_planned_and_run_as_decode_on_flashinfer(checked: dict[str, Any]) -> None:
    assert all(ENTRY in sources for sources in checked["targets"].values()), checked["targets"]
    assert any("FlashInferAttnBackend.init_forward_metadata, init_forward_metadata_out_graph, forward_extend"
               in line for line in checked["logged"]), checked["logged"]  # fmt: skip
    eager = checked["cases"]["gated_verify"]["eager"]
    # the decode indices updater plans the decode wrappers over seq_len + 1 (the verify token), no spec info
    assert _planned(eager) == [_decode_plan([6, 10], "decode")]
    assert eager["metadata"] == "DecodeMetadata"
    # forward_extend ran SGLang's forward_decode: the verify token's KV written at out_cache_loc, then the
    # decode wrapper over one query token per request
    assert {"call": "kv_write", "loc": [40, 41]} in eager["calls"]
    assert _ran(eager) == ["decode"]
    # the caller's batch is left as it was
    after = checked["cases"]["gated_verify"]["batch_after"]
    assert after == {"mode": "TARGET_VERIFY", "seq_lens": [5, 9], "seq_lens_sum": 14,
                     "spec_info": "EagleVerifyInput"}  # fmt: skip


@plugin_tests.sglang_check
def test_a_gated_verify_captures_and_replays_decode_graphs_on_flashinfer(checked: dict[str, Any]) -> None:
    case = checked["cases"]["gated_verify"]
    capture, replay = case["capture"], case["replay"]
    # capture: the batch size's CUDA-graph decode wrappers, no prefill (verify) wrappers, fast_decode_plan
    # installed for the replays, and the captured layer runs the decode wrapper
    assert case["graph_wrappers"]["decode"] == {"2": ["decode-graph"]}
    assert case["graph_wrappers"]["prefill"] == {}
    assert case["graph_wrappers"]["decode_fast_plan"] == [True]
    captured_ids = case["graph_wrappers"]["decode_ids"]["2"]
    assert _planned(capture) == [_decode_plan([6, 10], "decode-graph")]
    assert _planned_ids(capture) == [captured_ids]
    assert capture["metadata"] == "DecodeMetadata" and _ran(capture) == ["decode-graph"]
    # replay: the runner's padded view (one request of 7 and a padding slot at the fill value 1) replans the
    # captured decode wrappers over seq_len + 1
    assert _planned(replay) == [_decode_plan([8, 2], "decode-graph")]
    assert _planned_ids(replay) == [captured_ids]


@plugin_tests.sglang_check
def test_only_the_one_token_verify_is_redirected_on_flashinfer(checked: dict[str, Any]) -> None:
    """Beside the gated verify (planned as decode), a drafting verify (4 tokens a request), a one-token verify
    on a backend reading an FP4 KV cache through a dequant workspace, and a prefill keep the prefill path."""
    cases = checked["cases"]
    assert [p["updater"] for p in _planned(cases["gated_verify"]["eager"])] == ["decode"]
    for name, tokens in (("drafting_verify", 8), ("gated_verify_fp4_dequant", 2)):
        case = cases[name]
        for phase in ("eager", "capture", "replay"):
            [planned] = _planned(case[phase])
            where = (name, phase)
            assert planned["updater"] == "prefill" and planned["spec_info"] == "EagleVerifyInput", where
            assert planned["seq_lens"] == ([7, 1] if phase == "replay" else [5, 9]), where
            assert case[phase]["metadata"] == "PrefillMetadata", where
        assert _ran(case["eager"]) == ["prefill"] and _ran(case["capture"]) == ["prefill-graph"], name
        graphs = case["graph_wrappers"]
        assert graphs["decode"] == {} and graphs["prefill"] == {"2": ["prefill-graph"]}, name
        attention = [c for c in case["eager"]["calls"] if c["call"] == "attention"]
        assert attention[0]["q_shape"] == [tokens, 2, 4], name
    prefill = cases["prefill"]["eager"]
    [planned] = _planned(prefill)
    assert (planned["updater"], planned["seq_lens"], planned["spec_info"]) == ("prefill", [5, 9], None)
    assert _ran(prefill) == ["prefill"]


@plugin_tests.sglang_check
def test_switched_off_by_its_environment_variable_on_flashinfer(
    checked: dict[str, Any], flashinfer_checks: FlashInferChecks
) -> None:
    """The same check with SPECTOWER_GATED_DECODE=0: nothing hooked, the gated verify is SGLang's own."""
    assert _planned(checked["cases"]["gated_verify"]["eager"])[0]["updater"] == "decode"  # on, for contrast
    off = flashinfer_checks.result(checked["sglang_version"], "off")
    assert all(ENTRY not in sources for sources in off["targets"].values())
    assert off["logged"] == ["spectower gated decode: off (SPECTOWER_GATED_DECODE=0)"]
    gated = off["cases"]["gated_verify"]
    planned = [p["updater"] for phase in ("eager", "capture", "replay") for p in _planned(gated[phase])]
    assert planned == ["prefill"] * 3
    assert gated["graph_wrappers"]["decode"] == {}
