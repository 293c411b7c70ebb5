"""Runs many check scripts against ONE import of SGLang, INSIDE the SGLang venv (tests/sglang_env.sh):
``run_all.py PLAN.json RESULTS.json``. tests/sglang_checks.py writes the plan and asserts on the results.

Importing SGLang costs ~10 s (more on a loaded 2-core machine); a check itself takes well under a second.
This process imports the SGLang modules the checks use once, then FORKS a child per check: each child starts
from that state, a copy in which no plugin was ever loaded (``load_plugins()`` has not run, no hook is
applied, ``spectower`` is not imported, no SGLang class was patched), so every check sees what a fresh
``python CHECK.py`` sees and whatever a check patches, deletes or loads dies with its child. In the child
the plan's environment is applied (before ``spectower`` is imported: its settings are read from there), the
standard streams go to files, and the script runs as ``__main__`` (runpy) with its own argv and folder first
on ``sys.path``, as ``python CHECK.py ARGS`` would run it.

PLAN.json: ``{"preload": [module, ...], "checks": [{"id", "script", "args", "env" (a value of null unsets
it), "cwd", "timeout_s"}, ...]}``. RESULTS.json: ``{"preload_s": s, "preload_missing": [module, ...],
"checks": {id: {"rc", "stdout", "stderr", "seconds"}}}``, written when every check has run. Standard library
only.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

STDERR_CHARS = 20_000  # the end of each check's stderr (SGLang's logging); stdout is kept whole


def run_child(check: dict[str, Any], out: Path, err: Path) -> None:
    """In the forked child: never returns."""
    code = 1
    try:
        signal.alarm(int(check["timeout_s"]))  # SIGALRM's default action ends the child: rc -14
        with out.open("wb") as o, err.open("wb") as e:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(o.fileno(), 1)
            os.dup2(e.fileno(), 2)
        for key, value in check["env"].items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.chdir(check["cwd"])
        script = str(Path(check["script"]).resolve())
        sys.path.insert(0, str(Path(script).parent))
        sys.argv = [script, *check["args"]]
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def read(path: Path, last: int | None = None) -> str:
    if not path.exists():
        return ""
    data = path.read_bytes()
    return data[-last:].decode(errors="replace") if last else data.decode(errors="replace")


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    results_path = Path(sys.argv[2])
    t0 = time.monotonic()
    missing = []
    for module in plan["preload"]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # a module this version lacks; a check importing it says so
            if exc.name is None or not module.startswith(exc.name):
                raise
            missing.append(module)
    preload_s = time.monotonic() - t0
    assert "spectower" not in sys.modules, "the preload must not import spectower: the checks load it"
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="spectower-checks-") as tmp:
        for i, check in enumerate(plan["checks"]):
            out, err = Path(tmp, f"{i}.out"), Path(tmp, f"{i}.err")
            start = time.monotonic()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                run_child(check, out, err)
            _, status = os.waitpid(pid, 0)
            rc = os.waitstatus_to_exitcode(status)
            stderr = read(err, STDERR_CHARS)
            if rc == -signal.SIGALRM:
                stderr += f"\nrun_all: {check['id']} timed out after {check['timeout_s']} s\n"
            results[check["id"]] = {
                "rc": rc,
                "stdout": read(out),
                "stderr": stderr,
                "seconds": round(time.monotonic() - start, 3),
            }
    tmp_results = results_path.with_suffix(".tmp")
    tmp_results.write_text(
        json.dumps({"preload_s": round(preload_s, 3), "preload_missing": missing, "checks": results})
    )
    tmp_results.replace(results_path)


if __name__ == "__main__":
    main()
