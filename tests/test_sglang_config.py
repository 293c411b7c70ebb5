"""`spectower sglang-config` and control.sglang_config: the adaptive config, the launch flags, the checks.

The generated config is also loaded by SGLang 0.5.23's real AdaptiveSpeculativeParams in
tests/test_sglang_plugin.py (its ``config_path`` fixture), which asserts candidate steps [0, N].
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any

import pytest
from spectower.collectors.sglang.server_info import parse_server_info
from spectower.console.cli import app
from spectower.control.sglang_config import (
    SGLANG_DEFAULT_BAND_KEYS,
    SglangConfigError,
    adaptive_config_problems,
    band_keys,
    build_adaptive_config,
    launch_flags,
    server_info_problems,
    write_config,
)
from typer.testing import CliRunner

from tests.conftest import cli_in_process

runner = CliRunner()


def test_every_band_allows_zero_and_the_working_step() -> None:
    config = build_adaptive_config(3, 48)
    assert list(config) == ["1", "8", "32"]  # SGLang's default band keys a batch of <= 48 can reach
    assert all(entry == {"candidate_steps": [0, 3]} for entry in config.values())
    assert adaptive_config_problems(config) == []
    assert list(build_adaptive_config(5, 4)) == ["1"]
    assert list(build_adaptive_config(2, 256)) == [str(k) for k in SGLANG_DEFAULT_BAND_KEYS]
    assert band_keys(64) == [1, 8, 32, 64] and band_keys(63) == [1, 8, 32]


@pytest.mark.parametrize(
    ("steps", "max_bs", "option"),
    [
        (0, 48, "--steps"),
        (-1, 48, "--steps"),
        (33, 48, "--steps"),
        (3, 0, "--max-running-requests"),
        (3, 10**6, "--max-running-requests"),
    ],
)
def test_bad_input_names_the_option(steps: int, max_bs: int, option: str) -> None:
    with pytest.raises(SglangConfigError, match=f"^{option} "):
        build_adaptive_config(steps, max_bs)
    with pytest.raises(SglangConfigError, match=f"^{option} "):
        launch_flags(steps, max_bs, "/x.json")


def test_non_integers_are_refused() -> None:
    with pytest.raises(SglangConfigError, match="--steps must be an integer"):
        build_adaptive_config(True, 48)
    with pytest.raises(SglangConfigError, match="--max-running-requests must be an integer"):
        build_adaptive_config(3, 4.0)  # type: ignore[arg-type]


def test_launch_flags() -> None:
    flags = launch_flags(4, 64, "/etc/spectower/adaptive.json")

    def value(flag: str) -> str:
        return flags[flags.index(flag) + 1]

    assert value("--speculative-algorithm") == "EAGLE3"
    assert "--speculative-adaptive" in flags and "--enable-metrics" in flags
    assert value("--speculative-adaptive-config") == "/etc/spectower/adaptive.json"
    assert value("--speculative-eagle-topk") == "1"
    assert value("--speculative-num-steps") == "4"
    assert value("--speculative-num-draft-tokens") == "5"  # topk 1: steps + 1
    assert value("--max-running-requests") == "64"
    assert value("--cuda-graph-max-bs-decode") == "64"


def test_write_config_is_atomic_and_checks_the_folder(tmp_path: Path) -> None:
    target = tmp_path / "cfg.json"
    path = write_config(target, build_adaptive_config(3, 48))
    assert path == target.resolve() and json.loads(target.read_text())["8"] == {"candidate_steps": [0, 3]}
    with pytest.raises(SglangConfigError, match=r"--out: folder .* does not exist"):
        write_config(tmp_path / "missing" / "cfg.json", {})
    with pytest.raises(SglangConfigError, match="is a folder, not a file"):
        write_config(tmp_path, {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json"]  # no temp file left behind
    # readable by an SGLang server running as another user (mkstemp's 0600 was kept before)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()
    # a device is never replaced by the rename that completes the write (/dev/full once was)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(SglangConfigError, match="is not a regular file"):
        write_config(fifo, {})
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_command_writes_the_config_and_prints_flags(tmp_path: Path) -> None:
    out = tmp_path / "adaptive.json"
    args = ["sglang-config", "--steps", "3", "--max-running-requests", "48", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == build_adaptive_config(3, 48)
    flag_line = [line for line in result.output.splitlines() if not line.startswith("#")]
    assert len(flag_line) == 1
    assert shlex.split(flag_line[0]) == launch_flags(3, 48, out.resolve())
    assert "sglang.srt.plugins" in result.output and "SGLANG_PLUGINS" in result.output


def test_command_default_max_bs(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    result = runner.invoke(app, ["sglang-config", "--steps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "--max-running-requests 48" in result.output and list(json.loads(out.read_text())) == [
        "1",
        "8",
        "32",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps must be between 1 and"),
        (["--steps", "3", "--max-running-requests", "-4"], "--max-running-requests must be between 1 and"),
        (
            ["--steps", "3", "--out", "/nonexistent-dir/x.json"],
            "--out: folder /nonexistent-dir does not exist",
        ),
    ],
)
def test_command_errors_are_one_clear_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    proc = cli_in_process("sglang-config", *args)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


# ----------------------------------------------------------------------------- server_info_problems


def _problems(info: dict[str, Any], *, read_local_config: bool = True) -> list[str]:
    """server_info_problems of a raw /server_info document, read through the collectors' parser."""
    return server_info_problems(parse_server_info(info), read_local_config=read_local_config)


@pytest.fixture
def real_info(real_data: Path) -> dict[str, Any]:
    """A real SGLang 0.5.17 /server_info with a stand-in plugin (config {"1": [0, 3]}, not on this host)."""
    info: dict[str, Any] = json.loads(
        (real_data / "sglang-0.5.17-h200" / "server_info_after.json").read_text()
    )
    return info


def test_real_capture_is_ready(real_info: dict[str, Any]) -> None:
    assert _problems(real_info) == []


def test_not_adaptive(real_info: dict[str, Any]) -> None:
    info = copy.deepcopy(real_info)
    info["speculative_adaptive"] = False
    problems = _problems(info)
    assert len(problems) == 1 and "--speculative-adaptive" in problems[0]


def test_plugin_missing_or_refusing(real_info: dict[str, Any]) -> None:
    info = copy.deepcopy(real_info)
    info["internal_states"].append(copy.deepcopy(info["internal_states"][0]))
    del info["internal_states"][1]["spectower"]
    problems = _problems(info)
    assert problems == [problems[0]] and problems[0].startswith("rank 1: the spectower plugin is not loaded")
    info["internal_states"][0]["spectower"]["refused"] = "adaptive band 1 does not allow step 0"
    assert any(p.startswith("rank 0:") and "band 1 does not allow step 0" in p for p in _problems(info))
    info["internal_states"] = []
    assert any("no internal_states" in p for p in _problems(info))


def test_bands_from_a_readable_config(real_info: dict[str, Any], tmp_path: Path) -> None:
    info = copy.deepcopy(real_info)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0]}}))
    info["speculative_adaptive_config"] = str(bad)
    problems = _problems(info)
    assert any("band 1 does not allow step 0" in p for p in problems)
    assert any("band 8 allows no drafting step" in p for p in problems)
    assert _problems(info, read_local_config=False) == []  # a remote server's path is not ours
    good = write_config(tmp_path / "good.json", build_adaptive_config(3, 48))
    info["speculative_adaptive_config"] = str(good)
    assert _problems(info) == []


def test_no_config_means_sglang_default_bands(real_info: dict[str, Any]) -> None:
    info = copy.deepcopy(real_info)
    info["speculative_adaptive_config"] = None
    problems = _problems(info)
    default = "(no --speculative-adaptive-config: SGLang's default bands)"
    assert problems == [
        f"adaptive band 1 does not allow step 0 (candidate_steps [1, 3, 5, 7]) {default}",
        # the knob could never turn drafting on there either
        f"adaptive band 64 allows no drafting step > 0 (candidate_steps [0]) {default}",
    ]


def test_algorithm_and_topk(real_info: dict[str, Any]) -> None:
    info = copy.deepcopy(real_info)
    info["speculative_algorithm"] = None
    info["speculative_eagle_topk"] = 4
    problems = _problems(info)
    assert any("speculative_algorithm" in p for p in problems) and any("topk" in p for p in problems)
