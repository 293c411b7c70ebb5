"""Writes the GPU check's model pair: a Llama target and a one-layer EAGLE-3 draft whose drafts really land.

The shapes are real (``--shape 8b``: Llama-3.1-8B's, so every kernel costs what it costs for a real 8B model;
``--shape tiny`` for CPU tests); the weights are constructed so that greedy decoding and the draft's guesses
are known in advance:

* Every weight of every target decoder layer is zero (norm weights are one), so each layer adds nothing and
  the residual stream at every depth is the token's embedding. The embedding puts token ``x`` on one of three
  unit directions, its *route* ``route(x)``, and ``lm_head`` reads the route as the next token:
  route ``TO_FIX`` -> ``fix`` (and ``fix`` itself is on that route: a fixed point, ``fix fix fix ...``),
  route ``TO_A`` -> ``cyc_a``, route ``TO_B`` -> ``cyc_b``, with ``cyc_a`` on ``TO_B`` and ``cyc_b`` on
  ``TO_A`` (a 2-cycle, ``a b a b ...``). Every other token sits on ``TO_FIX`` or ``TO_A``: a share
  ``fixed_share`` of the ids (chosen by a multiplicative hash) go to the fixed point. With ``miss_share`` > 0
  a fourth route ``TO_MISS`` leads to ``miss``, a second fixed point that the draft never guesses (below).
* The draft keeps only its norms (ones), ``fc`` (an identity from the first auxiliary hidden state) and its
  head; its attention and MLP are zero, so its output is the target hidden state it was handed. SGLang hands
  the draft, with the bonus token's embedding, the target hidden state of the token BEFORE the bonus token,
  so the draft head reads a route as the token two steps on: ``TO_FIX`` -> ``fix``, ``TO_A`` -> ``cyc_b``,
  ``TO_B`` -> ``cyc_a``, and ``TO_MISS`` -> ``fix`` (wrong: ``miss`` follows). Later draft steps carry the
  draft's own output, the same hidden state, so they repeat that guess.
* Hence, at ``--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4``: a
  request on the fixed point accepts all three drafts (4 tokens per verify), one in the 2-cycle accepts the
  first draft only (2 per verify), one on ``miss`` none (1 per verify: the bonus token). Lowering the fixed
  share and raising the miss share lowers the accept length, and with it the crossover (issue #32 asks for a
  pair crossing near 16, as GLM-5 on 8x RTX PRO 6000 does). ``expect()`` (CLI: ``expect``) gives the exact
  greedy continuation and the tokens per verify step for a prompt. The draft vocabulary is smaller than the
  target's, as in real EAGLE-3 checkpoints (``d2t`` maps draft ids to target ids, ``t2d`` marks target ids the
  draft can emit).

The safetensors files are written by hand (a JSON header, then raw little-endian data); all-zero tensors are
left as file holes, so the 8B pair (16 GB + 0.85 GB apparent) takes seconds and ~0.5 GB of disk. Needs numpy,
plus ``tokenizers`` for the tokenizer; no torch.

    python3 benchmarks/gpu/make_models.py write ROOT [--shape 8b|tiny] [--fixed-share 0.5] [--miss-share 0]
    python3 benchmarks/gpu/make_models.py expect --prompt "t7 t12" --max-new-tokens 24 [--shape ...] \\
        [--fixed-share ...]
    python3 benchmarks/gpu/make_models.py mix --ids 10:1000 --max-new-tokens 256  # a random-id load's figures
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Routes: which unit direction of the hidden space a token's embedding sits on.
TO_FIX, TO_B, TO_A, TO_MISS = 0, 1, 2, 3
EMBED_SCALE = 1.0  # the embedding's one non-zero entry per row (RMS-normalised away anyway)
SPECIALS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2; every other id i is the word f"t{i}"

# The EAGLE-3 settings the expectations are for (run_check.sh serves with these).
SPEC_STEPS = 3


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    draft_vocab: int
    aux_layer_ids: tuple[int, ...]  # eagle_aux_hidden_state_layer_ids: the target layers the draft reads
    fix: int  # the fixed point and the 2-cycle's two tokens: target ids outside the draft's identity range
    cyc_a: int
    cyc_b: int
    miss: int  # the fixed point the draft never guesses (reached only with a miss share)
    max_positions: int = 8192

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


SHAPES = {
    # Llama-3.1-8B; the draft as the public EAGLE-3 drafts for it are (one layer, 32000-token vocabulary)
    "8b": Shape(layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8, vocab=128256,
                draft_vocab=32000, aux_layer_ids=(1, 15, 28), fix=90001, cyc_a=90002, cyc_b=90003,
                miss=90004),
    # the same structure at CPU-test size (grouped KV heads kept)
    "tiny": Shape(layers=4, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=512, draft_vocab=128,
                  aux_layer_ids=(0, 1, 2), fix=301, cyc_a=302, cyc_b=303, miss=304,
                  max_positions=2048),
}


@dataclass(frozen=True)
class Pair:
    """The construction: which token follows which, and what the draft guesses."""

    shape: Shape
    fixed_share: float = 0.5
    miss_share: float = 0.0  # the share of ids leading to ``miss`` (after the fixed point's share)

    def route(self, token: int) -> int:
        s = self.shape
        if token == s.fix:
            return TO_FIX
        if token == s.cyc_a:
            return TO_B
        if token == s.cyc_b:
            return TO_A
        if token == s.miss and self.miss_share > 0:
            return TO_MISS
        # Fibonacci hashing: consecutive ids spread evenly over [0, 1)
        u = ((token * 40503) & 0xFFFF) / 65536
        if u < self.fixed_share:
            return TO_FIX
        return TO_MISS if u < self.fixed_share + self.miss_share else TO_A

    def routes(self) -> np.ndarray:
        """route() for every token id (vectorised, same rule)."""
        import numpy as np

        s = self.shape
        ids = np.arange(s.vocab, dtype=np.int64)
        u = ((ids * 40503) & 0xFFFF) / 65536
        missed = np.where(u < self.fixed_share + self.miss_share, TO_MISS, TO_A)
        out = np.where(u < self.fixed_share, TO_FIX, missed).astype(np.int64)
        out[[s.fix, s.cyc_a, s.cyc_b]] = [TO_FIX, TO_B, TO_A]
        if self.miss_share > 0:
            out[s.miss] = TO_MISS
        return out

    def route_target(self) -> dict[int, int]:
        """The target head: route -> next token."""
        s = self.shape
        heads = {TO_FIX: s.fix, TO_B: s.cyc_b, TO_A: s.cyc_a}
        return {**heads, TO_MISS: s.miss} if self.miss_share > 0 else heads

    def route_draft(self) -> dict[int, int]:
        """The draft head: route -> the token two steps on; on the miss route a wrong one (``fix``)."""
        out = {r: self.next_token(t) for r, t in self.route_target().items() if r != TO_MISS}
        return {**out, TO_MISS: self.shape.fix} if self.miss_share > 0 else out

    def next_token(self, token: int) -> int:
        return self.route_target()[self.route(token)]

    def draft_vocab(self) -> list[int]:
        """Target id of each draft id: the low ids unchanged, the last three the tokens the heads emit."""
        s = self.shape
        return [*range(s.draft_vocab - 3), s.fix, s.cyc_a, s.cyc_b]

    def realized_share(self) -> float:
        return float((self.routes() == TO_FIX).mean())

    def draft_guesses(self, seq: list[int], steps: int = SPEC_STEPS) -> list[int]:
        """The draft's chain after ``seq`` (whose last token is the bonus token): every step guesses the token
        two steps after the one before the bonus token."""
        guess = self.route_draft()[self.route(seq[-2])]
        return [guess] * steps

    def expect(self, prompt: list[int], max_new_tokens: int, steps: int = SPEC_STEPS) -> dict[str, Any]:
        """Greedy continuation of ``prompt`` and what SGLang's EAGLE-3 (topk 1, ``steps`` draft steps,
        ``steps + 1`` draft tokens) reports for it.

        Prefill emits the first token; each verify step then commits its correct drafts plus the bonus token,
        cut where the request reaches ``max_new_tokens``. SGLang counts per request ``spec_verify_ct`` (verify
        steps) and ``spec_num_correct_drafts`` (drafts the target agreed with, uncut), and reports
        ``spec_accept_length`` = completion tokens / verify steps; the server's ``spec_accept_length`` gauge
        averages correct drafts + 1 over verify steps (``steady_accept_length`` here, before the end cut)."""
        if not prompt:
            raise ValueError("the prompt needs at least one token")
        out = [self.next_token(prompt[-1])]
        correct: list[int] = []
        committed: list[int] = []
        while len(out) < max_new_tokens:
            seq = prompt + out
            agreed = 0
            for guess in self.draft_guesses(seq, steps):
                if guess != self.next_token(seq[-1]):
                    break
                seq = [*seq, guess]
                agreed += 1
            run = [*seq[len(prompt) + len(out):], self.next_token(seq[-1])][: max_new_tokens - len(out)]
            out += run
            correct.append(agreed)
            committed.append(len(run))
        return {
            "prompt": prompt,
            "continuation": out,
            "spec_verify_ct": len(correct),
            "correct_drafts": correct,
            "tokens_per_verify": committed,
            "spec_num_correct_drafts": sum(correct),
            "spec_accept_length": len(out) / len(correct) if correct else None,
            "steady_accept_length": float({TO_FIX: steps + 1, TO_MISS: 1}.get(self.route(prompt[-1]), 2)),
        }

    def mix(self, last_tokens: range, max_new_tokens: int, steps: int = SPEC_STEPS) -> dict[str, Any]:
        """One request per last prompt token in ``last_tokens``: the fixed-point share among them, the server
        gauge (correct drafts + 1, averaged over all verify steps) and the mean per-request accept length.

        The two differ by which requests a batch holds. A closed-loop load of equal output lengths that
        drafts keeps each request in its batches for ``max_new_tokens / accept`` steps, so a request that
        accepts more leaves sooner and a drafting stream's batch is weighted towards the ones that accept
        less: its tokens per request-step are the server gauge (a harmonic mean). A gated stream keeps
        every request equally long, so a drafting batch explored inside it carries the plain mean of the
        requests' accept lengths. ``explored_over_steady`` is their ratio: how much more an explored
        drafting step carries than a step of a drafting stream at the same batch size (the engine
        counters' drafted side of a gated bin reads high by this much; data/gpu-runs/NOTEBOOK.md, learn's
        lean)."""
        verify = accepted = 0
        per_request = []
        fixed = 0
        for token in last_tokens:
            e = self.expect([token], max_new_tokens, steps)
            verify += e["spec_verify_ct"]
            accepted += e["spec_num_correct_drafts"] + e["spec_verify_ct"]
            per_request.append(e["spec_accept_length"] or 0.0)
            fixed += self.route(token) == TO_FIX
        n = len(last_tokens)
        server = accepted / verify if verify else None
        mean_request = sum(per_request) / n if n else None
        return {"requests": n, "fixed_point_share": fixed / n if n else None,
                "miss_share": sum(self.route(t) == TO_MISS for t in last_tokens) / n if n else None,
                "server_spec_accept_length": server, "mean_request_spec_accept_length": mean_request,
                "explored_over_steady": mean_request / server if server and mean_request else None}


# ---- files ------------------------------------------------------------------------------------------------

def word(token: int) -> str:
    return SPECIALS[token] if token < len(SPECIALS) else f"t{token}"


def encode(text: str, vocab: int) -> list[int]:
    """What the written tokenizer makes of ``text`` (whitespace-separated words, unknown ones ``<unk>``)."""
    specials = {w: i for i, w in enumerate(SPECIALS)}
    out = []
    for w in text.split():
        if w in specials:
            out.append(specials[w])
        elif w[:1] == "t" and w[1:].isdigit() and word(int(w[1:])) == w and int(w[1:]) < vocab:
            out.append(int(w[1:]))
        else:
            out.append(0)
    return out


@dataclass
class Tensor:
    """A tensor to write: all zero except ``values`` at the flat positions ``index`` (sorted)."""

    name: str
    dtype: str  # safetensors dtype: BF16, I64, BOOL
    shape: tuple[int, ...]
    index: Any = None  # np.ndarray[int64] or None (all zero)
    values: Any = None  # np.ndarray, same length as index


ITEM = {"BF16": 2, "I64": 8, "BOOL": 1}


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bits (round to nearest even), as uint16."""
    import numpy as np

    bits = np.asarray(values, dtype="<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def encoded(t: Tensor) -> np.ndarray:
    import numpy as np

    if t.dtype == "BF16":
        return to_bf16(t.values)
    if t.dtype == "I64":
        return np.asarray(t.values, dtype="<i8")
    return np.asarray(t.values, dtype=bool).astype(np.uint8)


def write_safetensors(path: Path, tensors: list[Tensor]) -> None:
    """The safetensors layout (8-byte header length, JSON header, data in header order); only the non-zero
    runs are written, the rest of the file is a hole that reads back as zeros."""
    import numpy as np

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    starts = []
    for t in tensors:
        count = 1
        for dim in t.shape:
            count *= dim
        size = count * ITEM[t.dtype]
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        starts.append((offset, count))
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    base = 8 + len(raw)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(base + offset)
        fd = f.fileno()
        for t, (start, count) in zip(tensors, starts, strict=True):
            if t.index is None or len(t.index) == 0:
                continue
            index = np.asarray(t.index, dtype=np.int64)
            if np.any(np.diff(index) <= 0) or index[0] < 0 or index[-1] >= count:
                raise ValueError(f"{t.name}: positions must be increasing and inside the tensor")
            data = encoded(t)
            item = ITEM[t.dtype]
            # one write per run of consecutive positions
            cuts = np.flatnonzero(np.diff(index) != 1) + 1
            for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(index)], strict=True):
                os.pwrite(fd, data[lo:hi].tobytes(), base + start + int(index[lo]) * item)


