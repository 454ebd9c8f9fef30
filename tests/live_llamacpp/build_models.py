"""Write the tiny random-weight GGUF models the live llama.cpp tier serves: no download.

    python build_models.py OUT_DIR     # with llama.cpp's own gguf-py on PYTHONPATH

writes OUT_DIR/target.gguf (llama architecture: hidden 128, 2 layers, 4 heads) and
OUT_DIR/draft.gguf (1 layer). Both carry one byte-level BPE vocabulary learned here, in
a few lines of Python, from the traffic driver's prompts (tests/live_vllm/traffic.py),
so the tier needs neither the vLLM setup nor the `tokenizers` library.

The draft shares the target's embedding, output head and layer 0, so it predicts the
target's next token often at temperature 0 (its layer 1 is scaled down to a nudge) and
less often when sampling: a speculating server with real accepted and rejected drafts,
from files of 1-2 MB.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections import Counter
from pathlib import Path

import gguf
import numpy as np

TRAFFIC = Path(__file__).resolve().parent.parent / "live_vllm" / "traffic.py"

HIDDEN, HEADS, FFN, CONTEXT = 128, 4, 256, 1024
MERGES = 600
SPECIALS = ["<s>", "</s>"]  # ids 0 and 1: bos, eos
SEED = 18
LAYER_1_SCALE = 0.1


def byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character map, what a gpt2-style BPE vocabulary is made of."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def traffic_text() -> str:
    """The prompts' material: traffic.py's SNIPPETS and _WORDS literals, read without
    importing it (it needs aiohttp, which this script's small venv has not)."""
    found = {}
    for node in ast.parse(TRAFFIC.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("SNIPPETS", "_WORDS"):
            found[target.id] = ast.literal_eval(node.value)
    return found["_WORDS"] + " " + "".join(found["SNIPPETS"]) * 3


def learn_vocabulary() -> tuple[list[str], list[str]]:
    """(tokens, merges): the specials, the 256 byte tokens, then the learned merges."""
    alphabet = byte_alphabet()
    corpus = traffic_text() + " User: tell me about? Assistant:"
    # Words as GPT-2 pre-tokenises them: a leading space stays with the word.
    pieces = Counter(
        tuple(alphabet[b] for b in (" " + w if i else w).encode())
        for line in corpus.splitlines()
        for i, w in enumerate(line.split(" "))
        if w
    )
    merges: list[str] = []
    words = dict(pieces)
    for _ in range(MERGES):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, n in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += n
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        merged: dict[tuple[str, ...], int] = {}
        for word, n in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    tokens = SPECIALS + alphabet + [m.replace(" ", "") for m in merges]
    return list(dict.fromkeys(tokens)), merges


def weights(rng: np.random.Generator, vocab: int, layers: int) -> dict[str, np.ndarray]:
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        "token_embd.weight": w(vocab, HIDDEN),
        "output_norm.weight": np.ones(HIDDEN, np.float32),
        "output.weight": w(vocab, HIDDEN),
    }
    for i in range(layers):
        tensors |= {
            f"blk.{i}.attn_norm.weight": np.ones(HIDDEN, np.float32),
            f"blk.{i}.attn_q.weight": w(HIDDEN, HIDDEN),
            f"blk.{i}.attn_k.weight": w(HIDDEN, HIDDEN),
            f"blk.{i}.attn_v.weight": w(HIDDEN, HIDDEN),
            f"blk.{i}.attn_output.weight": w(HIDDEN, HIDDEN),
            f"blk.{i}.ffn_norm.weight": np.ones(HIDDEN, np.float32),
            f"blk.{i}.ffn_gate.weight": w(FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": w(FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": w(HIDDEN, FFN),
        }
    return tensors


def write(path: Path, name: str, tokens: list[str], merges: list[str], tensors: dict) -> None:
    layers = 1 + max(int(k.split(".")[1]) for k in tensors if k.startswith("blk."))
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - 2)
    )
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_add_bos_token(False)
    for tensor_name, array in tensors.items():
        writer.add_tensor(tensor_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tokens, merges = learn_vocabulary()
    target = weights(np.random.default_rng(SEED), len(tokens), layers=2)
    # Layer 1 only nudges the residual stream, so the draft (layer 0 alone) often agrees.
    for name in ("blk.1.attn_output.weight", "blk.1.ffn_down.weight"):
        target[name] *= LAYER_1_SCALE
    draft = {k: v for k, v in target.items() if not k.startswith("blk.1.")}
    write(out / "target.gguf", "spectax-tiny-target", tokens, merges, target)
    write(out / "draft.gguf", "spectax-tiny-draft", tokens, merges, draft)
    print(f"models in {out}: vocab {len(tokens)}, target 2 layers, draft 1 layer")


if __name__ == "__main__":
    main()
