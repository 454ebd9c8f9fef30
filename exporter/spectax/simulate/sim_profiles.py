"""What determines a simulated endpoint (`SimProfile`), and the demo's mixed fleet.

A profile is data: the step-time physics (``step_a + step_b * tokens`` seconds a step,
ECONOMICS.md §3), the acceptance law, the closed-loop traffic and the engine's limits.
The simulator (:mod:`spectax.simulate.vllm_engine`) turns it into /metrics pages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEMO_PROFILES", "SimProfile"]


@dataclass(frozen=True)
class SimProfile:
    """Everything that determines a simulated endpoint.

    Acceptance: ``p_k = acceptance_p0 * acceptance_decay**k`` is the marginal
    probability that the draft token at position k (0-based) is accepted.
    Step time: ``step_a + step_b * tokens`` seconds, plus drafting
    ``draft_cost_ratio * K * (step_a + step_b * decode_batch)`` when speculating.
    ``concurrency`` is the number of closed-loop clients; with ``think_time_s == 0``
    that is the mean number of running requests (capped at ``max_num_seqs``; the
    excess waits).  ``max_model_len`` sets the token-count histogram buckets exactly
    as vLLM does (1-2-5 series up to it); 1024 reproduces the recorded fixtures.
    """

    model_name: str
    num_speculative_tokens: int = 0
    acceptance_p0: float = 0.8
    acceptance_decay: float = 0.8
    draft_cost_ratio: float = 0.0
    step_a: float = 0.016
    step_b: float = 0.0005
    concurrency: int = 8
    max_num_seqs: int = 256
    think_time_s: float = 0.0
    prompt_len_mean: int = 256
    output_len_mean: int = 200
    max_tokens: int = 512
    max_model_len: int = 1024
    max_num_batched_tokens: int = 8192
    kv_cache_tokens: int = 131072
    block_size: int = 16
    diurnal_amplitude: float = 0.0
    #: The load cycle's period: a day, or minutes for the live demo's office-chat, so that
    #: its load crosses its crossover within the demo's first minutes.
    cycle_seconds: float = 86400.0
    #: The cycle starts at its trough when the engine first starts (the live demo: the
    #: swing is seen in full from the start), not at midnight UTC (history: a day's peak
    #: at noon whenever the span starts).
    cycle_from_start: bool = False
    cold_start_s: float = 30.0
    temperature: float = 0.7
    seed: int = 0
    engine: str = "0"
    #: Whose page the simulator renders (a `spectax.engines` name: vllm, sglang, trtllm,
    #: tgi); `engine` above is vLLM's engine-index label.
    serving_engine: str = "vllm"
    description: str = ""

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 0:
            raise ValueError("num_speculative_tokens must be >= 0")
        if not 0.0 <= self.acceptance_p0 <= 1.0 or not 0.0 <= self.acceptance_decay <= 1.0:
            raise ValueError("acceptance_p0 and acceptance_decay must be in [0, 1]")
        if self.step_a <= 0.0 or self.step_b <= 0.0:
            raise ValueError("step_a and step_b must be > 0")
        if self.draft_cost_ratio < 0.0:
            raise ValueError("draft_cost_ratio must be >= 0")
        if self.concurrency < 0 or self.max_num_seqs < 1:
            raise ValueError("concurrency must be >= 0 and max_num_seqs >= 1")
        if self.think_time_s < 0.0 or self.cold_start_s < 0.0:
            raise ValueError("think_time_s and cold_start_s must be >= 0")
        if self.prompt_len_mean < 1 or self.output_len_mean < 1:
            raise ValueError("prompt_len_mean and output_len_mean must be >= 1")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if not 0.0 <= self.diurnal_amplitude <= 1.0:
            raise ValueError("diurnal_amplitude must be in [0, 1]")
        if self.cycle_seconds <= 0.0:
            raise ValueError("cycle_seconds must be > 0")

    @property
    def speculative(self) -> bool:
        return self.num_speculative_tokens > 0

    @property
    def ridge_batch(self) -> float:
        """B* = a / b."""
        return self.step_a / self.step_b

    @property
    def acceptance_per_position(self) -> tuple[float, ...]:
        """Marginal P(position k accepted), k = 0 .. K-1 (non-increasing)."""
        p0, d = self.acceptance_p0, self.acceptance_decay
        return tuple(p0 * d**k for k in range(self.num_speculative_tokens))

    @property
    def expected_acceptance_ratio(self) -> float:
        """alpha = E[accepted] / K per draft (vLLM's "acceptance rate"); 0 without spec."""
        k = self.num_speculative_tokens
        return sum(self.acceptance_per_position) / k if k else 0.0

    @property
    def expected_acceptance_length(self) -> float:
        """tau = 1 + E[accepted per draft] (tokens emitted per decode request-step)."""
        return 1.0 + sum(self.acceptance_per_position)

    def prompt_range(self) -> tuple[int, int]:
        """Prompt lengths are uniform integers in this inclusive range."""
        lo = max(1, round(self.prompt_len_mean / 2))
        hi = max(lo, round(self.prompt_len_mean * 3 / 2))
        return lo, hi

    def without_speculation(self) -> SimProfile:
        """The same endpoint with speculation off (a control)."""
        return replace(self, num_speculative_tokens=0, draft_cost_ratio=0.0)


# The demo's step-time physics, the same for every endpoint: B* = 0.016 / 0.0005 = 32 requests.
_WEIGHT_READ_S = 0.016  # step_a: reading the weights once per step
_COMPUTE_PER_TOKEN_S = 0.0005  # step_b: compute per token in the step

_CHAT_CREATIVE = SimProfile(
    model_name="llama-3.1-8b-instruct",
    num_speculative_tokens=4,
    acceptance_p0=0.55,
    acceptance_decay=0.6,
    draft_cost_ratio=0.1,
    step_a=_WEIGHT_READ_S,
    step_b=_COMPUTE_PER_TOKEN_S,
    concurrency=104,
    max_num_seqs=96,
    prompt_len_mean=250,
    output_len_mean=300,
    max_tokens=512,
    temperature=1.0,
    seed=22,
    description="separate draft model, temperature 1.0 creative chat, saturated "
    "(96 running + waiting): compute-bound, low acceptance: speculation is a tax",
)

DEMO_PROFILES: dict[str, SimProfile] = {
    "code-assistant": SimProfile(
        model_name="qwen2.5-coder-7b-instruct",
        num_speculative_tokens=4,
        acceptance_p0=0.9,
        acceptance_decay=0.85,
        draft_cost_ratio=0.02,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=2,
        max_num_seqs=64,
        prompt_len_mean=400,
        output_len_mean=120,
        max_tokens=384,
        temperature=0.0,
        seed=11,
        description="EAGLE-style heads, greedy code completion, 2 concurrent users: "
        "memory-bound, high acceptance: speculation pays",
    ),
    "chat-creative": _CHAT_CREATIVE,
    "chat-control": replace(
        _CHAT_CREATIVE.without_speculation(),
        seed=33,
        description="chat-creative's model and traffic without speculation: the control",
    ),
    # The mixed fleet: the same physics, other engines' pages (each shows what its engine
    # exposes, no more). None has a control, so only TensorRT-LLM and llama.cpp, which count
    # drafted tokens, get a modelled speedup; SGLang and TGI show a derived acceptance length.
    "support-bot": SimProfile(
        model_name="mistral-7b-instruct",
        num_speculative_tokens=3,
        acceptance_p0=0.75,
        acceptance_decay=0.75,
        draft_cost_ratio=0.03,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=6,
        max_num_seqs=64,
        prompt_len_mean=300,
        output_len_mean=150,
        max_tokens=384,
        temperature=0.3,
        seed=44,
        serving_engine="sglang",
        description="SGLang with EAGLE heads, support chat at 6 concurrent users: no drafted "
        "count, so an acceptance length derived from verify calls and no modelled speedup",
    ),
    "summarizer": SimProfile(
        model_name="llama-3.1-8b-instruct",
        num_speculative_tokens=3,
        acceptance_p0=0.8,
        acceptance_decay=0.8,
        draft_cost_ratio=0.04,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=12,
        max_num_seqs=64,
        prompt_len_mean=800,
        output_len_mean=200,
        max_tokens=512,
        max_model_len=2048,
        temperature=0.0,
        seed=55,
        serving_engine="trtllm",
        description="TensorRT-LLM with EAGLE3, greedy summaries at 12 concurrent requests: "
        "drafted and accepted tokens counted, draft overhead measured: speculation pays",
    ),
    "docs-qa": SimProfile(
        model_name="zephyr-7b-beta",
        num_speculative_tokens=2,
        acceptance_p0=0.6,
        acceptance_decay=0.7,
        draft_cost_ratio=0.05,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=4,
        max_num_seqs=64,
        prompt_len_mean=500,
        output_len_mean=180,
        max_tokens=384,
        temperature=0.7,
        seed=66,
        serving_engine="tgi",
        description="TGI with Medusa heads (--speculate 2), documentation Q&A at 4 users: "
        "tokens only as histograms, no drafted count: a derived acceptance length",
    ),
    "edge-assistant": SimProfile(
        model_name="qwen2.5-3b-instruct",
        num_speculative_tokens=4,
        acceptance_p0=0.7,
        acceptance_decay=0.8,
        draft_cost_ratio=0.08,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=2,
        max_num_seqs=2,
        prompt_len_mean=200,
        output_len_mean=120,
        max_tokens=256,
        temperature=0.2,
        seed=77,
        serving_engine="llamacpp",
        description="llama.cpp with a small draft model (--parallel 2), an assistant at 2 "
        "users: drafted and accepted counted, no step time, no finished-request counter",
    ),
    # A vLLM endpoint whose load crosses its crossover: EAGLE heads of middling acceptance
    # (tau 2.6, drafting 15% of a step). Its traffic swings 4 -> 76 requests and back every
    # 8 minutes live (a day in the history), and on its stored profile 30 days of history
    # bin to 1.40x at 4-7 requests, 0.99 at 16-31 and 0.85 at 64-127: the load curve, its
    # crossover and the K schedule show in the history and within the live demo's minutes.
    "office-chat": SimProfile(
        model_name="qwen2.5-7b-instruct",
        num_speculative_tokens=3,
        acceptance_p0=0.7,
        acceptance_decay=0.75,
        draft_cost_ratio=0.05,
        step_a=_WEIGHT_READ_S,
        step_b=_COMPUTE_PER_TOKEN_S,
        concurrency=40,
        max_num_seqs=128,
        diurnal_amplitude=0.9,
        cycle_seconds=480.0,
        cycle_from_start=True,
        prompt_len_mean=300,
        output_len_mean=150,
        max_tokens=384,
        temperature=0.5,
        seed=88,
        description="EAGLE heads, an office chat whose load swings from 4 to 76 requests over "
        "its cycle: speculation pays at the trough and is a tax at the peak",
    ),
}
