"""Does spectower's gate cost anything when it lets everything draft? The knob at max on a server with
spectower's plugins against an un-gated EAGLE-3 server (same model pair, no adaptive config, no plugin),
measured in turn with one closed-loop client, interleaved per round so drift hits both alike, each round's
prompts the same for both.

    python3 benchmarks/gpu/knob_max_ab.py --gated http://127.0.0.1:30000 --ungated http://127.0.0.1:30001 \\
        --concurrency 1,16,64 --rounds 2 --seconds 8 --out knob_max_vs_ungated.json

The same pieces as ``spectower bench sweep`` (prompts, streaming client, closed loop, steady-interval windows,
the ratio's interval); ``bench sweep --plain-server`` refuses a speculative server, which is why this is its
own script. Prints one line per level: gated/un-gated output tok/s with its 95 % interval over the windows,
and the paired figure over rounds (each round's two halves share their prompts and sit back to back, so one
round where one server ran unusually fast moves it by that round's log ratio, not by its whole tok/s).
Issue #12 wants >= 0.97. Works against the simulator too (the test does that).

    python3 benchmarks/gpu/knob_max_ab.py --summarize a.json b.json ...

reads saved runs back and pools their rounds per level (runs saved before the rounds were kept are split
into rounds by their windows).

Each gated round's line ends with what the gated server's exploring windows did during it (exploring parts,
warm and exploring batches, batches above the stream's limit: two ``/server_info`` reads around it, summed
over its ranks), and the saved level keeps them (``gated_windows``): a policy's 0 read 0.71-0.84 of plain in
three of eight rounds at 32 on the H200 (2026-12-07) and the files could not say whether a window fell there.
Each round's line also says when each server's run went (UTC), and the saved level keeps the times
(``round_times``, unix seconds): the servers' logs (collections, stalls, the plugin's watch lines) line up
with the rounds by them.

``--out`` is written again after each level, whole each time (the old file or the new one, never a mix), so a
run cut short (a device call's time limit) keeps every level it finished.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.lengths import OutputLengths, parse_output_lengths
from spectower.collectors.bench.loadgen import run_closed_loop
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.ratio import paired_ratio_interval, ratio_interval
from spectower.collectors.bench.stats import window_throughputs
from spectower.collectors.bench.stream import RequestShape
from spectower.collectors.bench.sweep import parse_concurrency
from spectower.collectors.http import BoundedReadError, get_bounded
from spectower.collectors.sglang.exploration import window_counts
from spectower.storage.files import FileReadError, atomic_write_text, parse_json_text, read_text_capped

WINDOWS_PER_ROUND = 4
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 300.0  # a 256-token request at C=64 stays well inside
MAX_RESULT_BYTES = 4 * 1024 * 1024  # a saved run is a few kB
SERVERS = ("gated", "ungated")
DEFAULT_LABEL = "knob at max / un-gated"  # what the ratio is, in its printed lines (--label)
# the gated server's /server_info, read around each of its rounds for what its exploring windows did there
INFO_TIMEOUT_S = 5.0
INFO_MAX_BYTES = 4 * 1024 * 1024


async def windows_now(client: httpx.AsyncClient) -> dict[str, int] | None:
    """The server's exploring windows so far (``exploration.window_counts``); None where it cannot tell (no
    plugin, no windows, a failed read: the round is measured all the same)."""
    try:
        resp = await get_bounded(client, "/server_info", timeout_s=INFO_TIMEOUT_S, max_bytes=INFO_MAX_BYTES)
        return window_counts(json.loads(resp.content)) if resp.status_code == 200 else None
    except (BoundedReadError, ValueError):
        return None


WindowCounts = dict[str, int] | None


def utc_span(start: float, end: float) -> str:
    """A round's run as the servers' logs stamp their lines: ``13:09:12-13:09:20 UTC``."""
    clock = [datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S") for t in (start, end)]
    return f"{clock[0]}-{clock[1]} UTC"


def windows_text(before: WindowCounts, after: WindowCounts) -> tuple[WindowCounts, str]:
    """What the windows did between two reads, and said for the round's line ("" where not known)."""
    if before is None or after is None:
        return None, ""
    done = {key: after[key] - before[key] for key in after}
    return done, (f" (windows: {done['windows']} exploring parts, {done['warm']} warm and {done['explore']} "
                  f"exploring batches, {done['over_limit']} above the stream's limit)")  # fmt: skip


