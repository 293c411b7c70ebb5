"""The prefill probe (collectors/bench/prefill.py); on a server: tests/test_bench_sweep_sim.py."""

from __future__ import annotations

from spectower.collectors.bench.prefill import PROBE_LONG_LEN, PrefillProbe, long_length
from spectower.collectors.bench.replay import prompt_limit


def test_the_slope_cancels_the_fixed_cost() -> None:
    # 20 ms of fixed cost in both; 2 000 more prompt tokens took 0.1 s more
    assert PrefillProbe(48, 2048, 0.020, 0.120).tok_s == 2000 / 0.100
    # a long prompt no slower than a short one (a cache hit, jitter): nothing to read, not a huge rate
    assert PrefillProbe(48, 2048, 0.020, 0.020).tok_s is None
    assert PrefillProbe(48, 2048, 0.030, 0.020).tok_s is None


def test_the_long_prompt_fits_the_server_or_the_probe_is_skipped() -> None:
    assert long_length(64, None) == PROBE_LONG_LEN  # the server does not say: the default
    assert long_length(64, 100_000) == PROBE_LONG_LEN
    fits = prompt_limit(1000, None, 2)
    assert fits is not None and long_length(64, 1000) == fits < 1000  # what the server takes with 2 outputs
    assert long_length(64, 200) is None  # not clearly longer than the short prompt (4x): no slope to read


def test_the_long_prompt_leaves_an_eagle_servers_draft_slots_free() -> None:
    """The replay's cut and the probe's length are one rule: on a small context the probe's long prompt
    leaves room for the draft slots SGLang counts on top of every prompt (topk x steps, 8 with topk 2 and 4
    steps): 1 000 + 6 of context, less 8 slots, less its 2 outputs, less the BOS margin."""
    assert long_length(64, 1000, 8) == prompt_limit(1000, None, 2, 8) == 1006 - 8 - 2 - 2
