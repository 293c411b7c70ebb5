"""What the gate's exploration costs on a live server: an A/B of ``spectower_explore_share`` under load.

While a steady closed-loop load runs (``spectower bench load --pattern steps:C``), the share is switched
between the values of ``--shares`` every ``--window`` seconds, in ``--rounds`` interleaved rounds (so drift
hits every share alike). Each window's decode throughput is read from the plugin's own counters
(plugin/engine_counters.py, summed over DP ranks): output tokens of all decode steps / wall-clock seconds
(the first ``--settle`` seconds after a switch are not counted). The share is set with an unmarked write
(no ``spectower_writer``), which takes no lock, so the gate keeps exploring. Works against the simulator too.

    python3 benchmarks/gpu/explore_ab.py --server http://127.0.0.1:30000 --shares 0,0.02 \\
        --window 15 --rounds 2 --label on-c64 --out explore.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx
from spectower.collectors.bench.server import read_decode_tokens
from spectower.collectors.sglang.counters import read_counters
from spectower.plugin import knob_contract
from spectower.plugin.engine_counters import MODES, served, sum_ranks

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # as a script: the checkout, for its parser
from benchmarks.number_lists import list_type

SHARES = list_type(float, lambda share: 0 <= share <= knob_contract.MAX_EXPLORE_SHARE,
                   f"each share must be in 0..{knob_contract.MAX_EXPLORE_SHARE:g}")  # fmt: skip


def _headers() -> dict[str, str]:
    path = os.environ.get("SPECTOWER_ADMIN_KEY_FILE")
    key = Path(path).read_text().strip() if path else os.environ.get("SPECTOWER_ADMIN_KEY", "")
    return {"Authorization": f"Bearer {key}"} if key else {}


class Totals(NamedTuple):
    """One reading of the server: the plugin's counters summed over ranks, and SGLang's own decode count."""

    at: float  # this client's monotonic clock
    tokens: float  # output tokens of every decode step the counters measured (served())
    time_s: float  # their step time
    explored: int  # batches the gate explored
    steps: int
    per_mode: dict[str, tuple[float, float]]  # mode -> (steps, tokens), every bin together
    sglang_tokens: float | None  # sglang:realtime_tokens_total{mode="decode"}: the engine's own count
    sglang_at: float  # when that count was read: each count's rate is over its own reads (a busy client reads
    # /metrics a few hundred ms after /server_info, and unevenly: over a 2-s window that skewed the two 18 %)


def _sglang_decode_tokens(server: str) -> float | None:
    async def read() -> float | None:
        async with httpx.AsyncClient(base_url=server) as client:
            return await read_decode_tokens(client)

    return asyncio.run(read())


def totals(client: httpx.Client, server: str) -> Totals:
    asked = time.monotonic()
    info = client.get(f"{server}/server_info", timeout=10).json()
    now = (asked + time.monotonic()) / 2  # the read's midpoint
    asked = time.monotonic()
    sglang_tokens = _sglang_decode_tokens(server)
    sglang_at = (asked + time.monotonic()) / 2
    blocks = read_counters(info).blocks
    if not blocks:
        raise SystemExit(f"{server} publishes no engine counters")
    total = sum_ranks(blocks)
    explored = sum(int((s.get("spectower") or {}).get("explore", {}).get("batches", 0))
                   for s in info.get("internal_states", []))  # fmt: skip
    done = served(total)  # the settling steps (into or out of an exploration run) are served too
    per_mode = {mode: (float(sum(total[mode]["steps"])), float(sum(total[mode]["tokens"]))) for mode in MODES}
    return Totals(now, done["tokens"], done["time_s"], explored, int(done["steps"]), per_mode, sglang_tokens,
                  sglang_at)  # fmt: skip


def window(before: Totals, after: Totals) -> dict[str, Any]:
    """One window's figures: tok/s by the counters and by SGLang's own count (they should agree: a gap
    says the counters miscount), the busy share, the explored share, tokens per step of each mode."""
    wall = after.at - before.at
    row: dict[str, Any] = {
        "tok_s": (after.tokens - before.tokens) / wall,
        "busy": (after.time_s - before.time_s) / wall,
        "explored": (after.explored - before.explored) / max(1, after.steps - before.steps),
        "sglang_tok_s": None,
    }
    if before.sglang_tokens is not None and after.sglang_tokens is not None:
        counted = after.sglang_tokens - before.sglang_tokens
        row["sglang_tok_s"] = counted / (after.sglang_at - before.sglang_at)
    for mode in MODES:
        steps = after.per_mode[mode][0] - before.per_mode[mode][0]
        tokens = after.per_mode[mode][1] - before.per_mode[mode][1]
        row[f"{mode}_steps"] = steps
        row[f"{mode}_tokens_per_step"] = tokens / steps if steps else None
    return row


def wait_for_decoding(client: httpx.Client, server: str, wait_s: float, poll_s: float = 0.5) -> None:
    """Return once the server's counters show decode steps moving; a window before the load arrives would
    measure nothing (0 tok/s by both counts, no tokens per step) and read as a result."""
    first = totals(client, server)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(poll_s)
        if totals(client, server).steps > first.steps:
            return
    raise SystemExit(f"--wait-load: {server} ran no decode step within {wait_s:g} s: is the load running?")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--shares", type=SHARES, default="0,0.02",
                        help="the exploration shares to alternate, comma-separated (default 0,0.02)")
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wait-load", type=float, default=60.0,
                        help="seconds to wait for the server to decode before the first window")
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, required=True, help="a JSON file; results are appended")
    args = parser.parse_args()
    shares: list[float] = args.shares
    windows: dict[float, list[dict[str, Any]]] = {s: [] for s in shares}
    with httpx.Client(headers=_headers()) as client:
        wait_for_decoding(client, args.server, args.wait_load)
        for _ in range(args.rounds):
            for share in shares:
                answer = client.post(
                    f"{args.server}/set_internal_state",
                    json={"server_args": {knob_contract.EXPLORE_KEY: share}},
                    timeout=10,
                )
                if answer.status_code != 200 or not all(answer.json()):
                    raise SystemExit(f"setting the share {share} failed: {answer.status_code} {answer.text}")
                time.sleep(args.settle)
                first = totals(client, args.server)
                time.sleep(args.window)
                row = window(first, totals(client, args.server))
                windows[share].append(row)
                sglang = _fmt(row["sglang_tok_s"], ".0f")
                print(f"{args.label} share {share:g}: {row['tok_s']:.0f} tok/s (SGLang's count {sglang}), "
                      f"explored {row['explored']:.2%} of the steps; tokens per step drafted "
                      f"{_fmt(row['drafted_tokens_per_step'])}, gated {_fmt(row['gated_tokens_per_step'])}",
                      flush=True)  # fmt: skip
        client.post(f"{args.server}/set_internal_state",
                    json={"server_args": {knob_contract.EXPLORE_KEY: knob_contract.DEFAULT_EXPLORE_SHARE}},
                    timeout=10)  # fmt: skip
    base = statistics.fmean(w["tok_s"] for w in windows[shares[0]])
    result: dict[str, Any] = {
        "label": args.label,
        "window_s": args.window,
        "rounds": args.rounds,
        "shares": {},
    }
    for share, runs in windows.items():
        mean = statistics.fmean(w["tok_s"] for w in runs)
        result["shares"][str(share)] = {
            "tok_s": round(mean, 1),
            "tok_s_windows": [round(w["tok_s"], 1) for w in runs],
            "explored_step_share": round(statistics.fmean(w["explored"] for w in runs), 4),
            "sglang_tok_s": _mean_of(runs, "sglang_tok_s"),
            "windows": [{k: round(v, 4) if isinstance(v, float) else v for k, v in w.items()} for w in runs],
            "vs_first": round(mean / base, 4) if base else None,
        }
    print(json.dumps(result), flush=True)
    existing = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*existing, result], indent=1))
    return 0


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return format(value, spec) if value is not None else "-"


def _mean_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [w[key] for w in runs if w.get(key) is not None]
    return round(statistics.fmean(values), 1) if values else None


if __name__ == "__main__":
    raise SystemExit(main())
