"""Writes the tiny constructed pair with benchmarks/gpu/make_models.py and checks it with real model code,
INSIDE the SGLang venv (tests/sglang_env.sh): ``check_pair.py REPO_ROOT OUT_DIR FIXED_SHARE``. Prints ONE JSON
object on its last stdout line (observations beside the construction's expectations); tests/test_gpu_models.py
asserts.

What is real and what is not:

- Target: transformers' ``LlamaForCausalLM`` loads ``OUT_DIR/target`` (config, safetensors, tokenizer) and
  decodes greedily. The auxiliary hidden states the draft reads are its hidden states at the layers SGLang
  captures (``eagle_aux_hidden_state_layer_ids`` + 1: the input of that layer).
- Draft: SGLang's own ``LlamaForCausalLMEagle3`` (the installed version, or the 0.5.17 overlay first on
  PYTHONPATH), built on CPU with single-process gloo groups, loaded by its own ``load_weights`` from SGLang's
  own ``safetensors_weights_iterator``, given the target's embedding with its ``set_embed`` (as SGLang's EAGLE
  worker does), and run through its own ``model.forward`` (fc over the concatenated aux states, the decoder
  layer, the final norm). CONSTRUCTED: the attention core (``RadixAttention`` needs a KV pool and a GPU
  backend) is a plain causal attention over the whole draft context, recomputed each call instead of cached;
  the logits are ``norm output @ lm_head.T`` (what the logits processor computes at TP 1), the draft token is
  ``hot_token_id[argmax]`` (SGLang's d2t mapping).
- The speculative loop (topk 1, 3 draft steps, verify = the target's greedy tokens, commit accepted drafts +
  bonus, cut at max_new_tokens) is re-implemented here after SGLang's EAGLE worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import math
import os
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

STEPS = 3
MAX_NEW = 14  # not a multiple of the per-verify yields: the last verify step is cut


def load_make_models(repo: Path) -> Any:
    script = repo / "benchmarks" / "gpu" / "make_models.py"
    spec = importlib.util.spec_from_file_location("make_models", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_models"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def init_sglang_cpu() -> str:
    """Single-process gloo groups and a published server-args context, on SGLang 0.5.17's or 0.5.23's API."""
    with socket.socket() as sock:  # gloo's rendezvous store: a free port (checks may run side by side)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import sglang
    from sglang.srt.distributed import parallel_state

    if not torch.distributed.is_initialized():
        parallel_state.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    if "tensor_model_parallel_size" in inspect.signature(parallel_state.initialize_model_parallel).parameters:
        from sglang.srt.runtime_context import get_context  # 0.5.17: widths are arguments

        get_context().override_server_args(device="cpu").install()
        parallel_state.initialize_model_parallel(1, 1, backend="gloo")
    else:  # 0.5.23: widths come from the published context (what sglang.test.test_utils does)
        from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
        from sglang.srt.server_args import ServerArgs

        reset_context()
        publish(ServerArgs(model_path="dummy", device="cpu"), role="test", ranks=SpawnRanks(world_rank=0))
        get_parallel().override_permanently(world_group=parallel_state._WORLD)
        parallel_state.initialize_model_parallel(backend="gloo")
    # Neither CUDA nor SGLang's CPU engine (that one needs sgl_kernel): tell the rotary embedding it is on a
    # CPU so it keeps its own torch implementation instead of importing vllm's kernel.
    import sglang.srt.layers.rotary_embedding.base as rotary_base

    rotary_base._is_cpu = True
    return str(sglang.__version__)


class CausalAttention(torch.nn.Module):
    """Stands in for RadixAttention: causal (grouped-query) attention over the tokens of this call."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim

    def forward(self, q: Any, k: Any, v: Any, forward_batch: Any, **_: Any) -> Any:
        n = q.shape[0]
        q = q.view(n, self.heads, self.head_dim).transpose(0, 1)
        k = k.view(n, self.kv_heads, self.head_dim).transpose(0, 1)
        v = v.view(n, self.kv_heads, self.head_dim).transpose(0, 1)
        out = torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True
        )
        return out.transpose(0, 1).reshape(n, self.heads * self.head_dim).to(q.dtype)


