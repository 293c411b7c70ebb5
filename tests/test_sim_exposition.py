"""The simulator's hand-built Prometheus pages (dcgm-exporter, /v1/loads?format=prometheus) are
prometheus_client's exposition: a label value with quotes, backslashes or a newline round-trips through a
parser, and the names and labels the collectors read are the ones they expect."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from spectower.collectors.gpu.dcgm import parse_dcgm
from spectower.collectors.sglang.loads import parse_loads_prometheus
from spectower.simulator import dcgm
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine
from spectower.simulator.gpus import VirtualGpus
from spectower.simulator.profile import load_profile
from spectower.simulator.routes_admin import _loads_prometheus

AWKWARD = 'rack "7" \\ row\nB'


def _gpus() -> VirtualGpus:
    engine = Engine(SimConfig(profile=load_profile("llama31-8b-1x-h100")))
    gpus = VirtualGpus(engine, seed=1)
    gpus.hostname = AWKWARD  # a host name no hand-written exposition would escape
    return gpus


def test_dcgm_label_values_are_escaped_and_read_back() -> None:
    text = dcgm.render(_gpus()).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge" and [s.labels["Hostname"] for s in util.samples] == [AWKWARD]
    assert set(util.samples[0].labels) == set(dcgm.LABELS)
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    readings, facts = parse_dcgm(text, 1000.0, "sim:9400")
    assert [r.host for r in readings] == [AWKWARD] and readings[0].memory_used_mib is not None
    assert facts[0].name == "NVIDIA H100 80GB HBM3"


def test_loads_prometheus_reads_back_per_rank() -> None:
    loads = [
        {"dp_rank": 0, "num_running_reqs": 3, "token_usage": 0.25, "speculative": {"accept_length": 2.5}},
        {"dp_rank": 1, "num_running_reqs": 5, "token_usage": 0.5, "speculative": {"accept_length": 3.0}},
    ]
    parsed = parse_loads_prometheus(_loads_prometheus(loads).decode())
    by_rank = {r.dp_rank: r for r in parsed.ranks}
    assert (by_rank[0].num_running_reqs, by_rank[1].num_running_reqs) == (3, 5)
    assert (by_rank[0].spec_accept_length, by_rank[1].token_usage) == (2.5, 0.5)
