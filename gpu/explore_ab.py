"""What the gate's exploration costs on a live server: an A/B of ``spectower_explore_share`` under load.

While a steady closed-loop load runs (``spectower bench load --pattern steps:C``), the share is switched
between the values of ``--shares`` every ``--window`` seconds, in ``--rounds`` interleaved rounds (so drift
hits every share alike). Each window's decode throughput is read from the plugin's own counters
(control/engine_counters.py, summed over DP ranks): output tokens of all decode steps / wall-clock seconds
(the first ``--settle`` seconds after a switch are not counted). The share is set with an unmarked write
(no ``spectower_writer``), which takes no lock, so the gate keeps exploring. Works against the simulator too.

    python3 gpu/explore_ab.py --server http://127.0.0.1:30000 --shares 0,0.02 --window 15 --rounds 2 \\
        --label on-c64 --out explore.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from spectower.collectors.sglang.counters import read_counters
from spectower.control import knob_contract
from spectower.control.speedup import served, sum_ranks


def _headers() -> dict[str, str]:
    path = os.environ.get("SPECTOWER_ADMIN_KEY_FILE")
    key = Path(path).read_text().strip() if path else os.environ.get("SPECTOWER_ADMIN_KEY", "")
    return {"Authorization": f"Bearer {key}"} if key else {}


def totals(client: httpx.Client, server: str) -> tuple[float, float, float, int, int]:
    """(wall time, output tokens, step seconds, explored batches, decode steps) summed over ranks."""
    info = client.get(f"{server}/server_info", timeout=10).json()
    now = time.monotonic()
    blocks = read_counters(info).blocks
    if not blocks:
        raise SystemExit(f"{server} publishes no engine counters")
    total = sum_ranks(blocks)
    explored = sum(int((s.get("spectower") or {}).get("explore", {}).get("batches", 0))
                   for s in info.get("internal_states", []))  # fmt: skip
    done = served(total)  # the settling steps (into or out of an exploration run) are served too
    return now, done["tokens"], done["time_s"], explored, int(done["steps"])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--shares", default="0,0.02")
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, required=True, help="a JSON file; results are appended")
    args = parser.parse_args()
    shares = [knob_contract.explore_share_of(float(s), "--shares") for s in args.shares.split(",")]
    windows: dict[float, list[dict[str, float]]] = {s: [] for s in shares}
    with httpx.Client(headers=_headers()) as client:
        for _ in range(args.rounds):
            for share in shares:
                answer = client.post(f"{args.server}/set_internal_state",
                                     json={"server_args": {knob_contract.EXPLORE_KEY: share}}, timeout=10)
                if answer.status_code != 200 or not all(answer.json()):
                    raise SystemExit(f"setting the share {share} failed: {answer.status_code} {answer.text}")
                time.sleep(args.settle)
                t0, tok0, sec0, exp0, steps0 = totals(client, args.server)
                time.sleep(args.window)
                t1, tok1, sec1, exp1, steps1 = totals(client, args.server)
                windows[share].append({"tok_s": (tok1 - tok0) / (t1 - t0), "busy": (sec1 - sec0) / (t1 - t0),
                                       "explored": (exp1 - exp0) / max(1, steps1 - steps0)})  # fmt: skip
                print(f"{args.label} share {share:g}: {windows[share][-1]['tok_s']:.0f} tok/s, explored "
                      f"{windows[share][-1]['explored']:.2%} of the steps", flush=True)
        client.post(f"{args.server}/set_internal_state",
                    json={"server_args": {knob_contract.EXPLORE_KEY: knob_contract.DEFAULT_EXPLORE_SHARE}},
                    timeout=10)  # fmt: skip
    base = statistics.fmean(w["tok_s"] for w in windows[shares[0]])
    result: dict[str, Any] = {"label": args.label, "window_s": args.window, "rounds": args.rounds,
                              "shares": {}}
    for share, runs in windows.items():
        mean = statistics.fmean(w["tok_s"] for w in runs)
        result["shares"][str(share)] = {
            "tok_s": round(mean, 1),
            "tok_s_windows": [round(w["tok_s"], 1) for w in runs],
            "explored_step_share": round(statistics.fmean(w["explored"] for w in runs), 4),
            "vs_first": round(mean / base, 4) if base else None,
        }
    print(json.dumps(result), flush=True)
    existing = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*existing, result], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
