"""A dcgm-exporter style ``/metrics`` for the virtual GPUs (served on ``--gpu-metrics-port``).

Names, HELP texts, types and labels as NVIDIA's dcgm-exporter writes them with its default counters:
``gpu, UUID, pci_bus_id, device, modelName, Hostname`` (+ ``DCGM_FI_DRIVER_VERSION``); counters have no
``_total`` suffix (dcgm-exporter does not add one), and values are formatted as it does (integers for
integer fields).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import Response
from spectower.simulator.gpus import GpuReading, VirtualGpus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DRIVER_VERSION = "580.95.05"

# (name, type, help, value getter, integer?)
FIELDS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM frequency (in MHz).", "sm_clock", True),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory frequency (in MHz).", "mem_clock", True),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c", True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w", False),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_mj",
        True,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "", True),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "util", True),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "mem_copy_util", True),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "", True),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "", True),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "", True),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "fb_free_mib", True),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "fb_used_mib", True),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
        "payloads - "
        "in bytes per second.",
        "pcie_tx",
        True,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - "
        "in bytes per second.",
        "pcie_rx",
        True,
    ),
)


def _labels(gpus: VirtualGpus, g: GpuReading) -> str:
    return (
        f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",device="nvidia{g.index}",'
        f'modelName="{gpus.name}",Hostname="{gpus.hostname}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
    )


def render(gpus: VirtualGpus) -> str:
    lines: list[str] = []
    for name, kind, doc, attr, integer in FIELDS:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for g in gpus.gpus:
            value = float(getattr(g, attr)) if attr else 0.0
            text = str(round(value)) if integer else f"{value:.6f}"
            lines.append(f"{name}{{{_labels(gpus, g)}}} {text}")
    return "\n".join(lines) + "\n"


def build_app(gpus: VirtualGpus) -> FastAPI:
    app = FastAPI(title="dcgm-exporter (simulated)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render(gpus), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health() -> Response:
        return Response("OK", media_type="text/plain")

    return app
