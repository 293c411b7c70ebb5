"""A dcgm-exporter style ``/metrics`` for the virtual GPUs (served on ``--gpu-metrics-port``).

Names, HELP texts, types and labels as NVIDIA's dcgm-exporter writes them with its default counters:
``gpu, UUID, pci_bus_id, device, modelName, Hostname`` (+ ``DCGM_FI_DRIVER_VERSION``); integer fields are
rounded to integers as it does. The text itself is prometheus_client's exposition (``generate_latest``, as
the simulated SGLang ``/metrics``), so label values are escaped; one difference from dcgm-exporter's own
text: the two counters carry the text format's ``_total`` sample suffix, which Prometheus parsers read as
the same counter family (and no collector reads them).
"""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .exposition import exposition
from .gpus import VirtualGpus

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


LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


def _families(gpus: VirtualGpus) -> Iterator[Metric]:
    """Every field for every virtual GPU, read now."""
    for name, kind, doc, attr, integer in FIELDS:
        make = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        family = make(name, doc, labels=LABELS)
        for g in gpus.gpus:
            value = float(getattr(g, attr)) if attr else 0.0
            labels = [str(g.index), g.uuid, g.pci_bus_id, f"nvidia{g.index}", gpus.name, gpus.hostname,
                      DRIVER_VERSION]  # fmt: skip
            family.add_metric(labels, float(round(value)) if integer else value)
        yield family


def render(gpus: VirtualGpus) -> bytes:
    return exposition(_families(gpus))


def build_app(gpus: VirtualGpus) -> FastAPI:
    app = FastAPI(title="dcgm-exporter (simulated)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(render(gpus), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health() -> Response:
        return Response("OK", media_type="text/plain")

    return app
