"""Does the real server draft as the construction says? Greedy ``/generate`` requests against the EAGLE-3
server (and the plain one), compared with ``benchmarks/gpu/make_models.py``'s expectations: the continuation
token for token, and SGLang's own per-request ``spec_verify_ct`` (verify steps) for each request.

    python3 benchmarks/gpu/check_acceptance.py --server URL [--plain URL] [--out accept.json]

Exit 1 when a continuation or a verify count differs from what the construction says; 2 (one line) when a
server cannot be reached or answers with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import httpx
from spectower.collectors.http import BoundedReadError, request_bounded

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import SHAPES, Pair

MAX_NEW_TOKENS = 24
TIMEOUT_S = 60.0  # each answer in all (one request's whole exchange)
MAX_BYTES = 4 * 1024 * 1024  # a 24-token answer, or /server_info, is a few KiB


class Server:
    """The two reads this check makes, each bounded (a total deadline, a byte cap), over one client."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._client = httpx.AsyncClient()

    def json(self, method: str, url: str, body: object = None) -> dict[str, Any]:
        answer = self._loop.run_until_complete(
            request_bounded(self._client, method, url, json=body, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)
        )
        if answer.status_code >= 400:
            raise BoundedReadError(f"{url}: HTTP {answer.status_code}: {answer.text[:200]}")
        data = json.loads(answer.content)
        if not isinstance(data, dict):
            raise ValueError(f"{url}: not a JSON object")
        return data

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.close()


def generate(server: Server, url: str, prompt: list[int]) -> dict[str, Any]:
    sampling = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    return server.json("POST", f"{url}/generate", {"input_ids": prompt, "sampling_params": sampling})


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
    client = Server()
    try:
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
        info = client.json("GET", f"{args.server}/server_info")
    finally:
        client.close()
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
    except (BoundedReadError, ValueError) as exc:  # a server not up, an error answer, a body not JSON
        print(f"check_acceptance: {exc}", file=sys.stderr)
        sys.exit(2)
