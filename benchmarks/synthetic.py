"""Synthetic history for the console's tests and benchmark: engine and GPU samples shaped by a profile.

Written through storage (``open_database``, ``server_id``/``gpu_id``, bulk inserts of the model tables).
Load follows a daily wave; the knob alternates between always-on and off every ``knob_period_s`` the way
an exploring policy would, so the live speedup estimate (from the decode counters written beside the
samples) has both sides at every load.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from spectower.simulator.profile import Profile, load_profile
from spectower.storage import Database
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent, GpuProcessSample

DEFAULT_PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
DEFAULT_KNOB_PERIOD_S = 600.0


@dataclass(frozen=True)
class Fill:
    server_ids: list[int]
    gpu_ids: list[int]
    engine_rows: int
    gpu_rows: int


SWEEP_PERIOD_S = 433.0  # a load ramp 1 -> max_running -> 1, incommensurate with the knob's period


def _load(t: float, max_running: int) -> float:
    """A fast triangle ramp from 1 up to a peak that follows a daily wave (60-100 % of max_running), so
    any half hour covers every load from 1 to 60 % of max_running, whatever the time of day."""
    day = 0.5 + 0.5 * math.sin(2 * math.pi * (t % 86400) / 86400)
    phase = (t % SWEEP_PERIOD_S) / SWEEP_PERIOD_S
    ramp = 1 - abs(2 * phase - 1)
    return 1.0 + ramp * (max_running - 1) * (0.6 + 0.4 * day)


def engine_rows(
    server_id: int, profile: Profile, t0: float, t1: float, step_s: float, knob_period_s: float, seed: int
) -> Iterator[dict[str, object]]:
    rng = random.Random(seed)
    max_running = profile.max_running_requests
    t = t0
    while t <= t1:
        c = round(_load(t, max_running))
        knob = max_running if int(t // knob_period_s) % 2 == 0 else 0
        active = c <= knob
        tok = profile.output_tok_s(c, active) * (1 + rng.gauss(0, profile.noise_cv))
        yield {
            "server_id": server_id, "dp_rank": 0, "ts": t, "num_running_reqs": float(c),
            "num_queue_reqs": float(max(0, c - max_running + 2)), "gen_throughput": tok, "output_tok_s": tok,
            "prefill_tok_s": 900.0, "request_rate": c / 20.0, "token_usage": min(1.0, c / max_running),
            "cache_hit_rate": 0.4, "spec_accept_length": profile.accept_length_at(c) if active else 1.0,
            "spec_accept_rate": (profile.accept_length_at(c) - 1) / profile.speculative_num_steps
            if active else 0.0,
            "spec_num_steps": float(profile.speculative_num_steps if active else 0), "spec_max_bs": knob,
            "ttft_p50_s": 0.2 + c / 400, "ttft_p90_s": 0.4 + c / 200, "ttft_p99_s": 0.8 + c / 100,
            "itl_p50_s": 0.011 + c / 4000, "itl_p90_s": 0.015 + c / 3000, "itl_p99_s": 0.03 + c / 2000,
            "e2e_p50_s": 4 + c / 20, "e2e_p90_s": 6 + c / 15, "e2e_p99_s": 9 + c / 10,
        }  # fmt: skip
        t += step_s


def counter_rows(samples: Iterator[dict[str, object]], step_s: float) -> Iterator[dict[str, object]]:
    """The engine's decode counters behind ``engine_rows``: each sample's ``step_s`` of decoding, at its
    batch size and tok/s, drafted or gated (``engine_counter_sample`` rows; the live estimate reads
    these). A step emits ``accept length`` tokens per request drafted, one gated."""
    for row in samples:
        c, tok = float(row["num_running_reqs"]), float(row["output_tok_s"])  # type: ignore[arg-type]
        if c < 1 or tok <= 0:
            continue
        drafted = float(row["spec_num_steps"]) > 0  # type: ignore[arg-type]
        per_step = c * (float(row["spec_accept_length"]) if drafted else 1.0)  # type: ignore[arg-type]
        tokens = round(tok * step_s)
        yield {
            "server_id": row["server_id"], "ts": row["ts"], "batch_size": 1 << math.ceil(math.log2(c)),
            "mode": "drafted" if drafted else "gated", "steps": max(1, round(tokens / per_step)),
            "tokens": tokens, "time_s": step_s,
        }  # fmt: skip


def gpu_rows(gpu_id: int, t0: float, t1: float, step_s: float, seed: int) -> Iterator[dict[str, object]]:
    rng = random.Random(seed)
    t = t0
    while t <= t1:
        u = 100 * _load(t, 64) / 64
        yield {
            "gpu_id": gpu_id, "ts": t, "lost": False, "gpu_util_pct": u, "mem_util_pct": u * 0.6,
            "memory_used_mib": 88000.0, "memory_total_mib": 97887.0,
            "power_w": 150 + 4 * u + rng.random() * 5, "power_limit_w": 600.0, "temperature_c": 40 + u / 3,
            "sm_clock_mhz": 2400.0, "mem_clock_mhz": 14000.0,
            "pcie_tx_bytes_s": 1e9 * u / 100, "pcie_rx_bytes_s": 8e8 * u / 100, "throttle_reasons": 0,
            "ecc_corrected": 0, "ecc_uncorrected": 0, "xid_errors": 0,
        }  # fmt: skip
        t += step_s


def fill(
    db: Database,
    *,
    t0: float,
    t1: float,
    servers: int = 1,
    gpus: int = 8,
    step_s: float = 1.0,
    profile_name: str = DEFAULT_PROFILE,
    knob_period_s: float = DEFAULT_KNOB_PERIOD_S,
    port0: int = 30000,
    urls: list[str] | None = None,
) -> Fill:
    """Write ``servers`` servers with samples every ``step_s`` over [t0, t1], and ``gpus`` GPUs (0: none).
    ``urls``: the servers (default http://10.0.0.<i>:<port0>), e.g. a live server's, to give it a past."""
    profile = load_profile(profile_name)
    sids, gids, n_eng, n_gpu = [], [], 0, 0
    names = urls or [f"http://10.0.0.{i + 1}:{port0}" for i in range(servers)]
    for i, url in enumerate(names):
        sid = db.server_id(
            url, ts=t0, served_model_name=profile.served_model_name,
            sglang_version="0.5.23", max_running_requests=profile.max_running_requests,
            speculative_algorithm="EAGLE3",
        )  # fmt: skip
        sids.append(sid)
        n_eng += db.insert_many("engine_sample", engine_rows(sid, profile, t0, t1, step_s, knob_period_s, i))
        db.insert_many(  # the same samples (same seed) as the engine's decode counters
            "engine_counter_sample",
            counter_rows(engine_rows(sid, profile, t0, t1, step_s, knob_period_s, i), step_s),
        )
    for g in range(gpus):
        gid = db.gpu_id("gpu-host-1", g, f"GPU-{g:08d}", ts=t0, name=profile.gpus.name,
                        memory_total_mib=float(profile.gpus.memory_mib), source="nvml")  # fmt: skip
        gids.append(gid)
        n_gpu += db.insert_many("gpu_sample", gpu_rows(gid, t0, t1, step_s, 100 + g))
    if gids:  # what NVML lists per GPU: the SGLang scheduler of that TP rank, and a small helper on GPU 0
        procs = [GpuProcessSample(gpu_id=gid, ts=t1, pid=4100 + g, process_name=f"sglang::scheduler_TP{g}",
                                  used_memory_mib=86500.0) for g, gid in enumerate(gids)]  # fmt: skip
        procs.append(GpuProcessSample(gpu_id=gids[0], ts=t1, pid=4099, process_name="python3",
                                      used_memory_mib=1200.0))  # fmt: skip
        with db.session() as s:
            s.add_all(procs)
    return Fill(sids, gids, n_eng, n_gpu)


def add_bench_run(db: Database, profile_name: str, created_at: float, tag: str, scale_on: float = 1.0) -> int:
    """A benchmark run with the profile's curve (spec on scaled by ``scale_on``), saved through storage."""
    profile = load_profile(profile_name)
    run = BenchRun(
        created_at=created_at, source="sweep", tag=tag, served_model_name=profile.served_model_name,
        sglang_version="0.5.23", server_url="http://10.0.0.1:30000",
        gpu_inventory_json=json.dumps({"count": profile.gpus.count, "name": profile.gpus.name}),
        params_json=json.dumps({"input_len": 128, "output_len": 256, "scale_on": scale_on}),
    )  # fmt: skip
    points = []
    for c in profile.concurrency:
        for on in (True, False):
            tok = profile.output_tok_s(c, on) * (scale_on if on else 1.0)
            ratio = profile.output_tok_s(c, True) * scale_on / profile.output_tok_s(c, False)
            points.append(
                BenchPoint(
                    run_id=0,
                    concurrency=float(c),
                    spec_on=on,
                    output_throughput=tok,
                    completed=100,
                    median_ttft_ms=200 + c * 3,
                    p99_ttft_ms=400 + c * 6,
                    median_itl_ms=11 + c / 4,
                    accept_length=profile.accept_length_at(c),
                    ratio_ci_lo=ratio * 0.96,  # the sweep stores its interval on the ratio with each point
                    ratio_ci_hi=ratio * 1.04,
                )
            )
    return db.save_bench_run(run, points)


def add_policy_events(
    db: Database, server_url: str, t0: float, t1: float, every_s: float, max_bs: int
) -> int:
    rows, t, flip = [], t0, False
    while t <= t1:
        new = max_bs if flip else 0
        rows.append(ControlEvent(ts=t, actor="policy:learn", server_url=server_url, action="set",
                                 old_max_bs=0 if flip else max_bs, new_max_bs=new, reason="explore",
                                 confirmed=True))  # fmt: skip
        t, flip = t + every_s, not flip
    with db.session() as s:
        s.add_all(rows)
    return len(rows)
