"""The simulator serves its profile: per mode in model time, and in the right order as a client sees it.

C closed-loop clients stream ``/generate`` through the benchmark's own client (``benchmarks.sim_fidelity``),
at the knob's on and off values. Two things are asserted, neither of which a loaded machine can flip:

- the simulator's published decode counters (``clock: "model"``: each step's modelled duration) give the
  profile's tok/s per batch size and mode, whatever the wall clock did meanwhile;
- as measured by the client, spec on beats spec off and two requests beat one, each by 2x or more in the
  test profile (a catch-up of up to half a second keeps the simulator's pace through short stalls).

How close the client-side figures come to the profile on this machine is printed by
``python benchmarks/sim_fidelity.py``, not asserted here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.plugin.engine_counters import rates
from spectower.simulator.profile import load_profile

from benchmarks.sim_fidelity import Measurement, measure
from benchmarks.simulator_process import H100, SimulatorFactory, curve_profile, write_profile

# on/off 3x at both levels, each mode 2x from one request to two; whole tokens per drafted step and no
# per-step noise, so the model-time rates are the profile's exactly
ORDER_SHAPE = curve_profile(
    "order-shape", [1, 2, 4], {"spec_on": [120.0, 240.0, 400.0], "spec_off": [40.0, 80.0, 160.0]},
    max_running_requests=8, gpus=H100, served_model_name="order-shaped",
    description="test profile: wide margins between modes and levels",
)  # fmt: skip
WINDOW_S = 1.5
WARMUP_S = 0.3
# A step whose batch still holds a request the client just dropped is timed for the full batch: at most a
# step or two per measurement, well under 2% of ~100 steps.
MODEL_RATE_TOLERANCE = 0.02


def _counters(base_url: str) -> dict[str, Any]:
    state = httpx.get(f"{base_url}/server_info", timeout=10).json()["internal_states"][0]
    counters: dict[str, Any] = state["spectower"]["counters"]
    return counters


@pytest.mark.slow
@pytest.mark.integration
def test_rates_follow_the_profile_in_model_time_and_in_order_client_side(
    simulator_factory: SimulatorFactory, tmp_path: Path
) -> None:
    path = write_profile(ORDER_SHAPE, tmp_path)
    profile = load_profile(path)
    sim = simulator_factory(profile=path)
    client: dict[tuple[int, bool], Measurement] = {}
    for concurrency in (1, 2):
        for spec_on in (False, True):
            before = _counters(sim.base_url)
            m = asyncio.run(measure(sim.base_url, profile, concurrency, spec_on, WINDOW_S, WARMUP_S))
            delta = rates(before, _counters(sim.base_url))
            client[concurrency, spec_on] = m
            mode = "drafted" if spec_on else "gated"
            model_tok_s = delta[mode]["tok_s"][delta["bins"].index(concurrency)]
            print(f"C={concurrency} spec_on={spec_on}: client {m.measured_tok_s:.1f} tok/s, model clock "
                  f"{model_tok_s:.1f}, profile {m.profile_tok_s:.1f}")  # fmt: skip
            assert m.tokens > 0
            assert model_tok_s == pytest.approx(m.profile_tok_s, rel=MODEL_RATE_TOLERANCE)

    tok_s = {key: m.measured_tok_s for key, m in client.items()}
    assert tok_s[1, True] > tok_s[1, False] and tok_s[2, True] > tok_s[2, False], tok_s
    assert tok_s[2, False] > tok_s[1, False] and tok_s[2, True] > tok_s[1, True], tok_s
