"""control.durations: the one duration parser of the CLI's flags and the console's fields, and the range a
flag or field adds (its wording is what both say)."""

from __future__ import annotations

import pytest
from spectower.control.durations import DurationError, allowed_range, parse_duration, parse_duration_within
from spectower.plugin.knob_contract import MAX_HOLD_S, MIN_OPERATOR_HOLD_S


def test_units_and_plain_seconds() -> None:
    assert parse_duration("250ms") == 0.25 and parse_duration("2m") == 120
    assert parse_duration(" 1.5H ") == 5400 and parse_duration("2.5") == 2.5


@pytest.mark.parametrize("text", ["soon", "", "0", "-1s", "inf", "nan", "1e400s"])
def test_what_is_no_duration_names_the_flag(text: str) -> None:
    with pytest.raises(DurationError, match=r"^--interval must be"):
        parse_duration(text)


def test_a_range_is_checked_and_said_in_the_largest_whole_unit() -> None:
    assert parse_duration_within("2m", "--hold", MIN_OPERATOR_HOLD_S, MAX_HOLD_S) == 120
    assert allowed_range(0.1, 3600) == "between 100ms and 1h"
    with pytest.raises(DurationError) as exc:
        parse_duration_within("30", "--hold", MIN_OPERATOR_HOLD_S, MAX_HOLD_S)
    assert str(exc.value) == "--hold must be between 1m and 720h, got '30'"
    with pytest.raises(DurationError, match="between 1m and 720h, got '721h'"):
        parse_duration_within("721h", "--hold", MIN_OPERATOR_HOLD_S, MAX_HOLD_S)