def ones(name: str, n: int) -> Tensor:
    import numpy as np

    return Tensor(name, "BF16", (n,), np.arange(n, dtype=np.int64), np.ones(n, dtype=np.float32))


def head_rows(name: str, rows: int, hidden: int, row_of_route: dict[int, int]) -> Tensor:
    """An output head with a one in (row, route) for each route: that row's logit reads the route."""
    import numpy as np

    pairs = sorted((row, route) for route, row in row_of_route.items())
    index = np.array([row * hidden + route for row, route in pairs], dtype=np.int64)
    return Tensor(name, "BF16", (rows, hidden), index, np.ones(len(pairs), dtype=np.float32))


def zero_layer(prefix: str, s: Shape, qkv_in: int) -> list[Tensor]:
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    return [
        Tensor(prefix + "self_attn.q_proj.weight", "BF16", (q, qkv_in)),
        Tensor(prefix + "self_attn.k_proj.weight", "BF16", (kv, qkv_in)),
        Tensor(prefix + "self_attn.v_proj.weight", "BF16", (kv, qkv_in)),
        Tensor(prefix + "self_attn.o_proj.weight", "BF16", (s.hidden, q)),
        Tensor(prefix + "mlp.gate_proj.weight", "BF16", (s.intermediate, s.hidden)),
        Tensor(prefix + "mlp.up_proj.weight", "BF16", (s.intermediate, s.hidden)),
        Tensor(prefix + "mlp.down_proj.weight", "BF16", (s.hidden, s.intermediate)),
        ones(prefix + "input_layernorm.weight", s.hidden),
        ones(prefix + "post_attention_layernorm.weight", s.hidden),
    ]


