"""What each DP rank's plugin reports beyond the knob, as `control get` prints it: the off path (the
gated-decode plugin's draft-extend skip and drain, flashinfer's seq-lens mirror), exploration (its share and
its windows among the batches the knob gates), and the scheduler's garbage collections (plugin 0.4.5) and its
output stalls (plugin 0.4.7)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...collectors.sglang.server_info import RankState


def off_path(ranks: Sequence[RankState]) -> tuple[list[str], list[str]]:
    """What each rank's off path did (the gated-decode plugin's draft-extend skip and drain, flashinfer's
    seq-lens mirror), as lines, and warnings: a mirror that turned itself off (its gated steps wait on the
    host again). Nothing for a server whose plugin does not publish them (an older one; the simulator
    publishes the skip and drain, not the mirror)."""
    lines: list[str] = []
    warnings: list[str] = []
    for rank in ranks:
        parts = []
        skip = rank.gated_decode
        if skip:
            parts.append(f"draft extend skipped in {skip.get('batches_skipped', '?')} batches, "
                         f"{skip.get('batches_drained', '?')} drained before drafting"
                         + ("" if skip.get("enabled", True) else " (skip switched off)")
                         + (f", the draft's prefill skipped in {skip['prefills_skipped']} batches"
                            if skip.get("prefills_skipped") else ""))  # fmt: skip
        bands = (rank.gate or {}).get("band_changes")
        if isinstance(bands, int) and bands:
            # SGLang's own adaptive band changed its step count (its acceptance EMA): each change is a
            # runtime-state switch, and a band at 0 keeps batches the knob would draft gated
            parts.append(f"SGLang's own steps changed {bands} times")
        mirror = rank.seq_lens_mirror
        if mirror and mirror.get("active"):
            state = "on" if mirror.get("enabled") else "OFF"
            hits, syncs = mirror.get("resolved_from_mirror", "?"), mirror.get("resolved_by_sglang", "?")
            checked, differed = mirror.get("verified", "?"), mirror.get("mismatches", "?")
            # of SGLang's, those whose batch then ran gated (a plugin before 0.3.2 does not count them)
            gated = mirror.get("gated_by_sglang")
            of_them = "" if gated is None else f" ({gated} of them gated)"
            parts.append(f"seq-lens mirror {state}: {hits} resolves from it, {syncs} by SGLang{of_them}, "
                         f"{checked} checked, {differed} differed")  # fmt: skip
            if not mirror.get("enabled"):
                why = mirror.get("off_reason") or "no reason given"
                warnings.append(f"dp_rank {rank.dp_rank}: the seq-lens mirror turned itself off ({why}); "
                                "its gated batches wait on the host for their lengths again")  # fmt: skip
        if parts:
            lines.append(f"  off path {rank.dp_rank}: " + "; ".join(parts))
    return lines, warnings


def explore_lines(ranks: Sequence[RankState]) -> list[str]:
    """Each rank's exploration (``collectors.sglang.exploration.summary``). Nothing for a plugin that does not
    publish it."""
    from ...collectors.sglang.exploration import summary

    lines = []
    for rank in ranks:
        text = summary(rank.explore)
        if text is not None:
            lines.append(f"  explore {rank.dp_rank}: {text}")
    return lines


def gc_lines(ranks: Sequence[RankState]) -> list[str]:
    """Each rank's scheduler garbage collections (plugin 0.4.5, plugin/gc_pauses.py): how many, how many
    long, the longest and when the newest long one ran, so a latency spike can be set against them. Nothing
    for a plugin that does not publish them."""
    lines = []
    for rank in ranks:
        gc = rank.gc
        if not gc:
            continue
        threshold, longest = gc.get("threshold_s"), gc.get("longest_s")
        long = gc.get("long") or 0
        frozen = gc.get("frozen")  # plugin 0.4.8: what gc.freeze() (SGLang's /freeze_gc) took from its scans
        said = f" ({frozen:,} objects frozen)".replace(",", " ") if isinstance(frozen, int) and frozen else ""
        line = f"  scheduler gc {rank.dp_rank}{said}: {gc.get('collections', '?')} collections"
        if not isinstance(threshold, int | float) or not isinstance(longest, int | float):
            lines.append(f"{line}, {long} long")
        elif not long:
            lines.append(f"{line}, none >= {threshold:g} s")
        else:
            recent = gc.get("recent_long") or [{}]
            newest = recent[-1] if isinstance(recent[-1], dict) else {}
            lines.append(f"{line}, {long} >= {threshold:g} s, the longest {longest:.3f} s; the newest "
                         f"{newest.get('seconds', '?')} s at {when_text(newest.get('at'))}")  # fmt: skip
    return lines


def stall_lines(ranks: Sequence[RankState]) -> list[str]:
    """Each rank's output stalls (plugin 0.4.7, plugin/loop_stalls.py): the gaps between two batch results
    of at least its threshold, and the newest few with what took their time, by this machine's clock; the
    3-a.m. question "why did latency double" often starts there. Nothing for a plugin that does not publish
    them (an older one, the simulator)."""
    from ...collectors.sglang.stalls import loop_report

    lines = []
    for rank in ranks:
        report = loop_report(rank.loop)
        if report is None:
            continue
        lines.append(f"  stalls {rank.dp_rank}: {report.summary()}")
        lines.extend(f"    {stall.text(utc=False)}" for stall in report.recent[-STALLS_SHOWN:])
    return lines


STALLS_SHOWN = 3  # the newest stalls `control get` lists per rank


def launcher_lines(ranks: Sequence[RankState]) -> list[str]:
    """SGLang's launcher (plugin 0.4.8, plugin/launcher_state.py), once: every rank carries the same block,
    the launcher being one process. Its long collections stop every request's output even when no rank
    stalled; where they ran long and nothing is frozen, the line after says what stops them."""
    from ...collectors.sglang.launcher import first_launcher

    report = first_launcher(rank.launcher for rank in ranks)
    if report is None:
        return []
    return [f"  {report.summary()}", *([f"    {report.advice}"] if report.advice else [])]


def when_text(ts: Any) -> str:
    import time

    if not isinstance(ts, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ts)))
