"""The SGLang launch configuration spectower's knob needs, and the check that a running server has it.

The knob (docs/design.md) can only pick among the steps the launch config made capturable at each batch size:
SGLang captures CUDA graphs per (step, batch size) only where a band of ``--speculative-adaptive-config``
lists that step. So every band must allow 0 (gated: no drafting) and the working step N. This module writes
that config, lists the launch flags that go with it, and reads a server's ``/server_info`` for what the knob
needs (``server_info_problems``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spectower.control.sglang_plugin import KNOB_KEY

# SGLang's default adaptive band keys (speculative/adaptive_spec_params.py, DEFAULT_ADAPTIVE_CONFIG, 0.5.17
# and 0.5.23): batch sizes are mapped to the largest key <= the (padded) running batch size.
SGLANG_DEFAULT_BAND_KEYS: tuple[int, ...] = (1, 8, 32, 64)
# With EAGLE, SGLang defaults max_running_requests to 48.
DEFAULT_MAX_BS = 48
DEFAULT_OUT = "spectower-adaptive-config.json"
# Sanity bounds for operator input: EAGLE-3 drafts rarely go past ~8 steps; SGLang's own defaults top at 7.
MAX_STEPS = 32
MAX_BS_LIMIT = 65536
ALGORITHMS = ("EAGLE", "EAGLE3")
PLUGIN_INSTALL_HINT = (
    "install spectower into the SGLang environment (pip install spectower: entry point group "
    "sglang.srt.plugins, name spectower)"
)


class SglangConfigError(ValueError):
    """Bad input for the config generator; the message names the option."""


def _check_int(option: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SglangConfigError(f"{option} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise SglangConfigError(f"{option} must be between {low} and {high}, got {value}")
    return value


def band_keys(max_bs: int) -> list[int]:
    """SGLang's default band keys that a batch of at most ``max_bs`` requests can reach."""
    return [key for key in SGLANG_DEFAULT_BAND_KEYS if key <= max_bs]


def build_adaptive_config(steps: int, max_bs: int = DEFAULT_MAX_BS) -> dict[str, dict[str, list[int]]]:
    """The ``--speculative-adaptive-config`` document: every band allows 0 and ``steps``."""
    _check_int("--steps", steps, 1, MAX_STEPS)
    _check_int("--max-running-requests", max_bs, 1, MAX_BS_LIMIT)
    return {str(key): {"candidate_steps": [0, steps]} for key in band_keys(max_bs)}


def launch_flags(steps: int, max_bs: int, config_path: str | os.PathLike[str]) -> list[str]:
    """The SGLang launch flags that go with the config (model and draft paths are the operator's)."""
    _check_int("--steps", steps, 1, MAX_STEPS)
    _check_int("--max-running-requests", max_bs, 1, MAX_BS_LIMIT)
    return [
        "--speculative-algorithm", "EAGLE3",
        "--speculative-adaptive",
        "--speculative-adaptive-config", str(config_path),
        "--speculative-eagle-topk", "1",
        "--speculative-num-steps", str(steps),
        "--speculative-num-draft-tokens", str(steps + 1),
        "--max-running-requests", str(max_bs),
        # CUDA graphs for both steps up to the largest batch the knob can see; beyond it SGLang runs eager.
        "--cuda-graph-max-bs-decode", str(max_bs),
        "--enable-metrics",
    ]  # fmt: skip


def plugin_env() -> list[tuple[str, str, str]]:
    """(name, example value, why) for the SGLang processes' environment. None is required by default."""
    return [
        (
            "SGLANG_PLUGINS",
            "spectower",
            "only if you restrict SGLang's plugins: the list must name spectower",
        ),
        ("SPECTOWER_GATE_MARGIN", "3", "optional: the gate reopens at batch <= N - margin (default N/10)"),
        ("SPECTOWER_GATE_MIN_DWELL", "16", "optional: gated batches before the gate may reopen (default 16)"),
    ]


