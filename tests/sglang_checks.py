"""The checks against SGLang's own classes, run in one batch per SGLang version and pytest session.

A check is a script (tests/sglang_plugin_checks/check_*.py, tests/gpu_model_checks/check_pair.py) that runs
INSIDE the SGLang venv (``SPECTOWER_SGLANG_PYTHON``, from tests/sglang_env.sh) and prints one JSON object on
its last stdout line; the tests assert on that object. Each used to start its own python, and importing
SGLang cost ~10 s apiece (27 of them). Now ``tests/sglang_plugin_checks/run_all.py`` imports SGLang once per
version and forks a child per check from that state: a copy in which no plugin was ever loaded, so each
check still sees what a fresh ``python CHECK.py`` sees (entry-point discovery, hooks applied by its own
``load_plugins()``, the ``SPECTOWER_*`` settings read when spectower is first imported) and whatever it
patches dies with it (run_all.py says how).

``SglangChecks.result(version, name)`` runs the whole batch of that version the first time any test asks,
then answers from the results file. Under pytest-xdist the batch runs once per session, not once per
worker: the results file lives in the session's shared temporary folder and an exclusive ``flock`` on a
lock file beside it makes a second worker wait for the first one's results instead of running them again.
``./tests/run`` also passes ``--dist loadgroup`` and the tests carry ``xdist_group("sglang-<version>")``, so
each version's tests go to one worker as one unit, first (the largest units go first): the other worker
never waits, and the two batches run side by side at the start.

A failed check fails its tests with the check's own output, as a separate process's failure did.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.namespace_tree import link_tree, write_dist_info

VERSIONS = ("0.5.23", "0.5.17")
REQUIRE_ENV = "SPECTOWER_REQUIRE_SGLANG"
CHECKS = REPO_ROOT / "tests" / "sglang_plugin_checks"
RUNNER = CHECKS / "run_all.py"
PAIR_CHECK = REPO_ROOT / "tests" / "gpu_model_checks" / "check_pair.py"
STEPS = 3  # must match _harness.N_STEPS: the working step of the generated config
MAX_RUNNING_REQUESTS = 48
OVERRIDE_BATCHES = 4000
PAIR_SHARE = {"0.5.23": 0.5, "0.5.17": 0.3}  # fixed-point share of the constructed pair checked per version
PAIR_MISS_SHARE = {"0.5.23": 0.2, "0.5.17": 0.0}  # and of the route the draft never guesses (0.5.23's check)
CHECK_TIMEOUT_S = 300  # one check, forked from the imported state (about a second)
RUNNER_TIMEOUT_S = 840  # the import (10-100 s on a loaded 2-core machine) and every check of one version
# Imported once, before the first fork: what the checks import (a module a version lacks is left out; the
# check that imports it reports the error). Never spectower: the checks load it through load_plugins().
PRELOAD = (
    "sglang.version",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.scheduler_components.internal_state",
    "sglang.srt.managers.io_struct",
    "sglang.srt.managers.schedule_batch",
    "sglang.srt.plugins",
    "sglang.srt.plugins.hook_registry",
    "sglang.srt.runtime_context",
    "sglang.srt.speculative.adaptive_spec_params",
    "sglang.srt.speculative.adaptive_runtime_state",
    "sglang.srt.speculative.eagle_worker_v2",
    "sglang.srt.speculative.eagle_info",
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner",
    "sglang.srt.layers.attention.triton_backend",
    "sglang.srt.model_executor.forward_batch_info",
)


@dataclass(frozen=True)
class Check:
    """One run of a check script: ``script ARGS`` with ``env`` applied (None unsets a variable). In ``args``,
    ``{config}`` is the adaptive config `sglang-config --steps 3 --max-running-requests 48` writes (bands 1,
    8, 32), ``{nozero}`` one whose band 1 lacks step 0, ``{models}`` a folder for the constructed pair."""

    name: str
    script: Path
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str | None], ...] = ()


def _plugin_check(name: str, script: str, *args: str, **env: str | None) -> Check:
    return Check(name, CHECKS / f"{script}.py", args, tuple(env.items()))


# The checks run with exploration off (SPECTOWER_EXPLORE_SHARE=0: they assert exact gating, EMA and
# override-log figures) except the exploration check and the override-log run that measures its cost.
BOTH_VERSIONS = (
    _plugin_check("load_plugins", "check_load_plugins"),
    _plugin_check("knob", "check_knob", "{config}"),
    _plugin_check("contract", "check_contract", "{config}"),
    _plugin_check("gating", "check_gating", "{config}"),
    _plugin_check("ema", "check_ema", "{config}", SPECTOWER_GATE_MIN_DWELL="0"),
    _plugin_check("counters", "check_counters", "{config}"),
    # no windows (SPECTOWER_EXPLORE_CYCLE=0): after the release the knob is a policy's 0, which explores
    # at once only without windows; the windows inside SGLang: the gated_decode check
    _plugin_check("explore", "check_explore", "{config}", SPECTOWER_EXPLORE_SHARE=None,
                  SPECTOWER_EXPLORE_CYCLE="0"),
    # a 16-batch exploration cycle: the check walks one window of a policy's 0 (cold, warm, explore, cold)
    _plugin_check("gated_decode", "check_gated_decode", "{config}", SPECTOWER_EXPLORE_CYCLE="16"),
    # a window yields to a full server (plugin 0.4.12): a 100-batch cycle at the default share, an exploring
    # part of 4 batches (a share above the default would shorten the cold part: plugin 0.4.16)
    _plugin_check("window_yield", "check_window_yield", "{config}", SPECTOWER_EXPLORE_SHARE=None,
                  SPECTOWER_EXPLORE_CYCLE="100"),
    # every 2nd remembered resolve also runs SGLang's host copy (the default samples 1 in 256)
    _plugin_check("seq_lens", "check_seq_lens", "{config}", SPECTOWER_SEQ_LENS_VERIFY_EVERY="2"),
    _plugin_check("kept_tokens", "check_kept_tokens", "{config}"),
    _plugin_check("prefilled", "check_prefilled", "{config}"),
    # an exploring part's request mix (plugin 0.4.15): a 100-batch cycle at the default share, an exploring
    # part of 4 batches
    _plugin_check("part_mix", "check_part_mix", "{config}", SPECTOWER_EXPLORE_SHARE=None,
                  SPECTOWER_EXPLORE_CYCLE="100"),
    # no watch thread: its wakes on the real clock would sample the stand-ins' fake one at random moments
    _plugin_check("loop_stalls", "check_loop_stalls", "{config}", SPECTOWER_STALL_S=None,
                  SPECTOWER_STALL_STACKS="0"),
)
OVERRIDE_LOG_ARGS = ("{config}", str(OVERRIDE_BATCHES), "alternate", "noisy")
ONLY_0_5_23 = (
    _plugin_check("refusal:no-adaptive", "check_refusal", "no-adaptive", "{config}"),
    _plugin_check("refusal:no-zero-band", "check_refusal", "no-zero-band", "{nozero}"),
    _plugin_check("refusal:missing-target", "check_refusal", "missing-target", "{config}"),
    _plugin_check("override_log:hysteresis", "check_override_log", *OVERRIDE_LOG_ARGS),
    _plugin_check(
        "override_log:none",
        "check_override_log",
        *OVERRIDE_LOG_ARGS,
        SPECTOWER_GATE_MARGIN="0",
        SPECTOWER_GATE_MIN_DWELL="0",
    ),
    # hysteresis and the default 2 % exploration
    _plugin_check(
        # 1024-batch windows: 4000 batches hold a few, as a day holds many of the default 8192
        "override_log:explore", "check_override_log", *OVERRIDE_LOG_ARGS, SPECTOWER_EXPLORE_SHARE=None,
        SPECTOWER_EXPLORE_CYCLE="1024",
    ),
    _plugin_check("gated_decode:off", "check_gated_decode", SPECTOWER_GATED_DECODE="0"),
    _plugin_check("seq_lens:off", "check_seq_lens", "{config}", SPECTOWER_SEQ_LENS_MIRROR="0"),
)


def checks_of(version: str) -> tuple[Check, ...]:
    pair = Check("pair", PAIR_CHECK, (str(REPO_ROOT), "{models}", str(PAIR_SHARE[version]),
                                      str(PAIR_MISS_SHARE[version])))
    return (*BOTH_VERSIONS, *(ONLY_0_5_23 if version == "0.5.23" else ()), pair)


def group(version: str) -> pytest.MarkDecorator:
    """The xdist group of a version's tests: one worker runs them all against one batch."""
    return pytest.mark.xdist_group(f"sglang-{version}")