async def measure(urls: dict[str, str], levels: list[int], rounds: int, seconds: float,
                  output_len: int | OutputLengths, input_len: int,
                  transports: dict[str, httpx.AsyncBaseTransport] | None = None,
                  label: str = DEFAULT_LABEL,
                  on_level: Callable[[dict[str, Any]], None] | None = None,
                  clock: Callable[[], float] = time.time) -> dict[str, Any]:  # fmt: skip
    """Both servers at each level, ``rounds`` times in turn; ``transports`` (per name, for tests) carry the
    requests instead of httpx's own. ``output_len``: one length, or a range (each request's length by its
    index, so both servers of a round get the same lengths). ``on_level`` is handed the result so far (the
    levels finished) after each level. ``clock``: unix seconds, for each round's times (tests inject one)."""
    lengths = output_len if isinstance(output_len, OutputLengths) else OutputLengths(output_len, output_len)
    shape = RequestShape(api="generate", output_len=lengths.high)
    length_of = lengths.of if lengths.mixed else None
    prompts = PromptFactory(input_len, as_text=False)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    limits = httpx.Limits(max_connections=max(levels) + 4)
    clients = {name: httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits,
                                       transport=(transports or {}).get(name))
               for name, url in urls.items()}  # fmt: skip
    windows: dict[int, dict[str, list[float]]] = {c: {name: [] for name in urls} for c in levels}
    round_means: dict[int, dict[str, list[float]]] = {c: {name: [] for name in urls} for c in levels}
    # per level, per round: what the gated server's windows did during its run (None: not known)
    round_windows: dict[int, list[dict[str, int] | None]] = {c: [] for c in levels}
    # per level, per server: [start, end] of each round's run, unix seconds
    round_times: dict[int, dict[str, list[list[float]]]] = {c: {name: [] for name in urls} for c in levels}
    rows: list[dict[str, Any]] = []
    result = {"gated": urls["gated"], "ungated": urls["ungated"], "rounds": rounds, "seconds": seconds,
              "output_len": str(lengths) if lengths.mixed else lengths.low, "input_len": input_len,
              "label": label, "levels": rows}  # fmt: skip
    index = 0
    try:
        for c in levels:
            for r in range(rounds):
                # alternate which server goes first, so neither always follows the other's warm cache
                order = list(urls) if r % 2 == 0 else list(reversed(urls))
                # both servers get the same prompts in a round: with the constructed pair a prompt's
                # acceptance is its own, and a 7 s window at C=1 holds only a dozen requests
                served = 0
                for name in order:
                    before = await windows_now(clients[name]) if name == "gated" else None
                    started = clock()
                    loop = await run_closed_loop(clients[name], prompts, shape, c, duration_s=seconds,
                                                 first_index=index, output_len_of=length_of)  # fmt: skip
                    round_times[c][name].append([started, clock()])
                    said = f" [{utc_span(*round_times[c][name][-1])}]"
                    if name == "gated":
                        done, windows_said = windows_text(before, await windows_now(clients[name]))
                        round_windows[c].append(done)
                        said += windows_said
                    served = max(served, len(loop.records))
                    got = window_throughputs(loop, WINDOWS_PER_ROUND)
                    windows[c][name].extend(got)
                    mean = sum(got) / len(got) if got else 0.0
                    round_means[c][name].append(mean)
                    print(f"C={c} round {r + 1} {name}: {mean:.1f} tok/s{said}", flush=True)
                index += served
            row: dict[str, Any] = {"concurrency": c, "gated_tok_s": windows[c]["gated"],
                                   "ungated_tok_s": windows[c]["ungated"],
                                   "rounds_tok_s": round_means[c],
                                   "gated_windows": round_windows[c],
                                   "round_times": round_times[c]}  # fmt: skip
            row.update(level_figures(row, rounds))
            rows.append(row)
            if on_level is not None:  # saved before the level's line, which says it is done
                on_level(result)
            print(describe_level(row, label), flush=True)
    finally:
        for client in clients.values():
            await client.aclose()
    return result


