"""A finished sweep as a performance profile (docs/design.md's format), so ``spectower sim serve`` replays it.

Plain JSON built here (collectors may not import the simulator); a test checks that
``spectower.simulator.profile.load_profile`` accepts what this writes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from ...storage.files import atomic_write_text, check_out
from .errors import BenchError
from .sweep import SweepResult

MAX_NOISE_CV = 0.5


def build_profile(result: SweepResult, name: str | None = None) -> dict[str, Any]:
    """The profile of every concurrency measured in both modes: ``spec_off`` is the knob at 0 as measured;
    ``plain`` (a server without speculation, ``--plain-server``) is added when every level has it."""
    levels = sorted(
        c
        for c in {p.concurrency for p in result.points}
        if (on := result.point(c, "on")) is not None
        and on.tok_s
        and (off := result.point(c, "off")) is not None
        and off.tok_s
    )
    if not levels:
        raise BenchError("--profile-out: no concurrency was measured in both modes (needs --modes on,off)")
    gpus = result.gpu_inventory
    if not gpus:
        raise BenchError(
            "--profile-out: the GPU inventory is unknown (give --gpu-metrics URL of the server's "
            "dcgm-exporter, or run the sweep on the server's host so NVML can see its GPUs)"
        )
    info = result.server_info
    spec_on = [_point_tok_s(result, c, "on") for c in levels]
    spec_off = [_point_tok_s(result, c, "off") for c in levels]
    curves = {"spec_off": spec_off, "spec_on": spec_on}
    if all((plain := result.point(c, "plain")) is not None and plain.tok_s for c in levels):
        curves["plain"] = [_point_tok_s(result, c, "plain") for c in levels]
    accept = [_accept(result, c) for c in levels]
    cvs = [
        statistics.pstdev(w) / statistics.fmean(w)
        for p in result.points
        if len(w := p.windows) >= 2 and statistics.fmean(w) > 0
    ]
    steps = info.get("speculative_num_steps")
    return {
        "name": name or f"measured-{info.get('served_model_name') or 'server'}",
        "description": f"Measured by spectower bench sweep against {result.config.server} "
        f"(SGLang {info.get('version', '?')}), input {result.config.input_len} / "
        f"output {result.config.output_lengths} tokens, api {result.config.api}."
        + (
            f" spec_off: the knob at 0; plain: {result.config.plain_server}, a server without speculation "
            f"(SGLang {(result.plain_server_info or {}).get('version', '?')}), measured in the same rounds."
            if "plain" in curves
            else " spec_off: the knob at 0."
        ),
        "measured": True,
        "measured_at": result.started_at,
        "gpus": _gpus(gpus),
        "served_model_name": str(info.get("served_model_name") or "default"),
        # the stack's identity, so `control auto --warm-profile` knows which server this profile describes
        "model_path": info.get("model_path"),
        "speculative_draft_model_path": info.get("speculative_draft_model_path"),
        "sglang_version": info.get("version"),
        "speculative_algorithm": info.get("speculative_algorithm"),
        "speculative_num_steps": steps if isinstance(steps, int) and steps >= 1 else 1,
        "max_running_requests": result.max_running_requests,
        "concurrency": levels,
        "output_tok_s": curves,
        "accept_length": accept,
        "prefill_tok_s": _prefill_tok_s(result),
        **_prefill_source(result),
        "noise_cv": min(MAX_NOISE_CV, statistics.median(cvs)) if cvs else 0.0,
    }


def write_profile(result: SweepResult, path: Path, name: str | None = None) -> dict[str, Any]:
    """Write atomically (storage.files): a failed sweep never leaves half a profile behind."""
    profile = build_profile(result, name)
    atomic_write_text(check_out(path, "--profile-out"), json.dumps(profile, indent=2) + "\n")
    return profile


def _point_tok_s(result: SweepResult, c: int, mode: str) -> float:
    point = result.point(c, mode)  # type: ignore[arg-type]
    assert point is not None and point.tok_s is not None
    return round(point.tok_s, 3)


def _accept(result: SweepResult, c: int) -> float:
    point = result.point(c, "on")
    value = point.accept_length if point is not None else None
    return round(max(1.0, value), 4) if value is not None else 1.0


def _prefill_tok_s(result: SweepResult) -> float:
    """The prefill probe's rate (collectors/bench/prefill.py); without one, prompt tokens per second of TTFT
    at the lowest concurrency (a floor: that TTFT is mostly fixed cost)."""
    probed = result.prefill.tok_s if result.prefill is not None else None
    if probed is not None:
        return round(probed, 1)
    first = min(result.points, key=lambda p: p.concurrency)
    ttft_ms = first.figures.get("median_ttft_ms")
    done = first.figures.get("completed") or 0
    tokens = first.figures.get("total_input_tokens") or 0
    if ttft_ms and done and tokens:
        return round(tokens / done / (ttft_ms / 1000.0), 1)
    return 1.0


def _prefill_source(result: SweepResult) -> dict[str, Any]:
    """Where ``prefill_tok_s`` came from, for the simulator's open loop (which prices long prompts by it):
    ``probe`` (and the lone short prompt's time to first token beyond its prefill: what a request spends
    outside the GPU's work, ``first_token_latency_s``), or ``ttft_floor`` (a floor, far below the truth)."""
    probe = result.prefill
    rate = probe.tok_s if probe is not None else None
    if probe is None or rate is None:
        return {"prefill_source": "ttft_floor"}
    latency = max(0.0, probe.short_ttft_s - probe.short_len / rate)
    return {"prefill_source": "probe", "first_token_latency_s": round(latency, 6)}


def _gpus(inventory: list[dict[str, Any]]) -> dict[str, Any]:
    """The profile's ``gpus``; a figure the source did not give is marked as such, never invented."""
    first = inventory[0]
    out: dict[str, Any] = {"count": len(inventory), "name": str(first.get("name") or "unknown")}
    memory = first.get("memory_total_mib")
    out["memory_mib"] = float(memory) if memory else 1.0
    if not memory:
        out["memory_mib_source"] = "unknown (placeholder 1.0)"
    limit = first.get("power_limit_w")
    usage = max((float(g["power_usage_w"]) for g in inventory if g.get("power_usage_w")), default=0.0)
    if limit:
        out["power_limit_w"] = float(limit)
    elif usage > 0:
        out["power_limit_w"] = usage
        out["power_limit_w_source"] = "max observed power usage (dcgm-exporter exports no limit)"
    else:
        out["power_limit_w"] = 1.0
        out["power_limit_w_source"] = "unknown (placeholder 1.0)"
    for key in ("driver_version", "cuda_version"):
        if first.get(key):
            out[key] = first[key]
    return out
