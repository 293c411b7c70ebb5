"""Same simulator, same profile, two clients: SGLang's own benchmark client and spectower's sweep client.

    python3 benchmarks/compare_sglang_client.py [--profile NAME] [--concurrency 1,8,32] [--num-prompts N]
                                                [--input-len 8] [--output-len 64] [--sglang-python PATH]

Runs ``python -m sglang.benchmark.serving --backend sglang-oai --dataset-name random-ids`` (from the SGLang
0.5.23 venv that ``tests/sglang_env.sh`` builds; it needs ``datasets`` installed there) and spectower's
closed loop with the same request count, lengths and ``--max-concurrency``, both modes, and prints both
``output_throughput`` figures (SGLang's definition: output tokens / wall time of the run) and their ratio.

Nothing is downloaded: random-ids only needs a tokenizer for its vocabulary size and for decoding the ids
into prompt text, so a byte-level tokenizer is built locally (``tokenizers``) and passed with
``--tokenizer``; the simulator reports real token counts, SGLang's client counts ``ignore_eos`` lengths.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.loadgen import run_closed_loop
from spectower.collectors.bench.prompts import PromptFactory
from spectower.collectors.bench.stats import point_figures
from spectower.collectors.bench.stream import RequestShape
from spectower.collectors.bench.sweep import parse_concurrency
from spectower.simulator.profile import load_profile

from benchmarks.simulator_process import SimulatorProcess

DEFAULT_SGLANG_PYTHON = Path.home() / ".cache/spectower/sglang-0.5.23/bin/python"
TOLERANCE = 0.05

# Built with `tokenizers` inside the SGLang venv: byte-level, one token per byte (256 ids). Every non-empty
# text chunk then retokenizes to >= 1 token: SGLang's client divides each chunk's ITL by that count.
_MAKE_TOKENIZER = r"""
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
vocab = {ch: i for i, ch in enumerate(alphabet)}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
"""


def make_tokenizer(python: Path, where: Path) -> None:
    subprocess.run(
        [str(python), "-c", _MAKE_TOKENIZER, str(where)], check=True, capture_output=True, text=True
    )


def run_sglang_client(
    python: Path, base_url: str, tokenizer: Path, c: int, n: int, args: argparse.Namespace, out_file: Path
) -> dict:
    argv = [str(python), "-m", "sglang.benchmark.serving", "--backend", "sglang-oai", "--base-url", base_url,
            "--dataset-name", "random-ids", "--tokenizer", str(tokenizer), "--num-prompts", str(n),
            "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
            "--random-range-ratio", "1.0", "--max-concurrency", str(c), "--output-file", str(out_file),
            "--seed", "1", "--warmup-requests", "1", "--disable-tqdm"]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"SGLang's client failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out_file.read_text().strip().splitlines()[-1])


async def run_ours(base_url: str, c: int, n: int, args: argparse.Namespace) -> dict:
    limits = httpx.Limits(max_connections=c + 8, max_keepalive_connections=c + 8)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=600.0) as client:
        prompts = PromptFactory(args.input_len, as_text=True, seed=1)
        shape = RequestShape(api="openai", output_len=args.output_len)
        loop = await run_closed_loop(client, prompts, shape, c, num_requests=n)
    return point_figures(loop)


def set_knob(sim: SimulatorProcess, value: int) -> None:
    body = {"server_args": {"spectower_spec_max_bs": value}}
    r = httpx.post(f"{sim.base_url}/set_internal_state", json=body, headers=sim.admin_headers, timeout=10)
    r.raise_for_status()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="glm5-nvfp4-8x-rtx-pro-6000")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--requests-per-stream", type=int, default=4, help="num-prompts = this x concurrency")
    ap.add_argument("--input-len", type=int, default=8)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--modes", default="on,off")
    ap.add_argument(
        "--sglang-python",
        type=Path,
        default=Path(os.environ.get("SPECTOWER_SGLANG_PYTHON", DEFAULT_SGLANG_PYTHON)),
    )
    args = ap.parse_args()
    if not args.sglang_python.exists():
        sys.exit(f"no SGLang venv at {args.sglang_python} (build it with tests/sglang_env.sh)")
    profile = load_profile(args.profile)
    try:  # the product's own parser of a concurrency list, as `spectower bench sweep --concurrency`
        levels = list(parse_concurrency(args.concurrency))
    except BenchError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, load average "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; profile {args.profile}; "
        f"input {args.input_len} / output {args.output_len} tokens"
    )
    print(
        f"{'C':>4} {'mode':>4} {'N':>5} {'sglang tok/s':>13} {'spectower tok/s':>16} {'ratio':>7} "
        f"{'profile':>8}"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp, SimulatorProcess(profile=args.profile, admin_key="cmp") as sim:
        tok_dir = Path(tmp) / "tokenizer"
        make_tokenizer(args.sglang_python, tok_dir)
        for c in levels:
            n = max(c * args.requests_per_stream, 8)
            for mode in args.modes.split(","):
                set_knob(sim, profile.max_running_requests if mode == "on" else 0)
                theirs = run_sglang_client(
                    args.sglang_python,
                    sim.base_url,
                    tok_dir,
                    c,
                    n,
                    args,
                    Path(tmp) / f"sglang-{c}-{mode}.jsonl",
                )
                ours = asyncio.run(run_ours(sim.base_url, c, n, args))
                a, b = theirs["output_throughput"], ours["output_throughput"]
                worst = max(worst, abs(b / a - 1))
                expected = profile.output_tok_s(c, mode == "on")
                print(
                    f"{c:>4} {mode:>4} {n:>5} {a:>13.1f} {b:>16.1f} {b / a:>7.3f} {expected:>8.1f}",
                    flush=True,
                )
    verdict = "within" if worst <= TOLERANCE else "NOT within"
    print(f"largest difference {worst:.1%}: {verdict} {TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