VERSION_PARAMS = [pytest.param(version, marks=group(version)) for version in VERSIONS]


def _unavailable(message: str) -> None:
    """Skip, saying why; under SPECTOWER_REQUIRE_SGLANG=1 (tests/run built the venv) FAIL instead."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} and {REQUIRE_ENV}=1")
    pytest.skip(message)


def sglang_python() -> str:
    """The SGLang venv's python: skips (or fails, see _unavailable) without one."""
    python = os.environ.get("SPECTOWER_SGLANG_PYTHON", "")
    if not python:
        _unavailable("SPECTOWER_SGLANG_PYTHON is not set (tests/run sets it from tests/sglang_env.sh)")
    if not Path(python).is_file():
        pytest.fail(f"SPECTOWER_SGLANG_PYTHON={python} does not exist")
    return python


def overlay_of(python: str, version: str) -> Path:
    """Where tests/sglang_env.sh installs a version other than the venv's own 0.5.23 (first on PYTHONPATH)."""
    return Path(python).parent.parent / f"overlay-sglang-{version}"


def require_version(python: str, version: str) -> str:
    if version != "0.5.23" and not overlay_of(python, version).is_dir():
        _unavailable(f"no SGLang {version} overlay at {overlay_of(python, version)} (tests/sglang_env.sh)")
    return version


