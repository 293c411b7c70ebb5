"""The benchmark scripts still run against the code they measure: a script whose stand-in no longer fits
the interface it replaces (a hook raising inside the timed loop) prints figures of the wrong thing."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_counter_overhead_runs_every_row_without_an_error() -> None:
    script = REPO_ROOT / "benchmarks" / "counter_overhead.py"
    done = subprocess.run([sys.executable, str(script), "--steps", "2000"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Traceback" not in output and "error" not in output, output
    for row in ("counters begin+end (plugin)", "counters record (simulator)", "plugin hooks with counters",
                "plugin hooks without counters", "counting added to the hooks"):  # fmt: skip
        assert row in done.stdout, output


def test_policy_bench_scores_against_the_best_achievable_and_prints_both_baselines() -> None:
    """learn / the best achievable (per tick the better of the exploring oracle and never drafting) is never
    above learn / the oracle; both are printed, and never drafting beats the oracle on GLM-5's early
    crossover under some trace."""
    script = REPO_ROOT / "benchmarks" / "policy_bench.py"
    # quieting alone (no thin share): the harness's warm start sits at the profile's own crossover, so a thin
    # share only costs there (its windows pay off against the plugin's: test_learn_thin_share.py)
    args = ["--profile", "glm5-nvfp4-8x-rtx-pro-6000", "--seeds", "1", "--duration", "600", "--json",
            "--thin-share", "0.02"]  # fmt: skip
    done = subprocess.run([sys.executable, str(script), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "achievable, per tick the better of the oracle and never drafting" in done.stdout
    assert "warm: learn started at the crossover, as from a stored sweep" in done.stdout
    cells = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(cells) == 5
    assert all(c["learn_min"] <= c["learn_mean"] <= c["learn_oracle_mean"] + 1e-12 for c in cells)
    assert any(c["never_vs_oracle"] > 1.0 for c in cells)
    # learn quiets exploring where its estimate is decisive: its server pays less for it than the oracle
    assert sum(c["learn_explore_cost"] for c in cells) < 0.9 * sum(c["explore_cost"] for c in cells)
    # ten minutes: a warm start (the crossover, as from a stored sweep) skips learn's cold first minutes
    assert sum(c["warm_mean"] for c in cells) > sum(c["learn_mean"] for c in cells) + 0.01


def test_fleet_pooling_runs_every_arm_and_its_pool_reaches_the_policies() -> None:
    """The pooled arms decide on other replicas' counters: a replica of another profile in the pool moves
    the others' result (were the pool not reaching the policies, both odd arms would print the same)."""
    script = REPO_ROOT / "benchmarks" / "fleet_pooling.py"
    args = ["--replicas", "2", "--hours", "0.25", "--seeds", "1"]
    done = subprocess.run([sys.executable, str(script), *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    rows = {line[:20].strip(): line[20:].split() for line in lines}
    assert set(rows) == {"independent", "pooled", "odd, independent", "odd, pooled"}, done.stdout
    assert rows["odd, independent"][0] != rows["odd, pooled"][0]


def test_counter_read_bench_prints_both_reads_as_each_plugin_stores_its_rows() -> None:
    """``counter_read_bench.py`` fills a window as plugin 0.4.13 stores it, as 0.4.14 does (the prefilled
    rows: half as many again) and as 0.4.15 does (the slots rows, and one part's two mix rows every 30
    intervals) and times both counter reads over each; a bad size is one line naming the option."""
    script = REPO_ROOT / "benchmarks" / "counter_read_bench.py"
    done = subprocess.run([sys.executable, str(script), "--intervals", "30", "--repeats", "1"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    lines = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [(row[0], row[1], row[2]) for row in lines] == [("30", "480", "0.4.13"), ("30", "720", "0.4.14"),
                                                            ("30", "962", "0.4.15")]  # fmt: skip
    assert all(line.count("ms") == 2 for line in done.stdout.splitlines()[1:])
    bad = subprocess.run([sys.executable, str(script), "--intervals", "1"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip() == "--intervals: each between 2 and 100000, got '1'"


def test_learn_decision_cost_times_both_arms() -> None:
    script = REPO_ROOT / "benchmarks" / "learn_decision_cost.py"
    done = subprocess.run([sys.executable, str(script), "--minutes", "2", "--history-minutes", "2"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [row[0] for row in rows] == ["without", "with"], done.stdout
    assert "with 24 stored intervals" in done.stdout, done.stdout
    assert all(row[-2] == "(8" for row in rows), done.stdout  # a decision per 15-s sample over 2 minutes


def test_thin_share_whatif_prints_a_row_per_start_and_share_and_refuses_a_bad_list() -> None:
    script = REPO_ROOT / "benchmarks" / "thin_share_whatif.py"
    done = subprocess.run([sys.executable, str(script), "--starts", "48", "--thin-shares", "0.2"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("48 ")]
    assert len(rows) == 1 and rows[0][1] == "0.2" and float(rows[0][2]) > 0, done.stdout
    bad = subprocess.run([sys.executable, str(script), "--thin-shares", "lots"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [
        "error: --thin-shares: expected numbers separated by commas, got 'lots'"], bad.stderr
