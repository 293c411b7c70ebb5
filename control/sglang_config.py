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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..collectors.sglang.server_info import ServerInfo
from ..plugin.knob_contract import KNOB_KEY
from ..storage.files import atomic_write_text, check_out

# SGLang's bands without --speculative-adaptive-config (adaptive_spec_params.py DEFAULT_ADAPTIVE_CONFIG,
# 0.5.23; 0.5.17 differs only in band 1, which lacks 0 in both; docs/sglang-reference.md §1): batch sizes
# map to the largest key <= the (padded) running batch size. Band 1 has no 0, so a server on the defaults
# has no CUDA graph for "no drafting" at small batch sizes.
SGLANG_DEFAULT_BANDS: dict[str, dict[str, list[int]]] = {
    "1": {"candidate_steps": [1, 3, 5, 7]},
    "8": {"candidate_steps": [0, 1, 3]},
    "32": {"candidate_steps": [0, 1]},
    "64": {"candidate_steps": [0]},
}
SGLANG_DEFAULT_BAND_KEYS: tuple[int, ...] = tuple(int(key) for key in SGLANG_DEFAULT_BANDS)
# With EAGLE, SGLang defaults max_running_requests to 48.
DEFAULT_MAX_BS = 48
DEFAULT_OUT = "spectower-adaptive-config.json"
# Sanity bounds for operator input: EAGLE-3 drafts rarely go past ~8 steps; SGLang's own defaults top at 7.
MAX_STEPS = 32
MAX_BS_LIMIT = 65536
ALGORITHMS = ("EAGLE", "EAGLE3")
# Said wherever the plugin is missing: `spectower sglang-config`, `control get/set`, the knob client.
PLUGIN_INSTALL_HINT = (
    "install spectower into the SGLang server's Python environment (`pip install spectower` there: entry "
    "point group sglang.srt.plugins, name spectower; or a spectower .dist-info with that entry point on its "
    "PYTHONPATH) and restart the server"
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
    """Write atomically (storage.files), so a failure never leaves a half-written config."""
    try:
        target = check_out(path)
    except ValueError as exc:
        raise SglangConfigError(str(exc)) from None
    atomic_write_text(target, json.dumps(config, indent=2) + "\n")
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


def bands_allow_zero(config: Mapping[str, Any]) -> bool:
    """True when every band of an adaptive config lists step 0 (``{"band": {"candidate_steps": [...]}}``
    or the shorthand ``{"band": [...]}``)."""
    if not config:
        return False
    for band in config.values():
        steps = band.get("candidate_steps") if isinstance(band, Mapping) else band
        if not isinstance(steps, list) or 0 not in steps:
            return False
    return True


def adaptive_config_of(info: ServerInfo, *, read_local_config: bool) -> Mapping[str, Any] | str | None:
    """The server's adaptive config document as far as it can be known from here: inline, SGLang's default
    bands when none was given, the file when it is readable here (``read_local_config``: the server runs
    on this host, so a same-named file is its file). A string: why the file cannot be read; None: unknown."""
    config = info.speculative_adaptive_config
    if config is None:
        return SGLANG_DEFAULT_BANDS
    if isinstance(config, dict):
        return config
    if config.lstrip().startswith("{"):  # the document itself rather than a path
        text = config
    elif read_local_config and os.path.isfile(config):
        try:
            text = Path(config).read_text(encoding="utf-8")
        except OSError as exc:
            return f"cannot read the adaptive config {config}: {exc}"
    else:
        return None
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        return f"cannot read the adaptive config {config}: {exc}"
    return parsed if isinstance(parsed, Mapping) else f"the adaptive config {config} is not a JSON object"


def server_info_problems(info: ServerInfo, *, read_local_config: bool = True) -> list[str]:
    """What keeps the knob from working on a server, read from its ``/server_info``; empty when fine.

    Checks speculative_adaptive, the algorithm and topk, the bands (the plugin's own verdict per rank under
    ``internal_states[i]["spectower"]["refused"]``; the config itself when it is known here, or SGLang's
    default bands when none was given), and that the plugin answers on every rank.
    """
    problems: list[str] = []
    if info.speculative_adaptive is not True:
        problems.append(
            "speculative_adaptive is not true: relaunch SGLang with --speculative-adaptive and the config "
            "from `spectower sglang-config`"
        )
    algorithm = info.speculative_algorithm
    if algorithm not in ALGORITHMS:
        problems.append(f"speculative_algorithm is {algorithm!r}: adaptive speculation needs EAGLE or EAGLE3")
    topk = info.speculative_eagle_topk
    if topk not in (None, 1):
        problems.append(f"speculative_eagle_topk is {topk!r}: adaptive speculation needs 1")
    if info.speculative_adaptive is True:
        config = adaptive_config_of(info, read_local_config=read_local_config)
        if isinstance(config, str):
            problems.append(config)
        elif config is not None:
            suffix = (
                " (no --speculative-adaptive-config: SGLang's default bands)"
                if info.speculative_adaptive_config is None
                else ""
            )
            problems.extend(f"{p}{suffix}" for p in adaptive_config_problems(config))
    if not info.ranks:
        problems.append("/server_info has no internal_states: cannot see the spectower plugin")
        return problems
    for index, rank in enumerate(info.ranks):
        if not rank.plugin:
            problems.append(f"rank {index}: the spectower plugin is not loaded: {PLUGIN_INSTALL_HINT}")
        elif rank.refused:
            problems.append(f"rank {index}: the spectower plugin refuses {KNOB_KEY}: {rank.refused}")
    return problems
