"""Virtual GPUs whose readings follow the simulated load (``gpus.count`` of them, tensor parallel).

Sampled once a second from the engine: utilisation is the share of the last second the scheduler spent
in forward passes (a decode step keeps every TP GPU busy whatever the batch), power rises from an idle
floor with utilisation and batch size, temperature follows power with a first-order lag, the SM clock
sags a little near the power limit, framebuffer use is the static allocation (weights + KV pool + CUDA
graphs, as SGLang reserves at start) plus a small activation workspace that grows with the batch, and
PCIe traffic follows the token rate (tensor-parallel all-reduce over PCIe). Each GPU gets a slightly
different, seeded offset so they do not read identical.
"""

from __future__ import annotations

import math
import random
import socket
import time
import uuid
from dataclasses import dataclass

from .engine import Engine

SAMPLE_INTERVAL_S = 1.0
IDLE_POWER_SHARE = 0.18  # idle draw as a share of the power limit (H200: ~127 W of 700 W)
AMBIENT_TEMP_C = 34.0
TEMP_RISE_AT_LIMIT_C = 46.0
TEMP_TAU_S = 25.0
MAX_SM_CLOCK_MHZ = 1980
MEM_CLOCK_MHZ = 3201
WORKSPACE_MIB_PER_REQUEST = 48.0
PCIE_BYTES_PER_TOKEN = 96 * 1024  # all-reduce traffic per output token per GPU (TP over PCIe)


@dataclass
class GpuReading:
    index: int
    uuid: str
    pci_bus_id: str
    util: float = 0.0
    mem_copy_util: float = 0.0
    fb_used_mib: float = 0.0
    fb_free_mib: float = 0.0
    power_w: float = 0.0
    energy_mj: float = 0.0
    temp_c: float = AMBIENT_TEMP_C
    sm_clock: float = MAX_SM_CLOCK_MHZ
    mem_clock: float = MEM_CLOCK_MHZ
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0


class VirtualGpus:
    def __init__(self, engine: Engine, seed: int) -> None:
        self.engine = engine
        self.hostname = socket.gethostname()
        profile = engine.profile
        self.name = profile.gpus.name
        self.memory_mib = profile.gpus.memory_mib
        self.power_limit_w = profile.gpus.power_limit_w
        rng = random.Random(seed * 31 + 7)
        self.offsets = [rng.uniform(-0.03, 0.03) for _ in range(profile.gpus.count)]
        mem = engine.memory
        self.static_mib = (mem.weight_gb + mem.kv_cache_gb + mem.graph_gb) * 1024 + 512
        self.gpus = [
            GpuReading(
                index=i,
                uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                fb_used_mib=self.static_mib,
                fb_free_mib=self.memory_mib - self.static_mib,
                power_w=self.power_limit_w * IDLE_POWER_SHARE,
            )
            for i in range(profile.gpus.count)
        ]
        self._last_busy = engine.busy_seconds()
        self._last_tokens = self._tokens()
        self._last_t = time.monotonic()

    def _tokens(self) -> int:
        return sum(r.total_decode_tokens + r.total_prefill_tokens for r in self.engine.ranks)

    def sample(self) -> None:
        now = time.monotonic()
        dt = max(1e-6, now - self._last_t)
        busy = self.engine.busy_seconds()
        tokens = self._tokens()
        ranks = len(self.engine.ranks)
        busy_frac = min(1.0, (busy - self._last_busy) / (dt * ranks))
        token_rate = (tokens - self._last_tokens) / dt
        self._last_busy, self._last_tokens, self._last_t = busy, tokens, now
        running = self.engine.running_total()
        load = min(1.0, running / (self.engine.max_running_requests * ranks))
        for gpu, off in zip(self.gpus, self.offsets, strict=True):
            util = max(0.0, min(100.0, 100.0 * busy_frac * (1.0 + off)))
            gpu.util = round(util)
            gpu.mem_copy_util = round(util * (0.35 + 0.4 * load))
            drive = busy_frac * (0.55 + 0.45 * load) * (1.0 + off)
            power = self.power_limit_w * (IDLE_POWER_SHARE + (1.0 - IDLE_POWER_SHARE) * min(1.0, drive))
            gpu.power_w = power
            gpu.energy_mj += power * dt * 1000.0
            target = AMBIENT_TEMP_C + TEMP_RISE_AT_LIMIT_C * power / self.power_limit_w
            gpu.temp_c += (target - gpu.temp_c) * (1.0 - math.exp(-dt / TEMP_TAU_S))
            gpu.sm_clock = round(MAX_SM_CLOCK_MHZ * (1.0 - 0.08 * max(0.0, drive - 0.8) / 0.2))
            gpu.fb_used_mib = self.static_mib + WORKSPACE_MIB_PER_REQUEST * running / len(self.gpus)
            gpu.fb_free_mib = max(0.0, self.memory_mib - gpu.fb_used_mib)
            gpu.pcie_tx = token_rate * PCIE_BYTES_PER_TOKEN * (1.0 + off)
            gpu.pcie_rx = gpu.pcie_tx * 0.98