class Draft:
    def __init__(self, folder: Path, target_embed: Any) -> None:
        from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator
        from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(folder)
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)  # what SGLang's loader does for a bfloat16 checkpoint
        try:
            model = LlamaForCausalLMEagle3(config)
        finally:
            torch.set_default_dtype(before)
        with torch.no_grad():
            for param in model.parameters():
                param.fill_(math.nan)  # whatever load_weights does not reach stays NaN
        model.load_weights(safetensors_weights_iterator([str(folder / "model.safetensors")]))
        self.not_loaded = sorted(
            n
            for n, p in model.named_parameters()
            if n != "model.embed_tokens.weight" and bool(p.isnan().any())
        )
        model.set_embed(target_embed)
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.attn = CausalAttention(attn.num_heads, attn.num_kv_heads, attn.head_dim)
        self.model = model.eval()
        hot = model.get_hot_token_id()
        self.hot = hot.tolist() if hot is not None else None

    def chain(self, tokens: list[int], target_aux: Any, steps: int) -> list[int]:
        """EAGLE's draft for one request: step 1 reads (token i+1, target aux state i) for every committed
        position i (``tokens`` are those next tokens, the bonus token last); each later step appends its own
        guess with the draft's own output state."""
        m = self.model.model
        ids = torch.tensor(tokens)
        hidden = target_aux  # the concatenated aux states: SGLang's forward applies fc itself
        guesses: list[int] = []
        with torch.no_grad():
            for _ in range(steps):
                batch = types.SimpleNamespace(
                    spec_info=types.SimpleNamespace(hidden_states=hidden),
                    mm_input_embeds=None,
                    mrope_positions=None,
                )
                positions = torch.arange(len(ids))
                to_logits, (to_next,) = m(ids, positions, batch, input_embeds=m.embed_tokens(ids))
                logits = to_logits[-1].float() @ self.model.lm_head.weight.float().T
                draft_id = int(logits.argmax())
                guess = self.hot[draft_id] if self.hot is not None else draft_id
                guesses.append(guess)
                if hidden.shape[-1] != to_next.shape[-1]:  # later calls carry fc'd states: fc once
                    hidden = m.fc(hidden)
                hidden = torch.cat([hidden, to_next[-1:]])
                ids = torch.cat([ids, torch.tensor([guess])])
        return guesses


class Target:
    def __init__(self, folder: Path, aux_layer_ids: list[int]) -> None:
        from transformers import AutoTokenizer, LlamaForCausalLM

        model, info = LlamaForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, output_loading_info=True)
        self.loading = {k: sorted(map(str, v)) for k, v in info.items() if v}
        self.model = model.eval()
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.capture = [i + 1 for i in aux_layer_ids]  # SGLang captures the input of layer id + 1

    def run(self, seq: list[int]) -> tuple[list[int], Any, Any]:
        """(greedy next token at every position, concatenated aux states per position, embedding rows)."""
        with torch.no_grad():
            out = self.model(torch.tensor([seq]), output_hidden_states=True)
        states = out.hidden_states
        aux = torch.cat([states[i][0] for i in self.capture], dim=-1)
        return out.logits[0].float().argmax(-1).tolist(), aux, states[0][0]

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        seq = list(prompt)
        for _ in range(n):
            seq.append(self.run(seq)[0][-1])
        return seq[len(prompt) :]


def speculate(target: Target, draft: Draft, prompt: list[int], max_new: int) -> dict[str, Any]:
    """Greedy EAGLE-3 decoding, topk 1: prefill, then verify steps until max_new tokens."""
    preds, _, _ = target.run(prompt)
    out = [preds[-1]]
    correct: list[int] = []
    committed: list[int] = []
    guesses_seen: list[list[int]] = []
    while len(out) < max_new:
        seq = prompt + out
        _, aux, _ = target.run(seq)
        guesses = draft.chain(seq[1:], aux[:-1], STEPS)
        guesses_seen.append(guesses)
        preds, _, _ = target.run(seq + guesses)
        agreed = 0
        while agreed < len(guesses) and guesses[agreed] == preds[len(seq) - 1 + agreed]:
            agreed += 1
        run = [*guesses[:agreed], preds[len(seq) - 1 + agreed]][: max_new - len(out)]
        out += run
        correct.append(agreed)
        committed.append(len(run))
    return {
        "continuation": out,
        "spec_verify_ct": len(correct),
        "correct_drafts": correct,
        "tokens_per_verify": committed,
        "guesses": guesses_seen,
    }


