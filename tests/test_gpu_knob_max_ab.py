"""benchmarks/gpu/knob_max_ab.py: the knob at max against an un-gated server, measured with the sweep's own
client pieces. Against two simulators of the measured H200 profile (speculation about 2x a plain server at
C=1): with the knob at max the two serve alike; with the knob at 0 the "gated" one serves about half."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.simulator_process import scaled_profile
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "knob_max_ab.py"
PROFILE = "h200-8b-pair-triton"
KEY = "knob-ab-admin"


def _set_knob(url: str, value: int) -> None:
    answer = httpx.post(f"{url}/set_internal_state", json={"server_args": {"spectower_spec_max_bs": value}},
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=10)  # fmt: skip
    assert answer.status_code == 200 and all(answer.json()), answer.text


def _ab(gated: str, ungated: str, out: Path) -> dict[str, Any]:
    args = ["--gated", gated, "--ungated", ungated, "--concurrency", "1", "--rounds", "2", "--seconds", "2",
            "--output-len", "32", "--out", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "knob at max / un-gated" in done.stdout and "paired over 2 rounds" in done.stdout
    result: dict[str, Any] = json.loads(out.read_text())
    return result


@pytest.mark.integration
def test_the_ratio_is_near_one_at_max_and_near_the_off_curve_at_zero(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    # The measured profile at a third of its rates and without noise: the two simulators and the client then
    # need little CPU, so a loaded machine (four test workers on two cores) cannot squeeze the ratio towards
    # 1 by starving the faster server (the knob at 0 once read 0.71 instead of about 0.5).
    profile = scaled_profile(PROFILE, 1 / 3, tmp_path, noise_cv=0.0)
    gated = simulator_factory(profile=profile, admin_key=KEY)
    ungated = simulator_factory(profile=profile, admin_key=KEY)
    _set_knob(gated.base_url, 64)
    at_max = _ab(gated.base_url, ungated.base_url, tmp_path / "max.json")["levels"][0]
    _set_knob(gated.base_url, 0)
    at_zero = _ab(gated.base_url, ungated.base_url, tmp_path / "zero.json")["levels"][0]
    assert at_max["concurrency"] == 1 and len(at_max["gated_tok_s"]) == len(at_max["ungated_tok_s"]) > 0
    assert at_max["lo"] <= at_max["ratio"] <= at_max["hi"]
    # each round's two halves kept, and the paired figure over them
    assert [len(at_max["rounds_tok_s"][name]) for name in ("gated", "ungated")] == [2, 2]
    assert len(at_max["round_ratios"]) == 2
    assert at_max["paired_lo"] <= at_max["paired_ratio"] <= at_max["paired_hi"]
    assert 0.75 < at_max["paired_ratio"] < 1.33, at_max
    # the profile's off/on at C=1 is about 0.5: margins of well over 1.5x either way
    assert 0.75 < at_max["ratio"] < 1.33, at_max
    assert at_zero["ratio"] < 0.7, at_zero


def test_bad_levels_get_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--gated", "http://127.0.0.1:9", "--ungated",
                           "http://127.0.0.1:9", "--concurrency", "1,x"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode != 0
    want = "--concurrency: 'x' is not an integer (expected e.g. 1,2,4,8)"  # bench sweep's own parser
    assert done.stderr.strip().splitlines() == [want]


class _RecordingTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport to a real simulator, keeping each request's body (the prompts sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[Any] = []
        self.lengths: list[tuple[tuple[int, ...], int]] = []  # (prompt, max_new_tokens)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        if request.url.path == "/generate":
            body = json.loads(request.content)
            self.prompts.append(body["input_ids"])
            self.lengths.append((tuple(body["input_ids"]), body["sampling_params"]["max_new_tokens"]))
        return await super().handle_async_request(request)


def _module() -> Any:
    """The script as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("knob_max_ab", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded_pair(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> tuple[Any, dict[str, str], dict[str, _RecordingTransport]]:
    """The script as a module, two simulators of the profile, and a recording transport for each."""
    module = _module()
    profile = scaled_profile(PROFILE, 1 / 3, tmp_path, noise_cv=0.0)
    urls = {"gated": simulator_factory(profile=profile).base_url,
            "ungated": simulator_factory(profile=profile).base_url}  # fmt: skip
    return module, urls, {name: _RecordingTransport() for name in urls}


@pytest.mark.integration
def test_each_round_sends_both_servers_the_same_prompts(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    # With the constructed pair a prompt's acceptance is its own: different prompts per server would add
    # their acceptance's spread to the ratio (C=1 windows on the H200 read 245-448 tok/s).
    import asyncio

    module, urls, transports = _recorded_pair(simulator_factory, tmp_path)
    asyncio.run(module.measure(urls, [2], 2, 1.0, 16, 32, transports=transports))
    gated, ungated = transports["gated"].prompts, transports["ungated"].prompts
    assert len(gated) >= 4 and len(ungated) >= 4
    shared = min(len(gated), len(ungated))
    # the loops stop on the clock, so in a round one server may start a request or two more than the other;
    # the rest are the same prompts (before pairing, the second server's prompts followed the first's: none)
    overlap = len(set(map(tuple, gated)) & set(map(tuple, ungated)))
    assert overlap >= 0.8 * shared, (overlap, shared)


def _summarize(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--summarize", *map(str, paths)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def _saved(path: Path, rounds: int, gated: list[float], ungated: list[float], keep_rounds: bool) -> Path:
    level: dict[str, Any] = {"concurrency": 64, "ratio": 0.0, "lo": 0.0, "hi": 0.0, "gated_tok_s": gated,
                             "ungated_tok_s": ungated}  # fmt: skip
    if keep_rounds:
        width = len(gated) // rounds
        level["rounds_tok_s"] = {name: [sum(w[i : i + width]) / width for i in range(0, len(w), width)]
                                 for name, w in (("gated", gated), ("ungated", ungated))}  # fmt: skip
    path.write_text(json.dumps({"rounds": rounds, "levels": [level]}))
    return path


def test_summarize_pools_the_rounds_of_old_and_new_saved_runs(tmp_path: Path) -> None:
    # An older run (windows only, 2 a round here) and a newer one (rounds kept) pool into 5 rounds; the
    # windows pool into 7. The newer run's third round is one where only the un-gated server ran 1.5x.
    old = _saved(tmp_path / "old.json", 2, [100.0, 100.0, 98.0, 98.0], [100.0, 100.0, 100.0, 100.0], False)
    new = _saved(tmp_path / "new.json", 3, [100.0] * 3, [100.0, 100.0, 150.0], True)
    done = _summarize(old, new)
    assert done.returncode == 0, done.stderr
    paired = math.exp((math.log(0.98) + math.log(100 / 150)) / 5)  # the rounds' geometric mean
    windows = (100 * 5 + 98 * 2) / (100 * 6 + 150)  # the ratio of the windows' means
    line = done.stdout.strip()
    assert line.startswith(f"C=64: knob at max / un-gated {windows:.3f} (")
    assert f"over windows; {paired:.3f} (" in line and "paired over 5 rounds, rounds 0.667-1.000" in line


def test_summarize_names_the_file_and_what_was_wrong_in_one_line(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"points": []}))
    uneven = _saved(tmp_path / "uneven.json", 3, [1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], False)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    uneven_why = "not a knob_max_ab.py result (gated_tok_s: 4 windows do not split into 3 rounds)"
    for path, why in ((sweep, "not a knob_max_ab.py result (no 'rounds' field)"), (uneven, uneven_why),
                      (broken, "not valid JSON"), (tmp_path / "missing.json", "cannot read")):  # fmt: skip
        done = _summarize(path)
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"--summarize: {path}: {why}"), lines


def test_a_level_with_nothing_to_divide_says_so_and_the_others_still_count(tmp_path: Path) -> None:
    # a level whose every round measured nothing on one server (its windows empty) used to raise after
    # the whole run, so --out was never written; now that level says why and the rest are figures
    saved = {"rounds": 1, "levels": [
        {"concurrency": 1, "gated_tok_s": [], "ungated_tok_s": [5.0], "rounds_tok_s": {"gated": [0.0],
                                                                                        "ungated": [5.0]}},
        {"concurrency": 2, "gated_tok_s": [10.0, 10.0], "ungated_tok_s": [10.0, 10.0]}]}  # fmt: skip
    path = tmp_path / "one-empty.json"
    path.write_text(json.dumps(saved))
    done = _summarize(path)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first == "C=1: no figure (ratio needs at least one window in each mode)"
    assert second.startswith("C=2: knob at max / un-gated 1.000 (")


@pytest.mark.integration
def test_mixed_lengths_give_both_servers_the_same_length_per_prompt(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    """``--output-len 8-40``: requests of many lengths (same-length requests finish in waves), each prompt the
    same length on both servers of a round."""
    import asyncio

    from spectower.collectors.bench.lengths import OutputLengths

    module, urls, transports = _recorded_pair(simulator_factory, tmp_path)
    result = asyncio.run(module.measure(urls, [4], 1, 1.5, OutputLengths(8, 40), 32, transports=transports))
    assert result["output_len"] == "8-40"
    gated, ungated = dict(transports["gated"].lengths), dict(transports["ungated"].lengths)
    assert len({n for n in gated.values()}) >= 4 and all(8 <= n <= 40 for n in gated.values())
    both = set(gated) & set(ungated)
    assert both and all(gated[p] == ungated[p] for p in both)


@pytest.mark.integration
def test_a_run_cut_short_keeps_each_level_it_finished(
    simulator_factory: Callable[..., Any], tmp_path: Path
) -> None:
    # A device call ends at its time limit; the run's --out used to be written only after the last level, so
    # a cut run kept nothing. Now it is rewritten after each level: killed while C=2 runs, C=1 is saved.
    profile = scaled_profile(PROFILE, 1 / 3, tmp_path, noise_cv=0.0)
    urls = [simulator_factory(profile=profile).base_url for _ in range(2)]
    out = tmp_path / "cut.json"
    args = ["--gated", urls[0], "--ungated", urls[1], "--concurrency", "1,2", "--rounds", "1",
            "--seconds", "2", "--output-len", "8-32", "--out", str(out)]  # fmt: skip
    run = subprocess.Popen([sys.executable, "-u", str(SCRIPT), *args], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        for line in run.stdout:  # the level's own line comes once its figures are computed and saved
            if line.startswith("C=1: "):
                break
        else:
            pytest.fail(f"the run ended without C=1's line (exit {run.wait()})")
        saved = json.loads(out.read_text())
        assert run.poll() is None  # C=2 still running
    finally:
        run.kill()
        run.wait()
    assert [level["concurrency"] for level in saved["levels"]] == [1]
    first = saved["levels"][0]
    assert len(first["gated_tok_s"]) == len(first["ungated_tok_s"]) > 0 and "ratio" in first
    assert saved["rounds"] == 1 and saved["output_len"] == "8-32"


@pytest.mark.integration
def test_each_gated_round_says_what_the_servers_exploring_windows_did_there(
    simulator_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A policy's 0 (no lock: the gate explores in windows among the batches it gates) on a simulator with a
    short window cycle: each gated round's line and the saved level carry the windows its run held (the
    difference of two /server_info reads), so a round that reads low can be told from one a window fell in
    (the H200's three low rounds at 32, 2026-12-07)."""
    import asyncio

    from spectower.plugin import knob_contract

    monkeypatch.setenv("SPECTOWER_EXPLORE_CYCLE", "64")
    profile = scaled_profile(PROFILE, 1 / 3, tmp_path, noise_cv=0.0)
    gated = simulator_factory(profile=profile, admin_key=KEY)
    ungated = simulator_factory(profile=profile, admin_key=KEY)
    args = knob_contract.KnobRequest(writer=knob_contract.WRITER_POLICY, value=0).to_server_args()
    answer = httpx.post(f"{gated.base_url}/set_internal_state", json={"server_args": args},
                        headers={"Authorization": f"Bearer {KEY}"}, timeout=10)  # fmt: skip
    assert answer.status_code == 200 and all(answer.json()), answer.text
    module = _module()
    urls = {"gated": gated.base_url, "ungated": ungated.base_url}
    ticks = iter(range(1796655600, 1796655700, 10))  # 2026-12-07 15:00:00 UTC, 10 s a read
    result = asyncio.run(module.measure(urls, [4], 2, 2.0, 16, 32, clock=lambda: float(next(ticks))))
    (level,) = result["levels"]
    # each round's runs in order, gated first in the first round and second in the next (alternated)
    times = level["round_times"]
    assert times["gated"] == [[1796655600.0, 1796655610.0], [1796655660.0, 1796655670.0]], times
    assert times["ungated"] == [[1796655620.0, 1796655630.0], [1796655640.0, 1796655650.0]], times
    windows = level["gated_windows"]
    assert len(windows) == 2 and all(w is not None for w in windows), windows
    assert sum(w["windows"] for w in windows) >= 1 and sum(w["explore"] for w in windows) >= 1, windows
    assert all(w["cold"] + w["warm"] + w["explore"] > 0 for w in windows), windows
    printed = capsys.readouterr().out
    assert "C=4 round 1 gated: " in printed and " exploring parts, " in printed, printed
    assert "[15:00:00-15:00:10 UTC] (windows: " in printed and "[15:00:20-15:00:30 UTC]" in printed, printed
    assert "ungated" in printed and printed.count("(windows: ") == 2, printed