def check_environment(python: str, version: str, site: Path) -> dict[str, str]:
    """The environment a check starts from: no SGLANG_* / gate / exploration / seq-lens settings of the
    caller's, the version's overlay (if any) and the plugin site on PYTHONPATH, exploration off."""
    caller_settings = ("SGLANG_", "SPECTOWER_GATE", "SPECTOWER_EXPLORE", "SPECTOWER_SEQ_LENS")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(caller_settings)}
    first = [] if version == "0.5.23" else [str(overlay_of(python, version))]
    environ["PYTHONPATH"] = os.pathsep.join([*first, str(site)])
    environ["SPECTOWER_EXPLORE_SHARE"] = "0"
    return environ


def write_inputs(folder: Path) -> dict[str, str]:
    """The files the checks read: the plugin site (spectower as links into this checkout, laid out as
    installed, and a .dist-info with the entry points pyproject.toml declares: SGLang's load_plugins()
    discovers the checkout under test), the configs, a folder for the constructed pair."""
    from spectower.control.sglang_config import build_adaptive_config, write_config

    site = link_tree(folder / "plugin-site")
    write_dist_info(site)
    config = write_config(folder / "adaptive.json", build_adaptive_config(STEPS, MAX_RUNNING_REQUESTS))
    nozero = write_config(
        folder / "nozero.json", {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 3]}}
    )
    models = folder / "pair" / "models"
    models.parent.mkdir(exist_ok=True)
    return {"site": str(site), "config": str(config), "nozero": str(nozero), "models": str(models)}


