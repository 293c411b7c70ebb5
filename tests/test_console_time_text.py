"""console/time_text.py: how long ago, at a glance, for the pages and the CLI alike."""

from __future__ import annotations

import math

import pytest
from spectower.console.time_text import ago


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.0, "0 s ago"), (89.0, "89 s ago"), (600.0, "10 min ago"), (5400.0, "1.5 h ago"),
     (3 * 86400.0, "3.0 days ago"), (-5.0, "0 s ago")],  # a clock a little ahead: never "in the future"
)  # fmt: skip
def test_ago_reads_in_the_unit_an_operator_would_say(seconds: float, said: str) -> None:
    assert ago(1000.0, now=1000.0 + seconds) == said


def test_nothing_known_is_never() -> None:
    import pandas as pd

    assert ago(None) == "never" and ago(math.nan) == "never"
    assert ago(pd.NA) == "never"  # type: ignore[arg-type]  # as pd.isna read it on the pages before
