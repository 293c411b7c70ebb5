"""Does the real server draft as the construction says? Greedy ``/generate`` requests against the EAGLE-3
server (and the plain one), compared with ``gpu/make_models.py``'s expectations: the continuation token for
token, and SGLang's own per-request ``spec_verify_ct`` (verify steps) for each request.

    python3 gpu/check_acceptance.py --server URL [--plain URL] [--out accept.json]

Exit 1 when a continuation or a verify count differs from what the construction says; 2 (one line) when a
server cannot be reached or answers with an error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import SHAPES, Pair

MAX_NEW_TOKENS = 24
TIMEOUT_S = 60.0


def generate(client: httpx.Client, url: str, prompt: list[int]) -> dict[str, Any]:
    sampling = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    body = {"input_ids": prompt, "sampling_params": sampling}
    answer = client.post(f"{url}/generate", json=body, timeout=TIMEOUT_S)
    answer.raise_for_status()
    data: dict[str, Any] = answer.json()
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--plain")
    parser.add_argument("--fixed-share", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--gated", action="store_true",
                        help="the knob is at 0: the same tokens, one per verify step (no draft lands)")
    args = parser.parse_args(argv)
    pair = Pair(SHAPES["8b"], args.fixed_share)
    # prompts ending on a fixed-point route and on the 2-cycle route, plus the cycle's own tokens
    fixed = [t for t in range(10, 200) if pair.route(t) == 0][:3]
    cycle = [t for t in range(10, 200) if pair.route(t) != 0][:3]
    prompts = [[5, 6, 7, t] for t in fixed + cycle]
    rows, ok = [], True
    with httpx.Client() as client:
        for prompt in prompts:
            want = pair.expect(prompt, MAX_NEW_TOKENS)
            if args.gated:  # prefill gives the first token, then each one-token verify one more
                want = {**want, "spec_verify_ct": MAX_NEW_TOKENS - 1}
            got = generate(client, args.server, prompt)
            meta = got.get("meta_info", {})
            row = {"prompt": prompt, "want_tokens": want["continuation"], "got_tokens": got.get("output_ids"),
                   "want_verify_ct": want["spec_verify_ct"], "got_verify_ct": meta.get("spec_verify_ct"),
                   "got_accept_length": meta.get("spec_accept_length")}  # fmt: skip
            if args.plain:
                row["plain_tokens"] = generate(client, args.plain, prompt).get("output_ids")
            row["ok"] = (row["got_tokens"] == want["continuation"]
                         and row["got_verify_ct"] == want["spec_verify_ct"]
                         and (not args.plain or row["plain_tokens"] == want["continuation"]))  # fmt: skip
            ok &= bool(row["ok"])
            rows.append(row)
            same = "ok" if row["got_tokens"] == want["continuation"] else "DIFFER"
            print(f"prompt ..{prompt[-1]}: tokens {same}"
                  f", verify steps {row['got_verify_ct']} (want {want['spec_verify_ct']})"
                  f", accept length {row['got_accept_length']}", flush=True)  # fmt: skip
        info = client.get(f"{args.server}/server_info", timeout=TIMEOUT_S).json()
    states = info.get("internal_states") or [{}]
    accept = states[0].get("avg_spec_accept_length")
    summary = {"ok": ok, "requests": rows, "server_spec_accept_length": accept}
    print(f"server avg_spec_accept_length {summary['server_spec_accept_length']}; all as constructed: {ok}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (httpx.HTTPError, ValueError) as exc:  # a server not up, an error answer, a body not JSON
        print(f"check_acceptance: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)
