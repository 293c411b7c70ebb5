"""The SGLang plugin against SGLang 0.5.23's real classes.

Each check is a script, ``tests/sglang_plugin_checks/<check>.py``, run with the python of the SGLang venv
(``SPECTOWER_SGLANG_PYTHON``, from ``tests/sglang_env.sh``); it prints one JSON object that the tests assert
on. They run in one batch per SGLang version (tests/sglang_checks.py): SGLang is imported once and each
check runs in a child forked from that state, in which no plugin was loaded yet (``HookRegistry.reset()``
does not undo patches: whatever a check patches dies with its child). The checkout under test reaches SGLang
the way an installed spectower would: the checkout and a ``spectower-*.dist-info`` holding the entry point
declared in pyproject.toml are put on ``PYTHONPATH``, and SGLang's own ``load_plugins()`` discovers it. What
is real and what is constructed inside the checks: ``tests/sglang_plugin_checks/_harness.py``.

The load/knob/gating/EMA/counter checks also run against SGLang 0.5.17 (the plugin supports both):
tests/sglang_env.sh installs it as an overlay beside the venv, put first on ``PYTHONPATH``; each check reports
the version it ran against. Refusal and override-log checks run on 0.5.23 only.

Without ``SPECTOWER_SGLANG_PYTHON`` the tests skip, unless ``SPECTOWER_REQUIRE_SGLANG=1`` (then they fail).

The checks run with exploration off (``SPECTOWER_EXPLORE_SHARE=0``: they assert exact gating, EMA and
override-log figures) except ``check_explore`` and the override-log figure that measures exploration's cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spectower.control.sglang_config import build_adaptive_config, write_config
from spectower.plugin.gate import Gate
from spectower.plugin.knob_gate import TARGETS

from tests import sglang_checks as batches
from tests.conftest import REPO_ROOT, examples
from tests.namespace_tree import link_tree, write_dist_info
from tests.sglang_checks import OVERRIDE_BATCHES, STEPS, VERSION_PARAMS, SglangChecks
from tests.sglang_checks import overlay_of as overlay_of  # re-exported: checks that import it from here
from tests.sglang_checks import sglang_checks as sglang_checks  # the fixture: the session's batches

# The first test of a version waits for its batch: SGLang's import, 10-100 s on a loaded 2-core machine.
SGLANG_CHECK = [pytest.mark.sglang, pytest.mark.timeout(900)]


def sglang_check(fn: Any) -> Any:
    for mark in SGLANG_CHECK:
        fn = mark(fn)
    return fn


# Every test here that runs a check against 0.5.23 only: the version's batch and its xdist group.
on_0_5_23 = batches.group("0.5.23")
CHECKS = batches.CHECKS
CHECK_TIMEOUT_S = 420  # run_check below: a python of its own imports SGLang (~10-30 s on a loaded machine)


@pytest.fixture(scope="module")
def sglang_python() -> str:
    return batches.sglang_python()


@pytest.fixture(params=VERSION_PARAMS)
def sglang_version(request: pytest.FixtureRequest, sglang_python: str) -> str:
    """The SGLang version a check runs against: the venv's own 0.5.23, or the 0.5.17 overlay beside it."""
    return batches.require_version(sglang_python, request.param)


# ---- one check in a python of its own (the batches above run every check the tests here assert on) ------


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding spectower (links into this checkout, laid out as installed) and its .dist-info with
    the entry point pyproject.toml declares."""
    site = link_tree(tmp_path_factory.mktemp("plugin-site"))
    write_dist_info(site)
    return site


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The adaptive config `sglang-config --steps 3 --max-running-requests 48` writes (bands 1, 8, 32)."""
    return write_config(tmp_path_factory.mktemp("cfg") / "adaptive.json", build_adaptive_config(STEPS, 48))


