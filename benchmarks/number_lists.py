"""Comma-separated numbers on a benchmark script's command line (``--seeds 1,2,3``, ``--rate-scales
0.75,1``): the one parser the scripts share, so each says what was wrong the same way."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)

KIND_WORDS: dict[type, str] = {int: "whole numbers", float: "numbers"}


def number_list(text: str, flag: str | None, kind: type[N], within: Callable[[N], bool] | None = None,
                rule: str = "") -> list[N]:  # fmt: skip
    """``"1,2,4"`` -> [1, 2, 4] (blank items skipped), each ``kind``; ``within``: each value must pass it,
    ``rule`` says how in words. ``ValueError`` naming ``flag`` (None: argparse names it) and the text given,
    for the script to print as its one error line."""
    named = f"{flag}: " if flag else ""
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{named}expected {KIND_WORDS[kind]} separated by commas, got {text!r}") from None
    if not values:
        raise ValueError(f"{named}expected at least one, got {text!r}")
    if within is not None and not all(within(v) for v in values):
        raise ValueError(f"{named}{rule}, got {text!r}")
    return values


def list_type(kind: type[N], within: Callable[[N], bool] | None = None, rule: str = ""
              ) -> Callable[[str], list[N]]:  # fmt: skip
    """``number_list`` as an argparse ``type=`` (argparse's error line names the flag)."""

    def parse(text: str) -> list[N]:
        try:
            return number_list(text, None, kind, within, rule)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse
