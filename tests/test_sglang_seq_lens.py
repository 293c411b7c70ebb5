"""Off means off on flashinfer (issue #12): the seq-lens mirror, loaded by SGLang's real load_plugins() from
the gated-decode entry point, against SGLang's own ``FutureMap`` (0.5.23 and 0.5.17): a gated batch's host
lengths come from the mirror, never from SGLang's host copy, and always equal what that copy says; a prefill
or a drafting step hands the answer back to SGLang; a length changed elsewhere is caught and turns the mirror
off. What is real and what is constructed: tests/sglang_plugin_checks/check_seq_lens.py."""

from __future__ import annotations

from typing import Any

from tests import sglang_checks as batches
from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import SglangChecks, checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

checked = checked_fixture("seq_lens")


def _answers(rows: list[dict[str, Any]]) -> list[str]:
    return [row.get("answered", "prefill") for row in rows]


@plugin_tests.sglang_check
def test_gated_batches_resolve_from_the_mirror_with_sglangs_lengths(checked: dict[str, Any]) -> None:
    trace = checked["trace"]
    for row in trace:
        if "answered" in row:  # every decode resolve, whoever answered, has the true host lengths
            assert row["seq_lens_cpu"] == row["truth"] == row["seq_lens"], row
            assert row["seq_lens_sum"] == sum(row["truth"]), row
    assert _answers(trace) == [
        "prefill",
        "mirror", "mirror", "mirror",  # a prefill publishes the lengths its batch held on the host
        "prefill",
        "mirror", "mirror",  # c joins: prefilled, so still known
        "mirror",  # a finished: a subset is still known
        "mirror",  # knob up: b and c drain at 0 steps first (their extends were skipped), still gated
        "prefill",
        "mirror", "sglang",  # drafting: known from the prefill, then the accepted count is data
        "sglang", "mirror", "mirror", "mirror",  # gated again: one answer from SGLang, then the mirror
        "sglang",  # a finished request's id again, joined without a prefill: a new request, unknown
        "mirror",
    ]  # fmt: skip
    assert [row.get("steps") for row in trace if row["phase"] == "on, drafting"] == [3, 3]
    report = checked["report_before_fault"]
    assert report["enabled"] and report["active"] and report["mismatches"] == 0
    assert report["resolved_from_mirror"] == 12 and report["resolved_by_sglang"] == 3
    # of SGLang's three, two resolved a batch that then ran gated: the first after drafting and the one
    # with a request unknown to the mirror (the drafting step's own was due)
    assert report["gated_by_sglang"] == 2
    assert report["verified"] == 7  # the first and every 2nd remembered resolve checked: all equal
    assert report["seconds"] > 0  # its own bookkeeping is timed (measure_off.sh prints it per resolve)


@plugin_tests.sglang_check
def test_a_backend_on_device_lengths_is_left_alone(checked: dict[str, Any]) -> None:
    """Triton's FutureMap publishes no host lengths: the mirror never turns on, SGLang's answer stands."""
    assert _answers(checked["device_only"]) == ["prefill", "none", "none"]
    assert all(row["seq_lens_cpu"] is None for row in checked["device_only"][1:])
    assert checked["idle_after_triton"]["active"] is False


@plugin_tests.sglang_check
def test_a_length_changed_elsewhere_turns_the_mirror_off(checked: dict[str, Any]) -> None:
    fault = checked["fault"]
    checked_at = next(i for i, row in enumerate(fault) if row["seq_lens_cpu"] == row["truth"])
    assert fault[checked_at]["answered"] == "mirror"  # the sampled check: SGLang's copy wins, mirror off
    assert all(row["answered"] == "sglang" for row in fault[checked_at + 1 :])
    assert all(row["seq_lens_cpu"] == row["truth"] for row in fault[checked_at:])
    report = checked["report"]
    assert report["enabled"] is False and report["mismatches"] == 1
    assert report["off_reason"].startswith("request 'd'")
    assert checked["published"] == report  # the knob plugin's state block carries it


@plugin_tests.sglang_check
@batches.group("0.5.23")
def test_switched_off_by_its_environment_variable(sglang_checks: SglangChecks) -> None:
    result = sglang_checks.result("0.5.23", "seq_lens:off")  # SPECTOWER_SEQ_LENS_MIRROR=0
    decode = [row for row in result["trace"] if "answered" in row]
    assert {row["answered"] for row in decode} == {"none"}  # the hook is not there to count
    assert all(row["seq_lens_cpu"] == row["truth"] for row in decode)
    assert result["published"] is None