def run_check(
    python: str,
    site: Path,
    check: str,
    *args: str,
    env: dict[str, str | None] | None = None,
    version: str = "0.5.23",
) -> dict[str, Any]:
    """``check.py ARGS`` in a python of its own, for a check that must not share the batch's import."""
    wanted: dict[str, str | None] = {**batches.check_environment(python, version, site), **(env or {})}
    environ = {k: v for k, v in wanted.items() if v is not None}
    proc = subprocess.run(
        [python, str(CHECKS / f"{check}.py"), *args],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        env=environ,
        cwd=site,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"{check} failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    assert result.get("plugin_loaded", True), f"{check}: load_plugins() did not load the plugin"
    assert result["sglang_version"] == version, f"{check} ran against SGLang {result['sglang_version']}"
    return result


@sglang_check
def test_load_plugins_discovers_the_entry_point(sglang_checks: SglangChecks, sglang_version: str) -> None:
    result = sglang_checks.result(sglang_version, "load_plugins")
    entry = {"name": "spectower", "value": "spectower.plugin.knob_gate:register", "dist": "spectower"}
    assert entry in result["entry_points"]
    assert Path(result["plugin_file"]).resolve() == (REPO_ROOT / "plugin" / "knob_gate.py").resolve()
    targets = result["targets"]
    assert set(targets) == {
        "sglang.srt.managers.scheduler.Scheduler.set_internal_state",
        "sglang.srt.managers.scheduler.Scheduler.get_internal_state",
        "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.get_steps_for_batch",
        "sglang.srt.speculative.adaptive_spec_params.AdaptiveSpeculativeParams.on_verify_complete",
        "sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run",
    }
    # the gated-decode and loop-stall plugins (their own entry points) hook the scheduler's choice too
    shared = "sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run"
    for target, info in targets.items():
        assert set(info["hook_types"]) == {"around"} and info["patched"] and info["wrapped"], target
        if target == shared:
            assert info["sources"].count("spectower") == 1 and info["hooks_are_ours"].count(True) == 1, info
            continue
        assert info["sources"] == ["spectower"], target  # registered while load_plugins ran our entry point
        assert info["hooks_are_ours"] == [True], target
    hooked_logs = [m for m in result["plugin_logs"] if "AROUND hooks on" in m]
    assert len(hooked_logs) == 1, result["plugin_logs"]
    # the loop-stall plugin's entry point, found the same way, starts one watch thread in the process
    stalls_entry = {"name": "spectower-loop-stalls", "value": "spectower.plugin.loop_stalls:register",
                    "dist": "spectower"}  # fmt: skip
    assert stalls_entry in result["entry_points"]
    assert result["watch_threads"] == ["spectower-stall-watch"]


@sglang_check
def test_knob_accepted_refused_and_passed_through(sglang_checks: SglangChecks, sglang_version: str) -> None:
    result = sglang_checks.result(sglang_version, "knob")
    assert result["initial_has_sglang_fields"]
    initial = result["initial_spectower"]
    # Before any set: always on, reported as max_running_requests (docs/design.md: N >= that keeps it on).
    assert initial["spec_max_bs"] == result["max_running_requests"] == 48
    assert initial["plugin_version"] and initial["batches_drafted"] == initial["batches_gated"] == 0
    assert initial["refused"] is None
    rows = {json.dumps(r["request"], sort_keys=True): r for r in result["rows"]}

    def row(**request: Any) -> dict[str, Any]:
        return rows[json.dumps(request, sort_keys=True)]

    assert row(spectower_spec_max_bs=8)["updated"] is True
    assert row(spectower_spec_max_bs=8)["spectower"]["spec_max_bs"] == 8
    assert row(spectower_spec_max_bs=8)["new_overrides"] == []  # our key is not a server arg
    for bad in (-1, 2.5, 4.0, True):
        bad_row = row(spectower_spec_max_bs=bad)
        assert bad_row["updated"] is False, bad
        assert bad_row["spectower"]["spec_max_bs"] == 8, bad  # unchanged
    assert row(spectower_unknown=3)["updated"] is False  # SGLang's own refusal of an unknown key
    # SGLang's own keys reach SGLang's handler and its validation.
    threshold = row(speculative_accept_threshold_single=0.5)
    assert threshold["updated"] is True and threshold["speculative_accept_threshold_single"] == 0.5
    assert threshold["new_overrides"] == [
        ["update_server_args", {"speculative_accept_threshold_single": 0.5}]
    ]
    assert row(pp_max_micro_batch_size=10_000)["updated"] is False
    # Mixed, all valid: both applied; SGLang's key through SGLang (its override), ours by the plugin.
    mixed = row(spectower_spec_max_bs=0, speculative_accept_threshold_acc=0.7)
    assert mixed["updated"] is True
    assert mixed["spectower"]["spec_max_bs"] == 0 and mixed["speculative_accept_threshold_acc"] == 0.7
    assert mixed["new_overrides"] == [["update_server_args", {"speculative_accept_threshold_acc": 0.7}]]
    # Mixed with a key SGLang refuses: nothing applied, ours included.
    refused = row(spectower_spec_max_bs=5, no_such_sglang_key=1)
    assert refused["updated"] is False and refused["spectower"]["spec_max_bs"] == 0
    # Mixed with a bad value of ours: nothing applied, SGLang's key included.
    bad_mixed = row(spectower_spec_max_bs=-3, speculative_accept_threshold_single=0.9)
    assert bad_mixed["updated"] is False and bad_mixed["new_overrides"] == []
    assert bad_mixed["speculative_accept_threshold_single"] == 0.5
    assert row(spectower_spec_max_bs=100)["spectower"]["spec_max_bs"] == 100  # above max_running_requests
    assert any("spectower_spec_max_bs must be an integer in 0.." in w for w in result["warnings"])
    assert any("unknown spectower key spectower_unknown" in w for w in result["warnings"])


@sglang_check
def test_the_simulator_answers_each_raw_knob_value_as_sglang_does(
    sglang_checks: SglangChecks, sglang_version: str, simulator_factory: Any
) -> None:
    """JSON true, false, 1.0, "1", 3, null as spectower_spec_max_bs, over HTTP. SGLang's request model
    (SetInternalStateReq: Dict[str, Union[int, float]], pydantic's lax mode) makes true 1 and "1" 1 before
    the scheduler, so a real server with the plugin applies them as 1; the plugin refuses a raw True only
    where it receives one (in-process, test_knob_accepted_refused_and_passed_through). The simulator must
    answer each body as that real server does: the same status, the same updated, the same ceiling after."""
    import httpx

    sim = simulator_factory()
    rows = sglang_checks.result(sglang_version, "knob")["http_rows"]
    by_raw = {row["raw"]: row for row in rows}
    assert by_raw["true"]["coerced"] == [1, "int"] and by_raw["true"]["updated"] is True  # SGLang's own
    assert by_raw['"1"']["coerced"] == [1, "int"] and by_raw["1.0"]["updated"] is False
    for row in rows:
        set_url = f"{sim.base_url}/set_internal_state"
        assert httpx.post(set_url, json={"server_args": {"spectower_spec_max_bs": 8}}, timeout=10).json()[0]
        body = f'{{"server_args": {{"spectower_spec_max_bs": {row["raw"]}}}}}'
        answer = httpx.post(set_url, content=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert answer.status_code == row["status"], (row, answer.text)
        if row["status"] == 200:
            info = httpx.get(f"{sim.base_url}/server_info", timeout=10).json()
            knob = info["internal_states"][0]["spectower"]["spec_max_bs"]
            assert (answer.json()[0], knob) == (row["updated"], row["spec_max_bs"]), row


@sglang_check
def test_ownership_contract_in_sglang(sglang_checks: SglangChecks, sglang_version: str) -> None:
    """The lock lives on the server: manual / policy / sweep writes, holds, expiry, release, refusals and
    the read-back fields, through SGLang's real Scheduler methods (the same scenario the simulator plays)."""
    result = sglang_checks.result(sglang_version, "contract")
    assert result["mismatches"] == [], result["mismatches"]
    assert any("locked by a manual write" in w for w in result["warnings"])


@sglang_check
def test_per_batch_gating_at_the_ceiling(sglang_checks: SglangChecks, sglang_version: str) -> None:
    result = sglang_checks.result(sglang_version, "gating")
    assert all(result["answers"].values())
    assert result["candidate_steps"] == [0, STEPS]
    phases: dict[str, list[int]] = {}
    for entry in result["trace"]:
        phases.setdefault(entry["phase"], []).append(entry["steps"])
    assert phases["unset"] == [STEPS] * 4  # always on before any set
    assert phases["ceiling8_below"] == [STEPS] * 3  # 1, 4, 8 <= 8 draft
    assert phases["ceiling8_above"] == [0, 0]  # 9, 16 > 8 are gated
    gate = result["spectower"]["gate"]
    # Hysteresis (margin 1 at N = 8): after closing, 8 (<= N but > N - margin) stays gated...
    assert phases["ceiling8_hover_at"] == [0] * 5
    # ...and 7 (<= N - margin) reopens once the gate has been closed min_dwell batches.
    below = phases["ceiling8_below_margin"]
    closed_so_far = 2 + 5  # gated batches before this phase
    reopen_at = max(0, gate["min_dwell"] - closed_so_far)  # reopens after min_dwell gated batches
    assert below[:reopen_at] == [0] * reopen_at and below[reopen_at:] == [STEPS] * (20 - reopen_at)
    assert phases["ceiling0"] == [0, 0, 0]
    assert phases["ceiling100"] == [STEPS] * 3
    spectower = result["spectower"]
    assert spectower["spec_max_bs"] == 100
    assert spectower["batches_gated"] == sum(1 for e in result["trace"] if e["steps"] == 0)
    assert spectower["batches_drafted"] == sum(1 for e in result["trace"] if e["steps"] > 0)
    # The worker's active step is what the runtime context reports per rank.
    assert result["resolved_speculative_num_steps"] == STEPS


@sglang_check
def test_gated_batches_leave_the_ema_alone(sglang_checks: SglangChecks, sglang_version: str) -> None:
    result = sglang_checks.result(sglang_version, "ema")  # run with SPECTOWER_GATE_MIN_DWELL=0
    gated = result["gated"]
    assert gated["worker_steps"] == 0
    assert gated["after"] == gated["before"]  # EMA, update counter and steps untouched by 55 gated verifies
    twin = result["unhooked_twin"]
    # What the gate prevents: SGLang's own method drags the EMA down and drops the band to 0 steps.
    assert twin["after"]["ema"] < twin["before"]["ema"] - 1.0
    assert twin["after"]["steps"] == 0 and twin["after"]["count"] == 55
    drafted = result["drafted"]
    assert drafted["after"]["count"] == drafted["before"]["count"] + 3
    assert drafted["after"]["ema"] != drafted["before"]["ema"]
    for lag in result["lag"]:
        steps_by_size = dict(zip(lag["order"], lag["steps"], strict=True))
        assert steps_by_size == {4: STEPS, 12: 0}, lag
        band1_before, band1_after = lag["band1"]
        band8_before, band8_after = lag["band8"]
        assert band1_after["count"] == band1_before["count"] + 1, lag  # the drafted batch fed band 1
        assert band8_after == band8_before, lag  # the gated batch did not feed band 8
    assert result["spectower"]["gate"]["verifies_dropped"] == 55 + 2


@sglang_check
@on_0_5_23
def test_refused_without_speculative_adaptive(sglang_checks: SglangChecks) -> None:
    result = sglang_checks.result("0.5.23", "refusal:no-adaptive")
    assert result["knob_updated"] is False
    assert result["sglang_key_updated"] is True and result["threshold_after"] == 0.5  # SGLang unharmed
    assert "without --speculative-adaptive" in result["spectower"]["refused"]
    assert result["steps_for_40"] == STEPS  # no gating: SGLang's own steps
    assert any("REFUSING" in w and "--speculative-adaptive" in w for w in result["warnings"])


@sglang_check
@on_0_5_23
def test_refused_when_a_band_lacks_step_zero(sglang_checks: SglangChecks) -> None:
    # its config: {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 3]}}
    result = sglang_checks.result("0.5.23", "refusal:no-zero-band")
    assert result["knob_updated"] is False and result["sglang_key_updated"] is True
    assert "band 1 does not allow step 0" in result["spectower"]["refused"]
    assert result["steps_for_40"] == STEPS


@sglang_check
@on_0_5_23
def test_refuses_to_hook_when_a_target_is_missing(sglang_checks: SglangChecks) -> None:
    result = sglang_checks.result("0.5.23", "refusal:missing-target")
    ours = {".".join(target) for target in TARGETS.values()}  # another plugin (gated decode) may hook others
    assert result["knob_hooked_targets"] == [] and result["set_internal_state_wrapped"] is False
    # the scheduler's choice is the one target of ours another plugin hooks as well
    shared = {"sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run"}
    assert ours & set(result["hooked_targets"]) == shared
    assert result["spectower"] is None
    assert result["knob_updated"] is False and result["sglang_key_updated"] is True
    assert any("NOT hooking" in w and "on_verify_complete" in w for w in result["warnings"])


@sglang_check
@on_0_5_23
def test_override_log_growth_is_bounded_by_hysteresis(sglang_checks: SglangChecks) -> None:
    figures = {}
    # OVERRIDE_BATCHES batches of each pattern, alternating and noisy, in three runs: with hysteresis, without
    # (SPECTOWER_GATE_MARGIN=0 SPECTOWER_GATE_MIN_DWELL=0), with hysteresis and the default 2 % exploration
    for label in ("hysteresis", "none", "explore"):
        result = sglang_checks.result("0.5.23", f"override_log:{label}")
        for pattern, figure in result["patterns"].items():
            assert figure["sources"] in ([], ["adaptive_spec.restore"])
            figures[(label, pattern)] = {**figure, "gate": result["spectower"]["gate"]}
    print(
        "override-log growth (entries, pickled bytes) over",
        OVERRIDE_BATCHES,
        "batches at ceiling 32:",
        {f"{k[0]}/{k[1]}": (v["log_growth"], v["log_growth_bytes_pickled"]) for k, v in figures.items()},
        file=sys.stderr,
    )
    # Without hysteresis every batch at the ceiling flips the gate: one entry per batch.
    assert figures[("none", "alternate")]["log_growth"] >= OVERRIDE_BATCHES - 2
    # With it, a load hovering within the margin costs a constant (one close), whatever the duration.
    assert figures[("hysteresis", "alternate")]["log_growth"] <= 2
    # A noisier load (+-3 around the ceiling) flips at most twice per min_dwell + 1 batches.
    dwell = figures[("hysteresis", "noisy")]["gate"]["min_dwell"]
    assert figures[("hysteresis", "noisy")]["log_growth"] <= 2 * OVERRIDE_BATCHES / (dwell + 1) + 2
    assert figures[("hysteresis", "noisy")]["log_growth"] * 4 < figures[("none", "noisy")]["log_growth"]
    # Each log entry is a gate switch the plugin counted (the bands' own EMA never switched here), and the
    # plugin's attribution agrees: every step change is the gate's, none the bands'.
    for (label, _), figure in figures.items():
        assert figure["log_growth"] == figure["step_changes"] and figure["band_changes"] == 0
        if label != "explore":
            assert figure["log_growth"] == figure["gate_switches"]
    # Exploration's cost in the log: each explored batch changes the steps twice (to the other mode and
    # back), about 2 x 2 % of the batches; none of it is a gate switch.
    for pattern in ("alternate", "noisy"):
        explore = figures[("explore", pattern)]
        explored = explore["explore_changes"]
        # explored batches leave the dwell count alone, so the gate's own path differs a little; its bound
        # holds all the same
        assert explore["gate_switches"] <= 2 * OVERRIDE_BATCHES / (dwell + 1) + 2
        assert 0 < explored <= 2 * OVERRIDE_BATCHES / 50 + 2
        assert explore["log_growth"] <= explore["gate_switches"] + explored


# ------------------------------------------------------------------ the gate's own logic (no SGLang needed)


def test_the_plugin_takes_its_ceiling_through_the_one_contract_parser() -> None:
    """The plugin has no validator of its own (issue #33): the contract's parser accepts and refuses."""
    from spectower.plugin import knob_contract, knob_gate

    assert not hasattr(knob_gate, "validate_spec_max_bs")
    for good in (0, 10**6):
        request = knob_contract.parse_request({knob_contract.KNOB_KEY: good})
        assert request is not None and request.value == good
    for bad in (-1, 2.5, 3.0, True, "8", None):
        with pytest.raises(knob_contract.ContractError, match=knob_contract.KNOB_KEY):
            knob_contract.parse_request({knob_contract.KNOB_KEY: bad})


def test_gate_unset_is_always_on_and_zero_is_always_off() -> None:
    gate = Gate()
    assert not any(gate.decide(size) for size in (1, 48, 10_000))
    gate.set_ceiling(0)
    assert all(gate.decide(size) for size in [1] * 100 + [2, 48])


@settings(max_examples=examples(200), deadline=None)
@given(
    ceiling=st.integers(0, 64),
    margin=st.one_of(st.none(), st.integers(0, 8)),
    dwell=st.integers(0, 20),
    sizes=st.lists(st.integers(1, 80), min_size=1, max_size=300),
)
def test_gate_never_drafts_above_the_ceiling_and_bounds_its_switches(
    ceiling: int, margin: int | None, dwell: int, sizes: list[int]
) -> None:
    gate = Gate(margin=margin, min_dwell=dwell)
    gate.set_ceiling(ceiling)
    for size in sizes:
        closed = gate.decide(size)
        if size > ceiling:
            assert closed  # the contract: no drafting above N, hysteresis or not
        if closed is False:
            assert size <= ceiling
    # Reopening needs min_dwell gated batches: at most 2 switches per dwell + 1 batches (+1 for a last close).
    assert gate.switches <= 2 * len(sizes) / (dwell + 1) + 1
    assert gate.batches_gated == 0  # decide() alone does not count; the steps hook counts


def test_gate_hysteresis_margin() -> None:
    gate = Gate(min_dwell=0)
    gate.set_ceiling(40)
    assert gate.margin() == 4
    assert gate.decide(41) and gate.decide(40) and gate.decide(37)  # closed until <= 36
    assert not gate.decide(36) and not gate.decide(40)
    gate.set_ceiling(1)
    assert gate.margin() == 0  # N = 1 can still reopen (at 1)
    assert gate.decide(2) and not gate.decide(1)


def test_gate_matches_late_verify_results() -> None:
    gate = Gate(min_dwell=0)
    gate.set_ceiling(8)
    gate.decide(4)  # drafted
    gate.decide(12)  # gated
    assert gate.verify_was_gated(4, [2, 2, 2, 2]) is False
    assert gate.verify_was_gated(12, [0] * 12) is True
    # no remembered decision: judged by the current state and the accepts
    assert gate.verify_was_gated(12, [0] * 12) is True and gate.verify_was_gated(12, [1] * 12) is False


def test_a_drained_batch_is_the_gates_own_verify() -> None:
    """The gated-decode plugin's drain holds a batch the gate chose to draft at 0 steps (plugin 0.4.6):
    ``mark_gated`` makes its verify the gate's, dropped before SGLang's EMA; only the newest decision, and
    only for its own batch size."""
    gate = Gate(min_dwell=0)
    gate.set_ceiling(8)
    gate.decide(4)
    gate.mark_gated(5)  # another batch size: nothing changes
    gate.decide(6)
    gate.mark_gated(6)
    assert gate.verify_was_gated(4, [0] * 4) is False
    assert gate.verify_was_gated(6, [0] * 6) is True


@sglang_check
def test_decode_counters_per_bin_drafted_and_gated(sglang_checks: SglangChecks, sglang_version: str) -> None:
    """Batches driven through the real AdaptiveController move the published counters (fake clock)."""
    result = sglang_checks.result(sglang_version, "counters")
    assert result["steps_drafted"] == STEPS and result["steps_gated"] == 0
    phases = result["phases"]
    bins = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]  # half octaves up to max_running_requests 48
    zeros = [0] * len(bins)
    start = phases["start"]
    assert start["bins"] == bins and start["version"] == 1 and start["clock"] == "perf_counter"
    assert start["drafted"] == start["gated"] == {"steps": zeros, "tokens": zeros, "time_s": zeros}

    def nonzero(snap: dict[str, Any], mode: str, field: str) -> dict[int, float]:
        return {b: v for b, v in zip(bins, snap[mode][field], strict=True) if v}

    drafted = phases["drafted"]
    # Bin 4 holds the batch of 4 (5 ms, 12 tokens), bin 3 the two overlapped batches of 3 (9 ms launch ->
    # result, then 6 ms result -> result; 7 + 3 tokens); idle time is never counted.
    assert nonzero(drafted, "drafted", "steps") == {3: 2, 4: 1}
    assert nonzero(drafted, "drafted", "tokens") == {3: 7 + 3, 4: 12}
    time_s = nonzero(drafted, "drafted", "time_s")
    assert time_s[3] == pytest.approx(0.009 + 0.006) and time_s[4] == pytest.approx(0.005)
    assert drafted["gated"]["steps"] == zeros
    gated = phases["gated"]
    assert gated["drafted"] == drafted["drafted"]
    assert nonzero(gated, "gated", "steps") == {24: 1}  # the gated batch of 20
    assert nonzero(gated, "gated", "tokens") == {24: 20}
    assert nonzero(gated, "gated", "time_s")[24] == pytest.approx(0.004)
    assert gated["unmatched"] == 1 and gated["dropped"] == 0
    assert result["spectower"]["batches_gated"] == 1 and result["spectower"]["batches_drafted"] == 3
    # the plugin's own time in its decode hooks: 4 launches (get_steps_for_batch) and 5 verify results
    hooks = result["spectower"]["hooks"]
    assert hooks["calls"] == 4 + 5 and hooks["seconds"] > 0
    # the scheduler process's collections (plugin 0.4.5), the full one the check ran among them, kept as long
    gc = result["spectower"]["gc"]
    assert gc["threshold_s"] == 1e-9 and gc["collections"] >= 1 and gc["long"] == gc["collections"]
    assert 2 in [c["generation"] for c in gc["recent_long"]] and gc["longest_s"] > 0


@sglang_check
def test_exploration_in_sglang_runs_of_four_per_bin_and_never_under_a_manual_hold(
    sglang_checks: SglangChecks, sglang_version: str
) -> None:
    # run with SPECTOWER_EXPLORE_SHARE unset and SPECTOWER_EXPLORE_CYCLE=0 (no windows at a policy's 0)
    result = sglang_checks.result(sglang_version, "explore")
    answers, phases = result["answers"], result["phases"]
    assert result["initial_explore"].pop("window")["cycle"] == 0
    assert result["initial_explore"] == {"share": 0.02, "period": 50, "run": 4, "batches": 0, "active": True}
    # ceiling 8: batches of 4 draft, but a run from bin 4's 50th batch runs gated; 16 the other way round
    assert [i for i, s in enumerate(phases["below"], 1) if s == 0] == [50, 51, 52, 53]
    assert [i for i, s in enumerate(phases["above"], 1) if s > 0] == [50, 51, 52, 53]
    assert result["gate_switches"] == 1  # the close at 16; explored batches switch nothing
    # an operator's off holds: nothing explored, and exploring reads back as paused
    assert answers["manual_off"] is True and phases["held_off"] == [0] * 100
    assert result["held_explore"]["active"] is False
    assert answers["policy_share_while_locked"] is False  # a policy write is refused under the lock
    assert answers["release"] is True and answers["share_0.1"] is True and answers["share_0.5"] is False
    assert [i for i, s in enumerate(phases["after_release"], 1) if s > 0] == [30, 31, 32, 33]
    spectower = result["spectower"]
    assert spectower["explore"].pop("window") == {"active": False, "phase": None, "cycle": 0}
    assert spectower["explore"] == {"share": 0.1, "period": 10, "run": 4, "batches": 12, "active": True}
    assert spectower["owner"] == "policy"  # the unmarked share write took no lock
    bins = spectower["counters"]["bins"]
    b4, b16 = bins.index(4), bins.index(16)
    drafted, gated = spectower["counters"]["drafted"]["steps"], spectower["counters"]["gated"]["steps"]
    # each run's first batch and the first batch after it are settling, in no bin: bin 4 drafted 96 - 1
    # below and 4 - 1 after the release; gated 4 - 1 below, 100 held, 36 - 1 after the release
    assert (drafted[b4], gated[b4]) == (95 + 3, 3 + 100 + 35)
    assert (drafted[b16], gated[b16]) == (3, 95)
    assert spectower["counters"]["settling"]["steps"] == 6
    # each run is two step changes in SGLang's override log (3 -> 0 -> 3 in bin 4, 0 -> 3 -> 0 in bin 16),
    # none of them a gate switch; the gate's close at 16 is the fifth
    assert result["log_growth"] == result["step_changes"] == 5 and result["explore_changes"] == 4


def test_the_launch_share_comes_from_the_environment_and_a_bad_one_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spectower.plugin.gate import _env_explore_share

    monkeypatch.delenv("SPECTOWER_EXPLORE_SHARE", raising=False)
    assert _env_explore_share() == 0.02
    monkeypatch.setenv("SPECTOWER_EXPLORE_SHARE", "0")
    assert _env_explore_share() == 0.0
    monkeypatch.setenv("SPECTOWER_EXPLORE_SHARE", "0.05")
    assert _env_explore_share() == 0.05
    for bad in ("0.5", "-1", "lots", "nan"):
        monkeypatch.setenv("SPECTOWER_EXPLORE_SHARE", bad)
        assert _env_explore_share() == 0.02
        assert f"ignoring SPECTOWER_EXPLORE_SHARE={bad!r}" in caplog.text
