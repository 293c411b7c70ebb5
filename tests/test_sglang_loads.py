"""spectower.collectors.sglang.loads: /v1/loads in both formats, from the real 0.5.17 server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.collectors.sglang.loads import LoadsError, parse_loads_json, parse_loads_prometheus


def test_json(real_data: Path) -> None:
    doc = json.loads((real_data / "sglang-0.5.17-h200/loads_all_after.json").read_text())
    loads = parse_loads_json(doc)
    assert (loads.version, loads.accelerator, loads.num_accelerators) == ("0.5.17", "NVIDIA H200", 1)
    [r] = loads.ranks
    assert r.dp_rank == 0
    assert r.max_total_num_tokens == 6463684 and r.max_running_requests == 48
    assert r.num_running_reqs == 0 and r.num_waiting_reqs == 0
    assert r.spec_accept_length == pytest.approx(1.0002287805994052)
    assert r.spec_accept_rate == 0.0


def test_prometheus_matches_json(real_data: Path) -> None:
    prom = parse_loads_prometheus((real_data / "sglang-0.5.17-h200/loads_prom.txt").read_text())
    js = parse_loads_json(json.loads((real_data / "sglang-0.5.17-h200/loads_all_after.json").read_text()))
    assert prom.ranks == js.ranks


def test_bad_json() -> None:
    with pytest.raises(LoadsError, match="'loads' list"):
        parse_loads_json({"loads": 3})
    with pytest.raises(LoadsError, match="dp_rank"):
        parse_loads_json({"loads": [{"dp_rank": "zero"}]})