def write_config(path: str | os.PathLike[str], config: Mapping[str, Any]) -> Path:
    """Write atomically (temp file + rename), so a failure never leaves a half-written config."""
    target = Path(path)
    if target.is_dir():
        raise SglangConfigError(f"--out {target} is a directory")
    if not target.parent.is_dir():
        raise SglangConfigError(f"--out: folder {target.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target.resolve()


def adaptive_config_problems(config: Mapping[str, Any]) -> list[str]:
    """Problems of an adaptive config document for the knob: each band must allow step 0 and a step > 0."""
    problems = []
    bands = {key: entry for key, entry in config.items() if str(key).isdigit()}
    if not bands:
        return ["the adaptive config has no batch-size bands"]
    for key in sorted(bands, key=int):
        steps = bands[key].get("candidate_steps") if isinstance(bands[key], Mapping) else None
        if not isinstance(steps, list):
            problems.append(f"adaptive band {key} has no candidate_steps list")
            continue
        if 0 not in steps:
            problems.append(f"adaptive band {key} does not allow step 0 (candidate_steps {steps})")
        if not any(isinstance(s, int) and s > 0 for s in steps):
            problems.append(f"adaptive band {key} allows no drafting step > 0 (candidate_steps {steps})")
    return problems


def _sglang_default_config() -> dict[str, Any]:
    # Mirrors the band keys/steps SGLang uses without a config file (0.5.23; 0.5.17 differs only in band 1,
    # which lacks 0 in both): enough to say which bands lack 0.
    return {
        "1": {"candidate_steps": [1, 3, 5, 7]},
        "8": {"candidate_steps": [0, 1, 3]},
        "32": {"candidate_steps": [0, 1]},
        "64": {"candidate_steps": [0]},
    }


def server_info_problems(info: Mapping[str, Any], *, read_local_config: bool = True) -> list[str]:
    """What keeps the knob from working on a server, read from its ``/server_info``; empty when fine.

    Checks speculative_adaptive, the algorithm and topk, the bands (the plugin's own verdict per rank under
    ``internal_states[i]["spectower"]["refused"]``; the config file itself when it is readable here, or
    SGLang's default bands when none was given), and that the plugin answers on every rank.
    """
    problems: list[str] = []
    if info.get("speculative_adaptive") is not True:
        problems.append(
            "speculative_adaptive is not true: relaunch SGLang with --speculative-adaptive and the config "
            "from `spectower sglang-config`"
        )
    algorithm = info.get("speculative_algorithm")
    if algorithm not in ALGORITHMS:
        problems.append(f"speculative_algorithm is {algorithm!r}: adaptive speculation needs EAGLE or EAGLE3")
    topk = info.get("speculative_eagle_topk")
    if topk not in (None, 1):
        problems.append(f"speculative_eagle_topk is {topk!r}: adaptive speculation needs 1")
    config_path = info.get("speculative_adaptive_config")
    if info.get("speculative_adaptive") is True:
        if isinstance(config_path, Mapping):  # an inline document rather than a path
            problems.extend(adaptive_config_problems(config_path))
        elif not config_path:
            problems.extend(
                f"{p} (no --speculative-adaptive-config: SGLang's default bands)"
                for p in adaptive_config_problems(_sglang_default_config())
            )
        elif read_local_config and os.path.isfile(str(config_path)):
            try:
                problems.extend(adaptive_config_problems(json.loads(Path(str(config_path)).read_text())))
            except (OSError, ValueError) as exc:
                problems.append(f"cannot read the adaptive config {config_path}: {exc}")
    states = info.get("internal_states")
    if not isinstance(states, Sequence) or isinstance(states, str) or not states:
        problems.append("/server_info has no internal_states: cannot see the spectower plugin")
        return problems
    for rank, state in enumerate(states):
        block = state.get("spectower") if isinstance(state, Mapping) else None
        if not isinstance(block, Mapping):
            problems.append(f"rank {rank}: the spectower plugin is not loaded: {PLUGIN_INSTALL_HINT}")
        elif block.get("refused"):
            problems.append(f"rank {rank}: the spectower plugin refuses {KNOB_KEY}: {block['refused']}")
    return problems


def problems_summary(problems: Sequence[str]) -> str:
    return "; ".join(problems)