def target_tensors(pair: Pair) -> list[Tensor]:
    import numpy as np

    s = pair.shape
    rows = np.arange(s.vocab, dtype=np.int64)
    embed = Tensor("model.embed_tokens.weight", "BF16", (s.vocab, s.hidden), rows * s.hidden + pair.routes(),
                   np.full(s.vocab, EMBED_SCALE, dtype=np.float32))
    tensors = [embed]
    for i in range(s.layers):
        tensors += zero_layer(f"model.layers.{i}.", s, s.hidden)
    return [*tensors, ones("model.norm.weight", s.hidden),
            head_rows("lm_head.weight", s.vocab, s.hidden, pair.route_target())]


def draft_tensors(pair: Pair) -> list[Tensor]:
    """The names of the public EAGLE-3 checkpoints (``midlayer.*``, ``fc``, ``d2t``, ``t2d``), which SGLang
    0.5.17 and 0.5.23 both load (they map ``midlayer`` to ``model.layers.0``). No embedding: SGLang gives the
    draft the target's."""
    import numpy as np

    s = pair.shape
    n_aux = len(s.aux_layer_ids)
    hot = np.array(pair.draft_vocab(), dtype=np.int64)
    draft_id = {int(t): d for d, t in enumerate(hot)}
    layer = [*zero_layer("midlayer.", s, 2 * s.hidden), ones("midlayer.hidden_norm.weight", s.hidden)]
    diag = np.arange(s.hidden, dtype=np.int64)
    fc = Tensor("fc.weight", "BF16", (s.hidden, n_aux * s.hidden), diag * (n_aux * s.hidden) + diag,
                np.ones(s.hidden, dtype=np.float32))
    head = head_rows("lm_head.weight", s.draft_vocab, s.hidden,
                     {r: draft_id[t] for r, t in pair.route_draft().items()})
    d2t = Tensor("d2t", "I64", (s.draft_vocab,), np.arange(s.draft_vocab, dtype=np.int64),
                 hot - np.arange(s.draft_vocab))
    t2d = Tensor("t2d", "BOOL", (s.vocab,), np.sort(hot), np.ones(len(hot), dtype=bool))
    return [*layer, fc, ones("norm.weight", s.hidden), head, d2t, t2d]


