"""The docker-compose deployment: Debian's docker-compose validates it, and its services, ports, volumes and
flags agree with the spectower CLI and with SGLang's launch flags.

The compose file names ``./secrets/admin_key``; the test copies the deployment to a temp folder and writes a
throwaway key there, so the repository never holds a secret file.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from spectower.console import cli

from tests.conftest import REPO_ROOT
from tests.namespace_tree import package_dirs
from tests.sglang_checks import sglang_python

COMPOSE = REPO_ROOT / "docker-compose.yml"
SECRET = "spectower_admin_key"
SECRET_PATH = f"/run/secrets/{SECRET}"
SPECTOWER_IMAGE = "spectower:local"
THROWAWAY_KEY = "test-only-key-not-a-secret"
# Debian's docker-compose reads the file (the `config` and `services` fixtures): the whole suite installs it
# (tests/run), the unit lane installs nothing, so these run in the whole suite only
needs_compose = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("compose")
    shutil.copy(COMPOSE, folder / "docker-compose.yml")
    shutil.copytree(REPO_ROOT / "deploy", folder / "deploy")
    (folder / "secrets").mkdir()
    (folder / "secrets" / "admin_key").write_text(THROWAWAY_KEY + "\n")
    return folder


def _compose(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("docker-compose") is None:
        pytest.fail("docker-compose is not installed (tests/run installs Debian's docker-compose)")
    # Only the variables the file reads with defaults: the test must not depend on the caller's shell.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(
        ["docker-compose", "--project-directory", str(project), "-f", str(project / "docker-compose.yml"),
         *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def config(project: Path) -> dict[str, Any]:
    proc = _compose(project, "config")
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(proc.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(config["services"])


def _spectower_services(services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    return {name: [str(a) for a in svc["command"]] for name, svc in services.items()
            if svc.get("image") == SPECTOWER_IMAGE}  # fmt: skip


def _sglang_script(services: dict[str, dict[str, Any]]) -> str:
    """SGLang's bash command as the container runs it (``docker-compose config`` keeps ``$$`` escaped)."""
    return str(services["sglang"]["command"][0]).replace("$$", "$")


def _sglang_argv(services: dict[str, dict[str, Any]]) -> list[str]:
    """The words of SGLang's launch command after ``exec python3 -m sglang.launch_server``."""
    script = _sglang_script(services)
    launch = script.split("exec python3 -m sglang.launch_server", 1)
    assert len(launch) == 2, script
    return shlex.split(launch[1])


def _flag_value(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


# typer ships its own copy of click (typer._click), so commands and groups are told apart by duck typing.
def _is_group(command: Any) -> bool:
    return isinstance(getattr(command, "commands", None), dict)


def resolve_command(argv: list[str]) -> tuple[Any, list[str], list[str]]:
    """(command, its path, the words after the path) in the real spectower CLI; AssertionError if absent."""
    command: Any = typer.main.get_command(cli.app)
    path: list[str] = []
    rest = list(argv)
    while _is_group(command) and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        assert sub is not None, f"spectower {' '.join([*path, rest[0]])}: no such command"
        command, path, rest = sub, [*path, rest.pop(0)], rest
    assert not _is_group(command), f"spectower {' '.join(path)} is a group, not a command"
    return command, path, rest


def check_options(command: Any, path: list[str], words: list[str]) -> None:
    """Every ``--option`` exists on the command; options that take a value are given one."""
    by_name: dict[str, Any] = {}
    for param in command.params:
        for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]:
            by_name[opt] = param
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("-"):
            name = word.split("=", 1)[0]
            assert name in by_name, f"spectower {' '.join(path)}: no option {name}"
            param = by_name[name]
            is_option = getattr(param, "param_type_name", "") == "option"
            takes_value = is_option and not getattr(param, "is_flag", False) and "=" not in word
            if takes_value:
                assert i + 1 < len(words), f"spectower {' '.join(path)} {name}: no value"
                i += 1
        i += 1


@needs_compose
def test_docker_compose_config_passes(project: Path) -> None:
    proc = _compose(project, "config", "-q")
    assert proc.returncode == 0, proc.stderr


@needs_compose
def test_every_spectower_command_and_option_exists(services: dict[str, dict[str, Any]]) -> None:
    commands = _spectower_services(services)
    assert {"spectower-init", "collector", "policy", "console"} <= set(commands)
    for name, argv in commands.items():
        command, path, rest = resolve_command(argv)
        check_options(command, path, rest)
        assert path, name


def test_the_checker_rejects_what_the_cli_lacks() -> None:
    with pytest.raises(AssertionError, match="no such command"):
        resolve_command(["collectt", "--server", "x"])
    command, path, rest = resolve_command(["collect", "--servers", "x"])
    with pytest.raises(AssertionError, match="no option --servers"):
        check_options(command, path, rest)


@needs_compose
def test_sglang_launch_flags(services: dict[str, dict[str, Any]]) -> None:
    argv = _sglang_argv(services)
    assert "--enable-metrics" in argv
    assert "--speculative-adaptive" in argv
    assert _flag_value(argv, "--speculative-algorithm") == "EAGLE3"
    assert _flag_value(argv, "--speculative-eagle-topk") == "1"
    assert _flag_value(argv, "--port") == "30000"
    # The adaptive config is the file `spectower sglang-config --out` writes, on a volume both services mount.
    config_path = _flag_value(argv, "--speculative-adaptive-config")
    init = [str(a) for a in services["spectower-init"]["command"]]
    assert init[0] == "sglang-config"
    assert _flag_value(init, "--out") == config_path
    mount = str(Path(config_path).parent)

    def volume_at(svc: str) -> str | None:
        for vol in services[svc].get("volumes", []):
            source, _, rest = str(vol).partition(":")
            if rest.split(":")[0] == mount:
                return source
        return None

    assert volume_at("spectower-init") is not None
    assert volume_at("spectower-init") == volume_at("sglang")
    # Drafting at the step the config was generated for: both read the same SPEC_STEPS.
    script = _sglang_script(services)
    assert '--speculative-num-steps "${SPEC_STEPS}"' in script
    assert _flag_value(init, "--steps") == services["sglang"]["environment"]["SPEC_STEPS"]
    max_running = services["sglang"]["environment"]["MAX_RUNNING_REQUESTS"]
    assert _flag_value(init, "--max-running-requests") == max_running


