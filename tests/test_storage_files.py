"""storage.files: the one atomic write (exports, sweep profiles, SGLang configs, the console's sweep
records): a failure halfway leaves the old file whole and no temporary file behind; the one JSON parse of
what a user gives (profiles, traces, bench_serving lines): every failure one line saying why."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from spectower.storage.files import FileReadError, atomic_path, atomic_write_text, parse_json_text


def test_write_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "cfg.json"
    target.write_text("old\n")
    assert atomic_write_text(target, "new\n") == target
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["cfg.json"]


def test_a_failure_halfway_keeps_the_old_file_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "profile.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_a_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "x.json", "{}")


@pytest.mark.parametrize("jsonl_line", [False, True])
def test_json_python_cannot_read_is_one_reason(jsonl_line: bool) -> None:
    # RecursionError and int()'s ValueError (it named sys.set_int_max_str_digits) came through as raised
    # or worded for a developer; a line of a JSON Lines file gets the same reasons as a whole file
    limit = sys.get_int_max_str_digits()
    for text, reason in [
        ("[" * 100_000, "not usable JSON (nested too deeply)"),
        ('{"completed": ' + "1" * 5000 + "}", f"not usable JSON (an integer of over {limit} digits)"),
    ]:
        with pytest.raises(FileReadError) as caught:
            parse_json_text(text, jsonl_line=jsonl_line)
        assert str(caught.value) == reason


def test_a_syntax_error_says_where_in_a_file_or_in_a_line() -> None:
    with pytest.raises(FileReadError) as caught:
        parse_json_text('{"a": 1,\n "b": }')
    assert str(caught.value) == "not valid JSON (Expecting value at line 2)"
    with pytest.raises(FileReadError) as caught:
        parse_json_text('{"a": 1, "b": }', jsonl_line=True)  # the caller names the line
    assert str(caught.value) == "not JSON (Expecting value at column 15)"


def test_nan_and_infinity_are_read_for_the_caller_to_judge() -> None:
    # bench_serving's closed-loop lines say "request_rate": Infinity; import_files decides what may stay
    got = parse_json_text('{"request_rate": Infinity, "x": -Infinity, "y": NaN}', jsonl_line=True)
    assert got["request_rate"] == math.inf and got["x"] == -math.inf and math.isnan(got["y"])
