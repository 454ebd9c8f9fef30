"""Build the tiny local models the live-vLLM tier serves: no download, random weights.

Run with the vLLM venv's python (it needs `tokenizers`):

    python build_models.py OUT_DIR

writes OUT_DIR/target (LlamaForCausalLM: hidden 128, 2 layers, 4 heads, head_dim 32) and
OUT_DIR/draft (the same with 1 layer), both with one BPE tokenizer trained here on the
standard library's .py files. vLLM serves them with `--load-format dummy`.
Head_dim 16 crashes vLLM's CPU attention; keep 32.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 4096
SPECIALS = ["<unk>", "<s>", "</s>"]


def train_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))[:400]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(files, trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 1024,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, indent=1)
    )
    return int(tokenizer.get_vocab_size())


def llama_config(layers: int, vocab: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def main() -> None:
    root = Path(sys.argv[1])
    target, draft = root / "target", root / "draft"
    for d in (target, draft):
        d.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (draft / name).write_bytes((target / name).read_bytes())
    (target / "config.json").write_text(json.dumps(llama_config(2, vocab), indent=1))
    (draft / "config.json").write_text(json.dumps(llama_config(1, vocab), indent=1))
    print(f"models in {root}: vocab {vocab}, target 2 layers, draft 1 layer")


if __name__ == "__main__":
    main()
