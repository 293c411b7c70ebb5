"""Off means off (issue #12): the gated-decode plugin, loaded by SGLang's real load_plugins() from its entry
point, against SGLang's own classes (0.5.23 and 0.5.17): a gated batch's one-token verify on the 0-step
backend is planned and run as a decode batch; drafting verifies, draft extends and prefills pass through.
What is real and what is constructed: tests/sglang_plugin_checks/check_gated_decode.py."""

from __future__ import annotations

from typing import Any

from tests import sglang_checks as batches
from tests import test_sglang_plugin as plugin_tests
from tests.sglang_checks import SglangChecks, checked_fixture
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

ENTRY = "spectower-gated-decode"


checked = checked_fixture("gated_decode")


@plugin_tests.sglang_check
def test_a_gated_verify_is_planned_and_run_as_decode(checked: dict[str, Any]) -> None:
    result = checked
    assert all(ENTRY in sources for sources in result["targets"].values()), result["targets"]
    gated = result["cases"]["gated_verify"]
    planned = [c for c in gated["calls"] if c["method"].startswith("init_forward_metadata")]
    # the backend plans a decode batch whose lengths count the verify token, without spec info
    assert [c["mode"] for c in planned] == ["DECODE", "DECODE"]
    assert all(c["seq_lens"] == [6, 10] and c["seq_lens_cpu"] == [6, 10] for c in planned)
    assert all(c["seq_lens_sum"] == 16 and c["spec_info"] is None for c in planned)
    assert planned[1]["in_capture"] is True
    # attention runs the decode kernel on the caller's own batch, with the caller's arguments
    assert gated["returned"] == "decode"
    assert [c["method"] for c in gated["calls"]][-1] == "forward_decode"
    assert gated["calls"][-1]["mode"] == "TARGET_VERIFY" and gated["calls"][-1]["save_kv_cache"] is False
    # the caller's batch is left as it was
    assert gated["batch_after"]["mode"] == "TARGET_VERIFY" and gated["batch_after"]["seq_lens"] == [5, 9]
    assert gated["batch_after"]["spec_info"] == "EagleVerifyInput"


@plugin_tests.sglang_check
def test_drafting_and_other_modes_pass_through(checked: dict[str, Any]) -> None:
    result = checked
    passing = (("drafting_verify", "TARGET_VERIFY"), ("draft_extend_on_gated_backend", "DRAFT_EXTEND_V2"),
               ("prefill_on_gated_backend", "EXTEND"))  # fmt: skip
    for name, mode in passing:
        case = result["cases"][name]
        assert case["returned"] == "extend", name
        assert [c["mode"] for c in case["calls"]] == [mode] * 3, name
        assert all(c["seq_lens"] == [5, 9] for c in case["calls"]), name


@plugin_tests.sglang_check
@batches.group("0.5.23")
def test_switched_off_by_its_environment_variable(sglang_checks: SglangChecks) -> None:
    result = sglang_checks.result("0.5.23", "gated_decode:off")  # SPECTOWER_GATED_DECODE=0, no config
    assert all(ENTRY not in sources for sources in result["targets"].values())
    assert result["cases"]["gated_verify"]["returned"] == "extend"


@plugin_tests.sglang_check
def test_each_adaptive_state_captures_its_own_draft_extend_width(checked: dict[str, Any]) -> None:
    """The 0-step state's draft-extend CUDA graph is one token wide, so a gated batch's draft extend replays
    it (0.5.17 read the launch width, four, and ran that extend eagerly: data/gpu-runs/NOTEBOOK.md)."""
    width = checked["draft_extend_width"]
    assert width["launch"] == 4
    assert width["zero_step_state"] == 1
    assert width["reads_server_args"] == (checked["sglang_version"] == "0.5.17")


@plugin_tests.sglang_check
def test_knob_at_zero_skips_the_draft_extend_then_drains_before_drafting(checked: dict[str, Any]) -> None:
    """Off: SGLang's own stub replaces the draft extend and the requests are remembered as holed. Back on:
    while a holed request is in the batch it runs 0 steps WITH the extend; once they have finished, it
    drafts. A partial ceiling's gated batches skip too; a policy's 0 (the gate explores) skips in its
    windows' cold part and runs the extend in the warm part until the holed requests have finished and in
    the exploring part; an operator's off pauses exploration and skips throughout."""
    trace = checked["extend_skip"]["trace"]
    rows = [(t["phase"], t["steps"] > 0, t["extend"], t["holed"]) for t in trace]
    assert rows == [
        ("on", True, "ran", []),
        ("off", False, "stub", ["a", "b"]),
        ("off", False, "stub", ["a", "b", "c"]),
        ("drain", False, "ran", ["a", "b", "c"]),
        ("drain", False, "ran", ["b", "c"]),
        ("drafting again", True, "ran", []),
        ("partial ceiling", False, "stub", ["d", "e", "f"]),  # gated by a ceiling above 0: skipped too
        *[("policy's off, cold", False, "stub", ["g", "h"])] * 15,
        ("policy's off, warm", False, "ran", ["g", "h"]),
        ("policy's off, window", True, "ran", []),  # the exploring part drafts (a 1-batch stream here)
        ("policy's off, cold again", False, "stub", ["i", "j"]),
        ("off, held by an operator", False, "stub", ["g", "h"]),
        # released at 0 after the prefills below: the window goes on where the lock paused it (1 cold batch
        # done), the prompt "u" prefilled in its cold part holed with the decoded ones
        ("policy's off after the release, cold", False, "stub", ["s", "t"]),
        *[("policy's off after the release, cold", False, "stub", ["s", "t", "u"])] * 13,
        ("policy's off after the release, warm", False, "ran", ["s", "t", "u"]),
        ("policy's 4, drafting", True, "ran", []),  # the holed requests have left the batch
    ]
    report = checked["extend_skip"]["report"]
    assert (report["batches_skipped"], report["batches_drained"], report["drains_cut_short"]) == (34, 2, 0)
    # and /server_info says so, in the knob plugin's block (read last: the prompts "z1", "z2" holed)
    assert checked["extend_skip"]["published"] == {**report, "holed_requests": 2}


