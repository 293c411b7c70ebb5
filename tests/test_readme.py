"""The README's commands are real: every ``spectower ...`` line in its code blocks parses against the CLI
(the command path exists, every ``--option`` exists on it), every command path it shows is exercised by a
test file, and its command reference lists every command the CLI has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer.main
from spectower.console import cli

from tests.conftest import REPO_ROOT
from tests.test_deploy import check_options, resolve_command

README = REPO_ROOT / "README.md"
SHELL_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "<", "2>", "&"}
NEWCOMER_COMMANDS = ("pip install -e '.[dev]' && spectower demo", "./tests/run")


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)


def spectower_commands(text: str) -> list[list[str]]:
    """The words after ``spectower`` of each command in the code blocks (up to a shell operator)."""
    found = []
    for block in code_blocks(text):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for i, word in enumerate(words):
                if word != "spectower":
                    continue
                rest = []
                for w in words[i + 1 :]:
                    if w in SHELL_OPERATORS:
                        break
                    rest.append(w)
                found.append(rest)
    return found


def all_command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        subs = getattr(command, "commands", None)
        if isinstance(subs, dict):
            for name, sub in subs.items():
                walk(sub, (*path, name))
        else:
            paths.append(path)

    walk(typer.main.get_command(cli.app), ())
    return paths


def _quoted(word: str) -> str:
    return rf"""["']{re.escape(word)}["']"""


def exercised(path: tuple[str, ...], sources: dict[str, str]) -> list[str]:
    """Test files that run ``path``: its words as quoted CLI arguments (``"control", "set"`` or a helper that
    prepends the group), or the text ``spectower control set``."""
    hits = []
    for name, text in sources.items():
        as_text = "spectower " + " ".join(path) in text
        as_args = all(re.search(_quoted(word), text) for word in path)
        if as_text or as_args:
            hits.append(name)
    return hits


def test_the_two_newcomer_commands_are_there_verbatim() -> None:
    blocks = [b.strip() for b in code_blocks(README.read_text())]
    for command in NEWCOMER_COMMANDS:
        assert command in blocks, f"README must show `{command}` as its own code block"


def test_every_readme_command_parses_against_the_cli() -> None:
    commands = spectower_commands(README.read_text())
    assert len(commands) >= 15
    for words in commands:
        command, path, rest = resolve_command(words)
        check_options(command, path, rest)


def test_every_readme_command_is_exercised_by_a_test() -> None:
    sources = {p.name: p.read_text() for p in sorted((REPO_ROOT / "tests").glob("test_*.py"))
               if p.name != Path(__file__).name}  # fmt: skip
    paths = {tuple(resolve_command(words)[1]) for words in spectower_commands(README.read_text())}
    missing = sorted(" ".join(p) for p in paths if not exercised(p, sources))
    assert not missing, f"README commands that no test runs: {missing}"


def test_command_reference_lists_every_command() -> None:
    text = README.read_text()
    reference = text[text.index("## Command reference") :]
    missing = [" ".join(p) for p in all_command_paths() if f"`spectower {' '.join(p)}`" not in reference]
    assert not missing, f"commands missing from the README's command reference: {missing}"


def test_the_screenshot_exists() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert images, "README shows no screenshot"
    for image in images:
        assert (REPO_ROOT / image).is_file(), image


def test_the_parser_catches_a_wrong_option() -> None:
    text = "```bash\nspectower control set --server x --of --reason y\n```\n"
    words = spectower_commands(text)[0]
    command, path, rest = resolve_command(words)
    try:
        check_options(command, path, rest)
    except AssertionError as exc:
        assert "--of" in str(exc)
    else:
        raise AssertionError("a misspelt option passed")
