"""benchmarks/number_lists.py: the benchmark scripts' one parser of comma-separated numbers."""

from __future__ import annotations

import argparse
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from number_lists import list_type, number_list


def test_numbers_are_read_in_order_with_blank_items_skipped() -> None:
    assert number_list("16, 48,", "--starts", int) == [16, 48]
    assert number_list("0.75,1", "--rate-scales", float) == [0.75, 1.0]


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("1,x", int, "--n: expected whole numbers separated by commas, got '1,x'"),
        ("0.5", int, "--n: expected whole numbers separated by commas, got '0.5'"),
        ("fast", float, "--n: expected numbers separated by commas, got 'fast'"),
        (" , ", int, "--n: expected at least one, got ' , '"),
        ("4,-1", int, "--n: each 0 or more, got '4,-1'"),
    ],
)
def test_a_bad_list_is_one_line_naming_the_flag_and_the_text(text: str, kind: type, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        number_list(text, "--n", kind, lambda v: v >= 0, "each 0 or more")
    assert str(raised.value) == message


def test_as_an_argparse_type_argparse_names_the_flag() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--seeds", type=list_type(int, lambda v: v >= 0, "each 0 or more"))
    assert parser.parse_args(["--seeds", "1,2"]).seeds == [1, 2]
    with pytest.raises(argparse.ArgumentError, match=r"^argument --seeds: each 0 or more, got '-3'$"):
        parser.parse_args(["--seeds", "-3"])
