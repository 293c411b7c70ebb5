"""What the plugin reports at the end of each ``measure_off.sh`` call, from the spec server's
``/server_info``.

    curl -fsS "$SPEC_URL/server_info" | python3 -P benchmarks/gpu/call_summary.py

One line per figure, per DP rank where it is per rank: the plugin's own time in its decode hooks against the
decode time its counters measured (issue #14: < 1 % of a decode step); the exploration windows (plugin
0.4.0+); the gate and the off path (SGLang's own band changes, the drain, the verifies kept from SGLang's
acceptance EMA); what the draft extend costs a steady gated step (plugin 0.4.6); the scheduler's long
garbage collections with their UTC times (plugin 0.4.5); its output stalls, each long gap between two batch
results with what took it (plugin 0.4.7); flashinfer's seq-lens mirror. Only these figures
are printed: ``/server_info`` also carries the admin key. A field a plugin does not publish prints nothing.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from spectower.collectors.sglang.counters import read_counters
from spectower.collectors.sglang.launcher import first_launcher
from spectower.collectors.sglang.stalls import loop_report
from spectower.control import kept_extend
from spectower.plugin.engine_counters import MODES, rates, served, sum_ranks
from spectower.plugin.stall_watch import clock_text


def hooks_line(ranks: list[Mapping[str, Any]], blocks: list[dict[str, Any]]) -> str:
    calls = sum((r.get("hooks") or {}).get("calls", 0) for r in ranks)
    spent = sum((r.get("hooks") or {}).get("seconds", 0.0) for r in ranks)
    done = served(sum_ranks(blocks)) if blocks else {"steps": 0, "time_s": 0.0}
    decode_s, steps = done["time_s"], done["steps"]
    if calls and decode_s:
        each, share = spent / calls * 1e6, spent / decode_s
        return (f"plugin hooks: {calls} calls, {each:.1f} us each; {share:.3%} of the {decode_s:.1f} s of "
                f"decode steps the counters measured ({steps:.0f} steps)")  # fmt: skip
    version = ranks[0].get("plugin_version") if ranks else None
    return f"plugin hooks: no figure (plugin {version} or no decode steps yet)"


def counted_lines(blocks: list[dict[str, Any]]) -> list[str]:
    """Per rank, what the step counters did not put in a bin: settling steps (a switch into or out of an
    exploring run), verify results with no launch to match (``unmatched``) and launches that never got one
    (``dropped``): steps lost to the bins, whose spans go with them (a rate learn decides on)."""
    lines = []
    for i, block in enumerate(blocks):
        steps = sum(sum(block[mode]["steps"]) for mode in MODES)
        time_s = sum(sum(block[mode]["time_s"]) for mode in MODES)
        settling = block.get("settling") or {}
        lines.append(f"counters, rank {i}: {steps:.0f} steps in bins ({time_s:.1f} s); "
                     f"settling {settling.get('steps', 0):.0f} steps ({settling.get('time_s', 0.0):.1f} s); "
                     f"{block.get('unmatched', 0)} verifies unmatched, {block.get('dropped', 0)} launches "
                     "dropped")  # fmt: skip
    return lines


def window_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """Exploring parts so far, those ended by their time cap (0.4.4), the last part's busy seconds, the
    stream's limit now; from 0.4.12 the batches windows waited on a full server, the parts it cut short and
    the windows that ran full after waiting their most."""
    lines = []
    for i, r in enumerate(ranks):
        w = (r.get("explore") or {}).get("window") or {}
        if w.get("cycle"):
            parts, timed, last = w.get("windows"), w.get("timed_out"), w.get("last_explore_s")
            limit, doublings, above = w.get("limit"), w.get("doublings"), w.get("over_limit")
            lines.append(f"explore windows, rank {i}: {parts} exploring parts, {timed} ended by time, "
                         f"the last {last} s; limit {limit} ({doublings} doublings), {above} batches "
                         f"above it; batches {w.get('batches')}")  # fmt: skip
            if "full_waited" in w:  # plugin 0.4.12
                lines[-1] += (f"; a full server: {w['full_waited']} batches waited, {w.get('yielded')} parts "
                              f"cut short, {w.get('forced')} windows run full")  # fmt: skip
    return lines


def gate_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """The changes of SGLang's own band steps (its acceptance EMA: before plugin 0.4.6 the drain fed it zeros
    and its band flipped 0 -> 3 -> 0 every few batches), the drain, the verifies kept from the EMA."""
    lines = []
    for i, r in enumerate(ranks):
        g, skip = r.get("gate") or {}, r.get("gated_decode") or {}
        if g:
            drafted, gated = r.get("batches_drafted"), r.get("batches_gated")
            switches, bands, dropped = g.get("switches"), g.get("band_changes"), g.get("verifies_dropped")
            skipped, drained = skip.get("batches_skipped"), skip.get("batches_drained")
            prefills = skip.get("prefills_skipped")  # plugin 0.4.9 on: prefills that skipped the draft's pass
            lines.append(f"gate, rank {i}: {drafted} batches drafted, {gated} gated; {switches} switches, "
                         f"{bands} changes of SGLang's own steps, {dropped} verifies kept from its EMA; "
                         f"extend skipped in {skipped} batches, {drained} drained"
                         + (f"; the draft's prefill skipped in {prefills} batches" if prefills is not None
                            else ""))  # fmt: skip
    return lines


def kept_extend_line(blocks: list[dict[str, Any]]) -> str:
    """What the draft extend costs a steady gated step on this traffic since the server started (plugin
    0.4.6, control/kept_extend.py): the tax learn corrects a drafting bin's gated side by."""
    found = kept_extend.from_intervals([rates(None, sum_ranks(blocks))]) if blocks else None
    if found is None:
        return ("kept extend: not measured (a plugin before 0.4.6, a lock, or too few steady gated steps of "
                "each kind)")  # fmt: skip
    per_bin = ", ".join(f"{b.batch_size}: {100 * b.tax:.1f} % ({b.kept_steps}/{b.skipped_steps})"
                        for b in found.bins)  # fmt: skip
    return f"kept extend: {found.label()}; per bin (kept/skipped steps): {per_bin}"


