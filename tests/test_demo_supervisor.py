"""console/demo/supervisor.py: the demo's children, real processes of this interpreter. A child that should
run and exits is dead; a one-shot job's exit (the demo's sweep) is not."""

from __future__ import annotations

import sys
from pathlib import Path

from spectower.console.demo.run import DemoConfig, _sweep_ended, build_children
from spectower.console.demo.supervisor import Child, Supervisor


def _child(tmp_path: Path, name: str, code: str, *, ends: bool = False) -> Child:
    return Child(name=name, argv=[sys.executable, "-c", code], env={}, log_path=tmp_path / f"{name}.log",
                 ends=ends)  # fmt: skip


def test_a_one_shot_jobs_exit_is_no_death_and_a_servers_is(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path, tmp_path / "pids.json")
    job = sup.start(_child(tmp_path, "sweep", "print('saved')", ends=True))
    server = sup.start(_child(tmp_path, "sim", "import time; time.sleep(60)"))
    try:
        assert job.proc is not None and job.proc.wait(timeout=60) == 0
        assert sup.first_dead() is None and server.running()
        sup.stop(["sim"], grace_s=10)  # a server that is not running is dead
        assert sup.first_dead() is server
        sup.retire(["sim"], grace_s=10)  # unless it was retired: its work is done
        assert sup.first_dead() is None
    finally:
        sup.stop(None, grace_s=5)


def test_the_demos_sweep_measures_its_own_server_and_says_how_it_ended(tmp_path: Path) -> None:
    """The sweep measures the fourth server, outside the fleet the collector, policy and load use, and saves
    its run under the demo's tag; a failed one is a note with its log's tail."""
    config = DemoConfig(console_port=8601, db_path=tmp_path / "d" / "x.db")
    children = {c.name: c for c in build_children(config)}
    sweep = children["sweep"]
    assert sweep.ends and not any(c.ends for name, c in children.items() if name != "sweep")
    assert sweep.argv[sweep.argv.index("--server") + 1] == config.bench_url
    assert config.bench_url not in config.sim_urls
    for name in ("collect", "policy", "router"):
        assert config.bench_url not in " ".join(children[name].argv), name
    assert {"--save", "--tag", "demo sweep"} <= set(sweep.argv) and "SPECTOWER_ADMIN_KEY_FILE" in sweep.env
    sup = Supervisor(tmp_path, tmp_path / "pids.json")
    refused = "import sys; print('error: --server: no answer'); sys.exit(1)"
    failed = sup.start(_child(tmp_path, "sweep", refused, ends=True))
    assert failed.proc is not None and failed.proc.wait(timeout=60) == 1
    said = _sweep_ended(failed, config)
    assert said.startswith("note: the demo's benchmark sweep") and "(code 1)" in said
    assert str(failed.log_path) in said and "error: --server: no answer" in said