def main(repo: Path, out_dir: Path, fixed_share: float, miss_share: float = 0.0) -> dict[str, Any]:
    t0 = time.monotonic()
    mm = load_make_models(repo)
    shape = mm.SHAPES["tiny"]
    pair = mm.Pair(shape, fixed_share, miss_share)
    written = mm.write_pair(out_dir, pair)
    result: dict[str, Any] = {"written": written, "write_s": round(time.monotonic() - t0, 2)}
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny tensors: threads only cost on a loaded machine
    result["sglang_version"] = init_sglang_cpu()
    target = Target(out_dir / "target", list(shape.aux_layer_ids))
    result["target_loading"] = target.loading

    routes = pair.routes().tolist()
    generic_fix = next(t for t in range(3, shape.vocab) if routes[t] == mm.TO_FIX and t != shape.fix)
    generic_cyc = next(t for t in range(3, shape.vocab) if routes[t] == mm.TO_A)
    text = f"t7 t{generic_fix} t{shape.cyc_a}"
    result["tokenizer"] = {
        "text": text,
        "ids": target.tokenizer(text, add_special_tokens=True)["input_ids"],
        "expected": mm.encode(text, shape.vocab),
        "decoded": target.tokenizer.decode(mm.encode(text, shape.vocab)),
    }

    # the residual stream is the embedding at every captured depth
    _, aux, embed = target.run(list(range(3, 40)))
    result["aux_is_embedding"] = bool(torch.equal(aux, embed.repeat(1, len(shape.aux_layer_ids))))

    draft = Draft(out_dir / "draft", target.model.model.embed_tokens.weight)
    result["draft_not_loaded"] = draft.not_loaded
    result["hot_token_id"] = {"got": draft.hot, "expected": pair.draft_vocab()}

    # the draft's first guess after (previous token p, bonus token f(p)): the special and constructed ids and
    # every 8th id (both routes of the hash, each route's head row)
    mismatches = []
    probes = sorted({0, 1, 2, shape.fix, shape.cyc_a, shape.cyc_b, shape.miss, *range(3, shape.vocab, 8)})
    result["first_guess_probes"] = len(probes)
    for p in probes:
        seq = [p, pair.next_token(p)]
        _, aux, _ = target.run(seq)
        got = draft.chain(seq[1:], aux[:-1], 1)[0]
        if got != pair.route_draft()[pair.route(p)]:
            mismatches.append([p, got])
    result["first_guess_mismatches"] = mismatches

    prompts = {
        "fixed point": [5, 9, shape.fix],
        "into the fixed point": [11, generic_fix],
        "2-cycle at a": [5, shape.cyc_a],
        "2-cycle at b": [shape.cyc_b],
        "into the 2-cycle": [17, 23, generic_cyc],
    }
    if miss_share > 0:  # the fixed point the draft never guesses
        generic_miss = next(t for t in range(3, shape.vocab) if routes[t] == mm.TO_MISS and t != shape.miss)
        prompts["miss point"] = [5, shape.miss]
        prompts["into the miss point"] = [13, generic_miss]
    rng = torch.Generator().manual_seed(1)
    for i in range(3):
        prompts[f"random {i}"] = torch.randint(3, shape.vocab, (4,), generator=rng).tolist()
    cases = {}
    for name, prompt in prompts.items():
        expected = pair.expect(prompt, MAX_NEW, STEPS)
        cases[name] = {
            "prompt": prompt,
            "expected": expected,
            "greedy": target.greedy(prompt, MAX_NEW),
            "speculative": speculate(target, draft, prompt, MAX_NEW),
        }
    result["cases"] = cases
    result["seconds"] = round(time.monotonic() - t0, 2)
    return result


if __name__ == "__main__":
    repo_root, out, share = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    miss = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    with contextlib.redirect_stdout(sys.stderr):  # SGLang and transformers may print; the JSON goes last
        report = main(repo_root, out, share, miss)
    print(json.dumps(report))
    sys.stdout.flush()
    with contextlib.suppress(Exception):
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