@needs_compose
def test_sglang_command_is_valid_bash(services: dict[str, dict[str, Any]]) -> None:
    script = _sglang_script(services)
    proc = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


@needs_compose
def test_spectower_services_reach_sglang_at_its_port(services: dict[str, dict[str, Any]]) -> None:
    commands = _spectower_services(services)
    for name in ("collector", "policy"):
        assert _flag_value(commands[name], "--server") == "http://sglang:30000", name
    assert _flag_value(commands["console"], "--port") == "8501"
    published = [str(p) for p in services["console"]["ports"]]
    assert any(p.split(":")[-1].startswith("8501") for p in published)


@needs_compose
def test_every_host_port_binds_loopback(services: dict[str, dict[str, Any]]) -> None:
    seen = 0
    for name, svc in services.items():
        for port in svc.get("ports", []):
            text = (
                str(port) if not isinstance(port, dict) else f"{port.get('host_ip')}:{port.get('published')}"
            )
            assert text.startswith("127.0.0.1:"), f"{name} publishes {text} beyond loopback"
            seen += 1
    assert seen >= 3


@needs_compose
def test_admin_key_is_a_secret_never_an_argument(config: dict[str, Any], services: dict[str, Any]) -> None:
    assert SECRET in config["secrets"] and "file" in config["secrets"][SECRET]
    users = {"policy", "console", "sglang"}
    for name in users:
        sources = [s["source"] if isinstance(s, dict) else s for s in services[name].get("secrets", [])]
        assert SECRET in sources, name
    for name in ("policy", "console"):
        env = services[name]["environment"]
        assert env["SPECTOWER_ADMIN_KEY_FILE"] == SECRET_PATH
        assert "SPECTOWER_ADMIN_KEY" not in env
    for name, argv in _spectower_services(services).items():
        assert not any("key" in word.lower() for word in argv), f"{name}: a key on the command line: {argv}"
        assert THROWAWAY_KEY not in str(services[name])
    # SGLang reads the key from a 0600 YAML given to --config, not from --admin-api-key on its argv.
    argv = _sglang_argv(services)
    assert "--admin-api-key" not in argv
    script = _sglang_script(services)
    assert "umask 077" in script and SECRET_PATH in script
    assert _flag_value(argv, "--config").endswith(".yaml")


@needs_compose
def test_prometheus_scrapes_the_sglang_service_port(services: dict[str, dict[str, Any]]) -> None:
    mounts = [str(v) for v in services["prometheus"]["volumes"]]
    host_file = next(m.split(":")[0] for m in mounts if m.split(":")[1] == "/etc/prometheus/prometheus.yml")
    assert Path(host_file).name == "prometheus.yml"
    prom = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job.get("static_configs", [])
               for t in sc["targets"]]  # fmt: skip
    port = _flag_value(_sglang_argv(services), "--port")
    assert f"sglang:{port}" in targets
    if shutil.which("promtool"):
        proc = subprocess.run(["promtool", "check", "config", str(REPO_ROOT / "deploy" / "prometheus.yml")],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_ships_every_package() -> None:
    # every folder pyproject.toml installs (plugin/ included: the image runs the policy, which reads the
    # contract and the counters from spectower.plugin)
    folders = sorted(set(package_dirs().values()))
    assert "plugin" in folders and "control" in folders
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    for folder in folders:
        assert f"COPY {folder} ./{folder}" in dockerfile, folder
    assert 'ENTRYPOINT ["spectower"]' in dockerfile


def test_no_secret_file_in_the_repository() -> None:
    tracked = subprocess.run(["git", "ls-files", "secrets"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert tracked.stdout.strip() == ""


@needs_compose
@pytest.mark.sglang
def test_sglang_reads_the_admin_key_from_the_config_file(services: dict[str, Any], tmp_path: Path) -> None:
    """The compose's printf line, run by bash, writes a YAML that SGLang's own parser turns into the key."""
    python = sglang_python()
    script = _sglang_script(services)
    line = next(part.strip() for part in script.split("&&") if part.strip().startswith("printf"))
    key_file = tmp_path / "admin_key"
    key_file.write_text("k3y-with_odd.chars~\n")
    out = tmp_path / "spectower-admin.yaml"
    line = line.replace(SECRET_PATH, str(key_file)).replace("/tmp/spectower-admin.yaml", str(out))
    subprocess.run(["bash", "-c", f"umask 077 && {line}"], check=True, timeout=30)
    assert out.stat().st_mode & 0o777 == 0o600
    code = (
        "import argparse, sys\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger\n"
        "p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)\n"
        "argv = ConfigArgumentMerger(p).merge_config_with_args(\n"
        "    ['--config', sys.argv[1], '--model-path', 'm'])\n"
        "print(p.parse_args(argv).admin_api_key)\n"
    )
    proc = subprocess.run([python, "-c", code, str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "k3y-with_odd.chars~"


def test_runs_under_this_python() -> None:
    assert sys.version_info >= (3, 11)
