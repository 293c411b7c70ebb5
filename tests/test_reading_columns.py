"""A collector's reading and the table it is stored in declare the same fields on two layers (the reading has
no database: the NVML sampler also runs where only the standard library and nvidia-ml-py exist; storage
imports no collector). The sink copies a reading into a row by name, so the two lists must stay equal."""

from __future__ import annotations

from dataclasses import fields

from spectower.collectors.gpu.reading import SAMPLE_FIELDS
from spectower.collectors.sglang.reading import EngineReading
from spectower.storage.models import EngineSample, GpuSample


def test_an_engine_reading_fills_every_engine_sample_column() -> None:
    # collectors/sink.py: EngineSample(server_id=..., **reading.as_row())
    columns = set(EngineSample.model_fields) - {"id", "server_id"}
    assert {f.name for f in fields(EngineReading)} == columns


def test_a_gpu_reading_fills_every_gpu_sample_column() -> None:
    # collectors/sink.py: GpuSample(gpu_id=..., ts=reading.ts, **{k: getattr(reading, k) for k in ...})
    columns = set(GpuSample.model_fields) - {"id", "gpu_id", "ts"}
    assert set(SAMPLE_FIELDS) == columns