@plugin_tests.sglang_check
def test_drained_batches_count_as_gated(checked: dict[str, Any]) -> None:
    """The knob's decode counters see the two drained batches as gated steps (the gate had chosen to draft
    them): 4 drafted steps ('on', 'drafting again', the window's exploring batch: a part of one batch has no
    turnover, the policy's 4) and 36 gated ones (6, 16 in and around the first window, 14 cold after the
    release), nothing unmatched; the two windows' gated batches that ran the extend (warm) are kept apart as
    settling, so the gated rate a policy reads is the cold stream's."""
    counters = checked["extend_skip"]["counters"]
    assert sum(counters["drafted"]["steps"]) == 4
    assert sum(counters["gated"]["steps"]) == 6 + 16 + 14
    assert counters["settling"]["steps"] == 2
    assert counters["unmatched"] == 0


@plugin_tests.sglang_check
def test_steady_gated_steps_count_by_whether_the_extend_ran(checked: dict[str, Any]) -> None:
    """Plugin 0.4.6: the counters' extend block sees each gated step that followed a gated one, by whether the
    draft extend ran (the two drained batches and the windows' warm ones: 4) or was skipped (the second off
    batch, the 15 cold ones, the operator's off after the cold one, the 14 cold ones after the release: 31).
    The gated steps right after a drafted one (the first off, the partial ceiling, the cold batch after the
    window) pay a switch: in neither."""
    extend = checked["extend_skip"]["counters"]["extend"]
    assert sum(extend["kept"]["steps"]) == 4
    assert sum(extend["skipped"]["steps"]) == 31
    assert all(t > 0 for t, n in zip(extend["kept"]["time_s"], extend["kept"]["steps"], strict=True) if n)


@plugin_tests.sglang_check
def test_a_drained_batchs_verify_never_reaches_sglangs_acceptance_ema(checked: dict[str, Any]) -> None:
    """Plugin 0.4.6: the two drained batches ran 0 steps where the gate chose to draft; their verify results
    (no drafts) are dropped as a gated batch's are, so SGLang's own slots (steps, acceptance EMA, verifies
    counted) are as they were. Fed to the EMA, the zeros put SGLang's band at 0 steps (seen on the H200:
    0 -> 3 -> 0 every few batches at threshold:47)."""
    before, after = checked["extend_skip"]["ema_around_drain"]
    assert before == after


@plugin_tests.sglang_check
def test_the_drafts_prefill_is_skipped_where_nothing_needs_it_and_its_prompts_holed(
    checked: dict[str, Any],
) -> None:
    """Plugin 0.4.9: under a lock at 0 a prefill batch gets SGLang's own stub in place of the draft's pass
    over its prompts (the target's next tokens as the bonus tokens, one token a request), and its requests are
    holed, so the drain covers them once the knob goes up; the operator's on runs the draft's prefill.
    Plugin 0.4.10: under a policy it skips where the decode batch the prompts join next will be gated with
    nothing needing the draft warm: a policy's 0 in its window's cold part (not before a window has a part,
    nor in the warm part, where explored drafting is prepared); a ceiling of 4 over 3 drafting requests
    where the prompts take the next batch past 4 (the knob plugin hears the prefill's request count)."""
    rows = [(p["phase"], p["extend"], p["bonus_is_next_tokens"], p["per_req"], p["holed"])
            for p in checked["extend_skip"]["prefills"]]  # fmt: skip
    assert rows == [
        ("operator's off", "stub", True, [1, "zeros"], ["g", "h", "p", "q"]),
        ("operator's on", "ran", False, None, ["g", "h", "p", "q"]),
        ("policy's off", "ran", False, None, ["g", "h", "p", "q"]),
        ("policy's off, cold", "stub", True, [1, "zeros"], ["s", "t", "u"]),
        ("policy's off, warm", "ran", False, None, ["s", "t", "u"]),
        ("policy's 4, the next batch drafts", "ran", False, None, []),
        ("policy's 4, the next batch gated", "stub", True, [1, "zeros"], ["z1", "z2"]),
    ]
    assert checked["extend_skip"]["report"]["prefills_skipped"] == 3
