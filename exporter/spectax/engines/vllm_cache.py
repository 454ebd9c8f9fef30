"""vLLM's KV cache as its page states it: `vllm:cache_config_info`, settings as labels.

Apart from `vllm.py` because it reads a series unlike the others: no `model_name`, no value
that matters, only labels, one series per data-parallel rank. Its blocks are what a draft
model's weights and KV cache take from the target's (issue 20: capacity).
"""

from __future__ import annotations

from spectax.engines.scan import PAIR


class CacheConfig:
    """The page's KV cache from `vllm:cache_config_info`: blocks and reported bytes summed over
    the ranks (each has its own cache), the block size they share. vLLM serves one model per
    process, so every model of the page gets it. A setting vLLM leaves unset reads "None"."""

    def __init__(self) -> None:
        self.blocks: float | None = None
        self.memory_bytes: float | None = None
        self.block_size: float | None = None

    def add(self, labels: str) -> str | None:
        """Add one rank's series; an error message for a setting that is not a count."""
        values = PARSED.get(labels)
        if values is None:
            parsed = _settings(labels)
            if isinstance(parsed, str):
                return parsed
            values = parsed
            if len(labels) <= _PARSED_KEY_MAX:
                if len(PARSED) >= _PARSED_MAX:
                    PARSED.clear()
                PARSED[labels] = values
        blocks, size, memory_bytes = values
        if size is not None and self.block_size is not None and size != self.block_size:
            return f"ranks disagree on block_size ({self.block_size:.0f} and {size:.0f})"
        self.block_size = size if size is not None else self.block_size
        self.blocks = _plus(self.blocks, blocks)
        self.memory_bytes = _plus(self.memory_bytes, memory_bytes)
        return None


Settings = tuple[float | None, float | None, float | None]  # blocks, block size, bytes
#: Label set -> its settings: the same on every scrape (~1,300 characters, 9 us to read).
#: A few entries (one per rank), cleared when full, of at most 8 KiB each: a hostile page
#: cannot make it hold much.
#: Its keys are label sets the grammar matched (`split_tails` trusts them).
PARSED: dict[str, Settings] = {}
_PARSED_MAX = 16
_PARSED_KEY_MAX = 8192


def _settings(labels: str) -> Settings | str:
    found = dict(PAIR.findall(labels))
    values: list[float | None] = []
    for key in ("num_gpu_blocks", "block_size", "kv_cache_memory_bytes"):
        raw = found.get(key, "None")
        if raw == "None":
            values.append(None)
        elif raw.isascii() and raw.isdigit() and int(raw) <= 2**53:
            values.append(float(raw))
        else:
            return f"label {key} must be a whole number or None, got {raw[:40]!r}"
    return values[0], values[1], values[2]


def _plus(total: float | None, value: float | None) -> float | None:
    return value if total is None else total if value is None else total + value