def run_batch(python: str, version: str, folder: Path) -> dict[str, Any]:
    """Every check of ``version`` in one run_all.py: ``{"checks": {name: {rc, stdout, stderr, seconds}}}``,
    or ``{"error": ...}`` when the batch itself failed."""
    inputs = write_inputs(folder)
    checks = []
    for check in checks_of(version):
        cwd = inputs["site"] if check.script.parent == CHECKS else str(Path(inputs["models"]).parent)
        checks.append({"id": check.name, "script": str(check.script),
                       "args": [arg.format(**inputs) for arg in check.args], "env": dict(check.env),
                       "cwd": cwd, "timeout_s": CHECK_TIMEOUT_S})  # fmt: skip
    plan, results, log = folder / "plan.json", folder / "results.json", folder / "run_all.log"
    plan.write_text(json.dumps({"preload": list(PRELOAD), "checks": checks}, indent=1))
    env = check_environment(python, version, Path(inputs["site"]))
    with log.open("wb") as out:
        try:
            proc = subprocess.run([python, str(RUNNER), str(plan), str(results)], stdout=out,
                                  stderr=subprocess.STDOUT, env=env, cwd=inputs["site"],
                                  timeout=RUNNER_TIMEOUT_S)  # fmt: skip
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            rc = f"timed out after {RUNNER_TIMEOUT_S} s"
    if rc == 0 and results.is_file():
        batch: dict[str, Any] = json.loads(results.read_text())
        return batch
    text = log.read_text(errors="replace")
    return {"error": f"run_all.py for SGLang {version} failed ({rc}):\n{text[-8000:]}", "checks": {}}


class SglangChecks:
    """The session's check results, one batch per version (see the module's docstring)."""

    def __init__(self, python: str, shared: Path) -> None:
        self.python = python
        self.shared = shared
        self._batches: dict[str, dict[str, Any]] = {}

    def batch(self, version: str) -> dict[str, Any]:
        if version not in self._batches:
            require_version(self.python, version)
            folder = self.shared / f"sglang-{version}"
            folder.mkdir(exist_ok=True)
            cached = folder / "batch.json"
            with (self.shared / f"sglang-{version}.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released on close; another worker's batch: wait for it
                if not cached.is_file():
                    tmp = cached.with_suffix(".tmp")
                    tmp.write_text(json.dumps(run_batch(self.python, version, folder)))
                    tmp.replace(cached)
                self._batches[version] = json.loads(cached.read_text())
        return self._batches[version]

    def result(self, version: str, name: str) -> dict[str, Any]:
        """What check ``name`` printed against SGLang ``version``; fails the test with the check's output
        when it failed or printed no JSON."""
        batch = self.batch(version)
        run = batch["checks"].get(name)
        if run is None:
            pytest.fail(batch.get("error") or f"no check {name!r} for SGLang {version}")
        lines = [line for line in run["stdout"].splitlines() if line.startswith("{")]
        if run["rc"] != 0 or not lines:
            pytest.fail(f"{name} failed (rc {run['rc']}) against SGLang {version}:\n{run['stdout'][-3000:]}\n"
                        f"{run['stderr'][-6000:]}")  # fmt: skip
        result: dict[str, Any] = json.loads(lines[-1])
        assert result.get("plugin_loaded", True), f"{name}: load_plugins() did not load the plugin"
        assert result["sglang_version"] == version, f"{name} ran against SGLang {result['sglang_version']}"
        return result


def shared_folder(factory: pytest.TempPathFactory) -> Path:
    """The session's temporary folder every xdist worker sees (the workers' own are inside it)."""
    base = factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sglang-checks"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def sglang_checks(tmp_path_factory: pytest.TempPathFactory) -> SglangChecks:
    return SglangChecks(sglang_python(), shared_folder(tmp_path_factory))


def checked_fixture(name: str) -> Any:
    """A test file's ``checked`` fixture: what check ``name`` printed, once per SGLang version. A test file
    takes it as ``checked = checked_fixture("name")`` beside the ``sglang_checks`` fixture it reads from."""

    @pytest.fixture(params=VERSION_PARAMS, name="checked")
    def checked(request: pytest.FixtureRequest, sglang_checks: SglangChecks) -> dict[str, Any]:
        return sglang_checks.result(request.param, name)

    return checked
