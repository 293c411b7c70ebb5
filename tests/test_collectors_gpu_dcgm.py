"""collectors/gpu/dcgm.py: a dcgm-exporter page into GPU readings; one GPU's odd label costs that GPU only."""

from __future__ import annotations

from spectower.collectors.gpu.dcgm import parse_dcgm
from spectower.simulator import dcgm
from spectower.simulator.config import SimConfig
from spectower.simulator.engine import Engine
from spectower.simulator.gpus import VirtualGpus
from spectower.simulator.profile import load_profile


def _page() -> str:
    """The simulator's dcgm-exporter page (the exporter's names and labels) for its 8 GPUs."""
    engine = Engine(SimConfig(profile=load_profile("glm5-nvfp4-8x-rtx-pro-6000")))
    return dcgm.render(VirtualGpus(engine, seed=1)).decode()


def test_a_gpu_index_no_column_can_hold_skips_that_gpu_only() -> None:
    text = _page()
    readings, _ = parse_dcgm(text, 1000.0, "sim:9400")
    assert sorted(r.index for r in readings) == list(range(8))
    # once took the whole scrape's rows down with it: the writer quarantined the job on an int64 overflow
    odd = text.replace('gpu="1"', 'gpu="99999999999999999999"')
    readings, _ = parse_dcgm(odd, 1000.0, "sim:9400")
    assert sorted(r.index for r in readings) == [0, *range(2, 8)]
    assert all(r.memory_used_mib is not None for r in readings)
    negative = parse_dcgm(text.replace('gpu="1"', 'gpu="-1"'), 1000.0, "x")[0]
    assert 1 not in {r.index for r in negative} and len(negative) == 7