def gc_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """The scheduler's long garbage collections with their wall-clock times, to set against the stalls of a
    replay (the TTFT tail of replay_table.py)."""
    lines = []
    for i, r in enumerate(ranks):
        g = r.get("gc")
        if not g:
            continue
        newest = [time.strftime("%H:%M:%S", time.gmtime(c.get("at"))) + f" gen {c.get('generation')} "
                  f"{c.get('seconds'):.3f} s" for c in g.get("recent_long", [])]  # fmt: skip
        count, spent, long = g.get("collections"), g.get("seconds"), g.get("long")
        limit, most = g.get("threshold_s"), g.get("longest_s")
        listed = ", ".join(newest) or "none"
        # objects gc.freeze() took out of the scans (plugin 0.4.8): the scheduler's side of freeze-gc
        frozen = f"; {g['frozen']} objects frozen" if isinstance(g.get("frozen"), int) else ""
        lines.append(f"scheduler gc, rank {i}: {count} collections, {spent:.2f} s; {long} of them >= "
                     f"{limit:g} s, the longest {most:.3f} s; newest long (UTC): {listed}"
                     + frozen)  # fmt: skip
    return lines


def stall_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """The scheduler's output stalls (plugin 0.4.7): each long gap between two batch results with its UTC
    time and what took it, to set against a replay's TTFT tail (replay_table.py); the calls' own totals."""
    lines = []
    for i, r in enumerate(ranks):
        report = loop_report(r.get("loop"))
        if report is None:
            continue
        spent = ", ".join(f"{p} {s:.1f} s" for p, s in report.phase_seconds.items())
        lines.append(f"scheduler stalls, rank {i}: {report.summary()}; the loop's calls: {spent}")
        for stall in report.recent:
            lines.append(f"  stall (UTC): {stall.text(utc=True)}")
            # the scheduler thread's stacks in it (plugin/stall_watch.py), outermost frame first
            lines.extend(f"    after {s.after_s:.2f} s, in {s.phase or 'the loop'}: {' > '.join(s.stack)}"
                         for s in stall.samples)  # fmt: skip
    return lines


def launcher_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """SGLang's launcher (plugin 0.4.8), once (every rank carries the same block): its long collections and
    its Python held, the newest with their UTC times, and what it has frozen (the read-back of freeze-gc)."""
    report = first_launcher(r.get("launcher") for r in ranks)
    if report is None:
        return []
    return [report.summary(utc=True), *(f"  long collection (UTC): {p.seconds:.3f} s to {clock_text(p.at)}"
                                        for p in report.recent_long)]  # fmt: skip


def mirror_lines(ranks: list[Mapping[str, Any]]) -> list[str]:
    """Flashinfer: how often a batch resolved its host lengths from the mirror instead of waiting on the
    GPU."""
    lines = []
    for m in (r["seq_lens_mirror"] for r in ranks if r.get("seq_lens_mirror")):
        hits, syncs = m["resolved_from_mirror"], m["resolved_by_sglang"]
        gated = m.get("gated_by_sglang", "?")  # resolves by SGLang whose batch then ran gated (plugin 0.3.2)
        each = m.get("seconds", 0.0) / max(1, hits + syncs) * 1e6
        checked, differed = m["verified"], m["mismatches"]
        on, why = m.get("enabled"), m.get("off_reason") or ""
        lines.append(f"seq-lens mirror: {hits} resolves from the mirror, {syncs} by SGLang host copy "
                     f"({gated} of them gated); {checked} checked, {differed} differed; on={on} {why}; its "
                     f"own time {each:.1f} us per resolve")  # fmt: skip
    return lines


def summary(info: Mapping[str, Any]) -> list[str]:
    ranks = [s.get("spectower") or {} for s in info.get("internal_states", [])]
    blocks = read_counters(info).blocks
    return [hooks_line(ranks, blocks), *counted_lines(blocks), *window_lines(ranks), *gate_lines(ranks),
            kept_extend_line(blocks), *gc_lines(ranks), *stall_lines(ranks), *launcher_lines(ranks),
            *mirror_lines(ranks)]  # fmt: skip


def main() -> int:
    print("\n".join(summary(json.load(sys.stdin))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
