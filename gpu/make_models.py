"""Writes the two tiny random-weight model folders the GPU check serves with ``--load-format dummy``.

A Llama target (8 layers, hidden 256, vocab 1024) with a tokenizer built by the ``tokenizers`` library,
and a one-layer EAGLE-3 draft. Acceptance with random weights is ~1.0: the mechanics are real, the
speedup is not. Runs on the GPU machine (it has ``tokenizers``); nothing is downloaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 1024
HIDDEN = 256


def llama_config(layers: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 4 * HIDDEN,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": HIDDEN // 4,
        "num_hidden_layers": layers,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<s>", "</s>"]
    words = [f"w{i}" for i in range(VOCAB_SIZE - len(specials))]
    vocab = {tok: i for i, tok in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 4096,
        "chat_template": "{% for m in messages %}{{ m['content'] }} {% endfor %}",
    }))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))


def main(root: Path) -> None:
    target, draft = root / "target", root / "draft"
    target.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(llama_config(8), indent=1))
    write_tokenizer(target)
    draft_cfg = llama_config(1)
    draft_cfg.update({
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": VOCAB_SIZE,
        "target_hidden_size": HIDDEN,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5]},
    })
    (draft / "config.json").write_text(json.dumps(draft_cfg, indent=1))
    print(f"models written under {root}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/spectower-models"))
