"""The README's "Flipping speculation during an incident" works as written for a new user on `spectower demo`.

The demo runs from a fresh folder with its own database and the `learn` policy active. The README block's
commands run exactly as printed (the first one answered "y" at its prompt, through a terminal), with no
--db: while the demo runs, a command without --db uses the demo's database (storage.locate), so the
operator's audit lands where the console reads it, beside the policy's, and each command that writes says
so. The flip holds because the lock is the server's. Speculation stays off until `release`, then the policy
acts again. Every wait polls the state it waits for (the server's /server_info, the policy's log). A steady
load of about 24 clients beside the demo's own (above glm5's crossover of ~15) gives the learn policy both
modes' evidence at once, so its first write comes in about a minute instead of at the compressed day's
plateau.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pty
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.simulator_process import steady_load
from tests.conftest import REPO_ROOT, SPECTOWER_CLI, db_rows, free_port

# The demo binds the simulator to its default port (30000) when it is free: two demos started at once
# race for it between the check and the bind, so the tests that start one run on one worker, in turn.
pytestmark = pytest.mark.xdist_group("demo-default-ports")

README = REPO_ROOT / "README.md"
README_URL = "http://127.0.0.1:30000"
UP_TIMEOUT_S = 240.0
POLICY_TIMEOUT_S = 240.0  # the learn policy's first (and, after release, next) write to the knob
# Observed by polling the server after the policy reported its pause: longer than one of the demo's 5 s
# policy intervals, so the policy decides at least once more meanwhile (the refused write below shows the
# server itself enforcing the lock).
HOLD_OBSERVED_S = 6.0
POLICY_LOAD = 24  # clients beside the demo's own: bins above the crossover, measured in both modes


def incident_commands() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Flipping speculation during an incident") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def _knob(url: str) -> dict[str, Any]:
    info = httpx.get(f"{url}/server_info", timeout=10).json()
    return dict(info["internal_states"][0]["spectower"])


def _wait(predicate: Any, timeout: float, what: str, poll: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def run_in_terminal(
    script: str, cwd: Path, env: dict[str, str], answer: str | None = None
) -> tuple[int, str]:
    """Run ``bash -c script`` on a pseudo-terminal (as a user types it); answer the first prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, stdin=slave, stdout=slave,
                            stderr=slave, start_new_session=True)  # fmt: skip
    os.close(slave)
    output = b""
    answered = answer is None
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the command exited and closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
                if not answered and b"Apply?" in output:
                    os.write(master, answer.encode())  # type: ignore[union-attr]
                    answered = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    text = re.sub(r"\x1b\[[0-9;]*m", "", output.decode(errors="replace"))  # colours
    return code, " ".join(text.split())  # one line: the terminal wraps at its width


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_incident_commands_hold_against_the_learn_policy(tmp_path: Path) -> None:
    commands = incident_commands()
    export, rest = commands[0], commands[1:]
    assert export.startswith("export SPECTOWER_ADMIN_KEY_FILE=spectower-demo/admin_key")
    assert [c.split()[:3] for c in rest] == [
        ["spectower", "control", "set"], ["spectower", "control", "get"], ["spectower", "control", "release"],
        ["spectower", "control", "events"]]  # fmt: skip
    assert not any("--db" in c or "--yes" in c for c in commands)  # as a new user types them

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECTOWER_")}
    env["PATH"] = os.pathsep.join([str(Path(SPECTOWER_CLI[0]).parent), env.get("PATH", "")])
    demo = subprocess.Popen([*SPECTOWER_CLI, "demo", "--port", str(free_port())], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(demo.stdout.readline, "")), daemon=True)
        reader.start()

        def demo_up() -> str | None:
            assert demo.poll() is None, "".join(lines)
            text = "".join(lines)
            found = re.search(r"simulated SGLang server (http://127\.0\.0\.1:\d+)", text)
            return found.group(1) if found and "spectower demo is up" in text else None

        sim_url = _wait(demo_up, UP_TIMEOUT_S, "the demo to come up")
        with steady_load(sim_url, POLICY_LOAD):
            # the README's URL is the demo's default; only a busy port 30000 moves the simulator elsewhere
            rest = [c.replace(README_URL, sim_url) for c in rest]
            _wait(lambda: (_knob(sim_url).get("policy_last") or {}).get("applied"), POLICY_TIMEOUT_S,
                  "the learn policy's first write (it is active)")  # fmt: skip
            policy_log = tmp_path / "spectower-demo" / "policy.log"
            log_at_set = policy_log.read_text().count("paused")

            # 1. set --off, confirmed at the prompt
            code, out = run_in_terminal(f"{export}\n{rest[0]}", tmp_path, env, answer="y\n")
            assert code == 0, out
            assert "-> 0 (off)" in out and "confirmed" in out and "manual lock until released" in out, out
            assert "database: spectower-demo/spectower.db (the running demo's)" in out, out
            held = _knob(sim_url)
            assert (held["spec_max_bs"], held["owner"], held["lock"]["expires_at"]) == (0, "manual", None)

            # the policy (its own database, its own spelling of the URL) pauses: the server holds the lock
            _wait(
                lambda: policy_log.read_text().count("paused") > log_at_set, 30, "the policy to report paused"
            )
            key = (tmp_path / "spectower-demo" / "admin_key").read_text().strip()
            refused = httpx.post(
                f"{sim_url}/set_internal_state",
                timeout=10,
                headers={"Authorization": f"Bearer {key}"},
                json={"server_args": {"spectower_writer": 2, "spectower_spec_max_bs": 40}},
            )
            assert refused.json() == [False]  # a policy write racing the lock is refused by the server itself
            end = time.monotonic() + HOLD_OBSERVED_S
            while time.monotonic() < end:  # speculation stays off, whatever the policy decides meanwhile
                now = _knob(sim_url)
                assert (now["spec_max_bs"], now["owner"]) == (0, "manual"), now
                time.sleep(0.5)

            # 2. get: the server's own account
            code, out = run_in_terminal(f"{export}\n{rest[1]}", tmp_path, env)
            assert code == 0, out
            assert "owner manual (manual lock until released)" in out, out
            # who holds it: the set above, audited in the demo's database that `get` reads too
            held_by = f"held by operator:{getpass.getuser()} since "
            assert held_by in out and "TTFT p99 over SLO, incident 4711" in out, out
            assert "policy's last" in out

            # 3. release: the policy acts again
            code, out = run_in_terminal(f"{export}\n{rest[2]}", tmp_path, env)
            assert code == 0 and "released" in out, out
            assert _knob(sim_url)["owner"] == "policy"
            released_at = _knob(sim_url)["server_time"]
            log_at_release = len(policy_log.read_text().splitlines())

            def policy_acted() -> str | None:
                # The policy decides again: it writes the knob when its decision differs from the value the
                # operator left (the server then names it the last writer), or it says why it holds. Which of
                # the two depends on the load walker's phase, so either proves the pause is over.
                write = _knob(sim_url).get("last_write") or {}
                if write.get("writer") == "policy" and write["ts"] > released_at:
                    return "wrote"
                new_lines = policy_log.read_text().splitlines()[log_at_release:]
                decided = [line for line in new_lines if re.search(r" (set|hold|rate-limited): ", line)]
                return "decided" if decided else None

            assert _wait(policy_acted, POLICY_TIMEOUT_S, "the policy to act after the release")

            # 4. events: the audit trail of the demo's database (no --db), set then release, beside the
            # policy's own rows: what the console's audit trail shows
            code, out = run_in_terminal(f"{export}\n{rest[3]}", tmp_path, env)
            assert code == 0, out
            assert "release" in out and "set" in out and "incident 4711" in out, out
            assert "policy:learn" in out, out
            assert not (tmp_path / "spectower.db").exists()  # nothing went where nobody looks
            # this operator's rows (the demo's own sweep audits its borrowing of its fourth server's knob as
            # operator:demo-operator)
            operator_rows = db_rows(
                tmp_path / "spectower-demo" / "spectower.db",
                "select action, new_max_bs, confirmed, reason from control_event "
                f"where actor = 'operator:{getpass.getuser()}' order by ts",
            )
            assert operator_rows == [
                ("set", 0, 1, "TTFT p99 over SLO, incident 4711"),
                ("release", 0, 1, "incident 4711 over"),
            ]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(timeout=30)