def rounds_of(row: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Each server's output tok/s per round at one level: ``rounds_tok_s`` where the run kept it, else the
    windows split evenly into ``rounds`` (runs saved before 2026-12-03 kept only windows)."""
    kept = row.get("rounds_tok_s")
    if kept is not None:
        return {name: [float(v) for v in kept[name]] for name in SERVERS}
    split: dict[str, list[float]] = {}
    for name in SERVERS:
        got = [float(v) for v in row[f"{name}_tok_s"]]
        if rounds < 1 or not got or len(got) % rounds:
            raise ValueError(f"{name}_tok_s: {len(got)} windows do not split into {rounds} rounds")
        width = len(got) // rounds
        split[name] = [sum(got[i : i + width]) / width for i in range(0, len(got), width)]
    return split


def level_figures(row: dict[str, Any], rounds: int) -> dict[str, Any]:
    """The ratio over windows (mean of means) and the paired ratio over rounds whose two halves both
    measured something; ``{"error": why}`` where a level has nothing to divide, so the other levels' windows
    are still saved (a run of minutes is not lost to one empty level)."""
    try:
        ratio, lo, hi = ratio_interval(row["gated_tok_s"], row["ungated_tok_s"])
        per_round = rounds_of(row, rounds)
        both = zip(per_round["gated"], per_round["ungated"], strict=True)
        pairs = [(g, u) for g, u in both if g > 0 and u > 0]
        paired, paired_lo, paired_hi = paired_ratio_interval([g for g, _ in pairs], [u for _, u in pairs])
    except ValueError as exc:
        return {"error": str(exc)}
    return {"ratio": ratio, "lo": lo, "hi": hi, "paired_ratio": paired, "paired_lo": paired_lo,
            "paired_hi": paired_hi, "round_ratios": [g / u for g, u in pairs]}  # fmt: skip


def describe_level(row: dict[str, Any], label: str = DEFAULT_LABEL) -> str:
    if "error" in row:
        return f"C={row['concurrency']}: no figure ({row['error']})"
    spread = row["round_ratios"]
    return (f"C={row['concurrency']}: {label} {row['ratio']:.3f}"
            f" ({row['lo']:.3f}-{row['hi']:.3f})"
            f" over windows; {row['paired_ratio']:.3f} ({row['paired_lo']:.3f}-{row['paired_hi']:.3f}) paired"
            f" over {len(spread)} rounds, rounds {min(spread):.3f}-{max(spread):.3f}")  # fmt: skip


def summarize(paths: list[Path]) -> list[dict[str, Any]]:
    """The saved runs' levels, their windows and rounds pooled per concurrency."""
    pooled: dict[int, dict[str, Any]] = {}
    for path in paths:
        try:
            saved = parse_json_text(read_text_capped(path, MAX_RESULT_BYTES))
            rounds = int(saved["rounds"])
            label = str(saved.get("label", DEFAULT_LABEL))
            for level in saved["levels"]:
                per_round = rounds_of(level, rounds)
                into = pooled.setdefault(int(level["concurrency"]), {
                    "concurrency": int(level["concurrency"]), "gated_tok_s": [], "ungated_tok_s": [],
                    "rounds_tok_s": {name: [] for name in SERVERS}, "label": label})  # fmt: skip
                for name in SERVERS:
                    into[f"{name}_tok_s"].extend(float(v) for v in level[f"{name}_tok_s"])
                    into["rounds_tok_s"][name].extend(per_round[name])
        except FileReadError as exc:
            raise SystemExit(f"--summarize: {path}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"no {exc} field" if isinstance(exc, KeyError) else str(exc)
            raise SystemExit(f"--summarize: {path}: not a knob_max_ab.py result ({reason})") from None
    rows = []
    for c in sorted(pooled):
        row = pooled[c]
        row.update(level_figures(row, 1))  # rounds_tok_s is always there by now
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--gated", help="the server with spectower's plugins (knob at max)")
    parser.add_argument("--ungated", help="the same pair served by EAGLE-3 without the plugin")
    summarize_help = "read saved runs back instead of measuring: a line per level, rounds pooled"
    parser.add_argument("--summarize", type=Path, nargs="+", metavar="JSON", help=summarize_help)
    parser.add_argument("--concurrency", default="1,16,64", help="levels, as bench sweep's --concurrency")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0, help="per server, level and round")
    parser.add_argument("--output-len", default="256", help="N, or LOW-HIGH for mixed lengths (e.g. 64-448)")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--label", default=DEFAULT_LABEL, help="what the ratio is, for its printed lines")
    args = parser.parse_args(argv)
    if args.summarize:
        for row in summarize(args.summarize):
            print(describe_level(row, row["label"]))
        return 0
    if not args.gated or not args.ungated:
        raise SystemExit("--gated and --ungated: both servers are needed (or --summarize saved runs)")
    if args.rounds < 1 or args.seconds <= 0:
        raise SystemExit("--rounds must be >= 1 and --seconds > 0")
    try:
        levels = list(parse_concurrency(args.concurrency))  # the sweep's own parser: one line naming the flag
        lengths = parse_output_lengths(args.output_len)
    except BenchError as exc:
        raise SystemExit(str(exc)) from None
    urls = {"gated": args.gated.rstrip("/"), "ungated": args.ungated.rstrip("/")}
    out = args.out

    def save(result: dict[str, Any]) -> None:
        if out is not None:
            atomic_write_text(out, json.dumps(result, indent=1))

    asyncio.run(measure(urls, levels, args.rounds, args.seconds, lengths, args.input_len, label=args.label,
                        on_level=save))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