def llama_config(s: Shape, layers: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "num_hidden_layers": layers,
        "vocab_size": s.vocab,
        "max_position_embeddings": s.max_positions,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def write_tokenizer(folder: Path, s: Shape) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {word(i): i for i in range(s.vocab)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False,
        "model_max_length": s.max_positions,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))


def write_pair(root: Path, pair: Pair) -> dict[str, Any]:
    s = pair.shape
    target, draft = root / "target", root / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(llama_config(s, s.layers), indent=1))
    write_tokenizer(target, s)
    write_safetensors(target / "model.safetensors", target_tensors(pair))
    draft_cfg = llama_config(s, 1)
    draft_cfg.update({
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": s.draft_vocab,
        "target_hidden_size": s.hidden,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(s.aux_layer_ids),
                         "use_aux_hidden_state": True},
    })
    (draft / "config.json").write_text(json.dumps(draft_cfg, indent=1))
    write_safetensors(draft / "model.safetensors", draft_tensors(pair))
    return {"root": str(root), "fixed_share": pair.fixed_share, "miss_share": pair.miss_share,
            "realized_share": pair.realized_share(),
            "fix": word(s.fix), "cycle": [word(s.cyc_a), word(s.cyc_b)]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    helps = {"write": "write ROOT/target and ROOT/draft",
             "expect": "one prompt's greedy continuation and its verify steps",
             "mix": "what a load whose prompts end in uniform random ids in LO:HI should report"}
    for name, text in helps.items():
        p = sub.add_parser(name, help=text)
        p.add_argument("--shape", choices=sorted(SHAPES), default="8b")
        p.add_argument("--fixed-share", type=float, default=0.5,
                       help="share of token ids whose continuation the draft predicts fully (default 0.5)")
        p.add_argument("--miss-share", type=float, default=0.0,
                       help="share of token ids leading to a fixed point the draft never guesses (default 0)")
        if name == "write":
            p.add_argument("root", type=Path)
            continue
        if name == "expect":
            p.add_argument("--prompt", required=True, help='whitespace-separated words, e.g. "t7 t12"')
        else:
            p.add_argument("--ids", default="10:1000", help="LO:HI (default: the ids spectower bench sends)")
        p.add_argument("--max-new-tokens", type=int, default=32)
        p.add_argument("--steps", type=int, default=SPEC_STEPS)
    args = parser.parse_args(argv)
    if not 0.0 <= args.fixed_share <= 1.0:
        parser.error("--fixed-share must be within [0, 1]")
    if not 0.0 <= args.miss_share <= 1.0 - args.fixed_share:
        parser.error("--miss-share must be within [0, 1 - --fixed-share]")
    pair = Pair(SHAPES[args.shape], args.fixed_share, args.miss_share)
    if args.command == "write":
        result = write_pair(args.root, pair)
    elif args.command == "expect":
        result = pair.expect(encode(args.prompt, pair.shape.vocab), args.max_new_tokens, args.steps)
        result["text"] = " ".join(word(t) for t in result["continuation"])
    else:
        lo, hi = (int(x) for x in args.ids.split(":"))
        result = pair.mix(range(lo, hi), args.max_new_tokens, args.steps)
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
