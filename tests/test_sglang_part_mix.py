"""An exploring part's request mix (plugin 0.4.15) inside SGLang's own classes (0.5.23 and 0.5.17): the part's
record holds the requests of its first batch, the batch the loop turn chose before the gate decided its steps,
and each one's accept per verify over the part's own steps, read from SGLang's ``Req`` counts as its spec-v2
result processing keeps them, in the overlap loop's order. What is real and what is constructed:
tests/sglang_plugin_checks/check_part_mix.py (one of the session's batches of checks,
tests/sglang_checks.py)."""

from __future__ import annotations

from typing import Any

from spectower.plugin.gate import PLUGIN_VERSION

from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("part_mix")


@plugin_tests.sglang_check
def test_a_part_records_its_first_batchs_requests_and_their_accept_over_its_own_steps(
    checked: dict[str, Any],
) -> None:
    assert checked["plugin_version"] == PLUGIN_VERSION and checked["answers"] == {"policy_4": True}
    # 94 cold gated batches, one part of 4 drafted batches (the warm part ends at once: nothing holed), cold
    parts = [(turn["steps"], turn["part"]) for turn in checked["turns"]]
    assert parts[:94] == [(0, "cold")] * 94 and parts[94:98] == [(3, "explore")] * 4
    assert parts[98:] == [(0, "cold")] * 6 and checked["window"]["windows"] == 1
    assert checked["first_batch"] == [f"r{i}" for i in range(8)]
    # SGLang's result processing moved the requests' own counts: r0 left after the part's second batch (96
    # verifies, 2 of them drafted with 3 correct drafts), the others ran all 103 processed batches (4
    # drafted), the newcomer joined the part's third batch
    counts = checked["counts"]
    assert counts["r0"] == [96, 6] and counts["r1"] == [103, 4] and counts["r2"] == [103, 12]
    assert counts["newcomer"] == [7, 4]
    # the record: the first batch's 8 requests, r0 with the counts it left with, the newcomer not; each one's
    # accept exactly its drafted verifies' (4 and 2), the gated steps on both sides of the part left out
    i = checked["bins"].index(8)
    mix = {field: values[i] for field, values in checked["mix"].items()}
    assert mix == {"parts": 1, "requests": 8, "accept_sum": 4 * 4 + 4 * 2, "inverse_sum": 4 / 4 + 4 / 2}
    assert sum(checked["mix"]["parts"]) == 1
    # the slots of the part's counted drafted steps (its second half, its turnover settling): 2 x 8
    assert checked["slots"]["drafted"][i] == 16 and sum(checked["slots"]["drafted"]) == 16
