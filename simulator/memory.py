"""The simulated server's memory: how a profile's GPUs split into weights, KV cache and CUDA graphs, and
the token pool that KV cache holds (what /server_info, /v1/loads and the memory gauges report)."""

from __future__ import annotations

from dataclasses import dataclass

from .profile import Profile

# KV cache bytes per token of a large model in bf16 (sizes the simulated token pool from GPU memory).
KV_BYTES_PER_TOKEN = 131072
# Share of GPU memory SGLang's --mem-fraction-static leaves to weights / KV cache / CUDA graphs.
WEIGHT_MEMORY_SHARE = 0.45
KV_MEMORY_SHARE = 0.40
GRAPH_MEMORY_SHARE = 0.02


@dataclass(frozen=True)
class MemoryLayout:
    weight_gb: float
    kv_cache_gb: float
    graph_gb: float
    max_total_num_tokens: int
    startup_available_gb: float


def memory_layout(profile: Profile) -> MemoryLayout:
    gib_per_gpu = profile.gpus.memory_mib / 1024.0
    kv_gb = gib_per_gpu * KV_MEMORY_SHARE
    # Tensor parallel over all GPUs: each GPU holds 1/count of every token's KV.
    tokens = int(kv_gb * profile.gpus.count * 1024**3 / KV_BYTES_PER_TOKEN)
    return MemoryLayout(
        weight_gb=round(gib_per_gpu * WEIGHT_MEMORY_SHARE, 3),
        kv_cache_gb=round(kv_gb, 3),
        graph_gb=round(gib_per_gpu * GRAPH_MEMORY_SHARE, 3),
        max_total_num_tokens=tokens,
        startup_available_gb=round(gib_per_gpu * 0.97, 3),
    )
