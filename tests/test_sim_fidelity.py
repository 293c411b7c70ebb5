"""Fidelity: C closed-loop streaming clients, measured client-side, get the profile's tok/s within 5%.

Client and simulator share this (2-core, loaded) machine. Each point streams long ``/generate`` requests
(~15 s each, so request turnover is rare), warms up, then counts tokens over a 10 s window; SSE events are
split on blank lines (bytes), so U+2028 / U+0085 in the text cannot break parsing.
"""

from __future__ import annotations

import asyncio

import pytest
from spectower.simulator.profile import load_profile

from benchmarks.sim_fidelity import measure
from tests.simulator_process import SimulatorFactory

# throughput against the wall clock: tests/run runs these alone, after the parallel part
pytestmark = pytest.mark.timing

PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
TOLERANCE = 0.05
WINDOW_S = 10.0
WARMUP_S = 3.0


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_client_side_throughput_matches_profile(
    simulator_factory: SimulatorFactory, concurrency: int
) -> None:
    profile = load_profile(PROFILE)
    sim = simulator_factory(profile=PROFILE)
    for spec_on in (False, True):
        m = asyncio.run(measure(sim.base_url, profile, concurrency, spec_on, WINDOW_S, WARMUP_S))
        print(
            f"C={concurrency} spec_on={spec_on}: measured {m.measured_tok_s:.1f} tok/s, profile "
            f"{m.profile_tok_s:.1f} ({m.error * 100:+.2f}%)"
        )
        assert abs(m.error) <= TOLERANCE, m
