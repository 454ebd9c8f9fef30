"""A bounded traffic driver for vLLM's OpenAI-compatible `/v1/completions` (aiohttp).

Every run is bounded twice: by a request budget and by a deadline; requests in flight
at the deadline finish (they are short), none starts after it. Prompts are seeded, so a
run is repeatable up to the engine's own scheduling:

- "repetitive" prompts repeat a short code snippet, so n-gram drafting finds matches
  (and at temperature 0 the random-weight model falls into loops that it predicts);
- "random" prompts are seeded random words with no repeats;
- "chat" prompts are a short chat turn (a question of random words after "User:", then
  "Assistant:"), what an assistant serves; sampled at temperature 0.7 they are the
  creative traffic on which n-gram drafting finds nothing to propose.

`ignore_eos` makes every request produce exactly `max_tokens` tokens, so a run's
output is known in advance.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp

SNIPPETS = (
    "def add(x, y):\n    return x + y\n",
    "for i in range(10):\n    total += i\n",
    "if value is None:\n    value = default\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
)
_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber "
    "basalt cobalt dune ember fjord granite harbor iris jasper kelp lagoon marble nectar "
    "onyx pepper quartz river saffron tundra umber velvet willow xenon yarrow zephyr"
)
WORDS = tuple(_WORDS.split())


@dataclass(frozen=True)
class Request:
    prompt: str
    max_tokens: int
    temperature: float


@dataclass
class Result:
    requests: int = 0
    completion_tokens: int = 0
    prompt_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def __iadd__(self, other: Result) -> Result:
        self.requests += other.requests
        self.completion_tokens += other.completion_tokens
        self.prompt_tokens += other.prompt_tokens
        self.errors += other.errors
        self.seconds = max(self.seconds, other.seconds)
        return self


def repetitive_prompt(rng: random.Random) -> str:
    return rng.choice(SNIPPETS) * rng.randint(3, 6)


def random_prompt(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(12, 30)))


def chat_prompt(rng: random.Random) -> str:
    words = " ".join(rng.sample(WORDS, rng.randint(6, 14)))
    return f"User: tell me about {words}?\nAssistant:"


PROMPTS = {"repetitive": repetitive_prompt, "random": random_prompt, "chat": chat_prompt}


def mix(
    seed: int,
    kinds: Sequence[str] = ("repetitive", "random"),
    temperatures: Sequence[float] = (0.0, 1.0),
    max_tokens: Sequence[int] = (48, 96),
) -> itertools.cycle[Request]:
    """An endless, seeded cycle of requests over every combination of the given axes."""
    rng = random.Random(seed)
    requests = []
    for _ in range(8):
        for kind, temperature, tokens in itertools.product(kinds, temperatures, max_tokens):
            prompt = PROMPTS[kind](rng)
            requests.append(Request(prompt, tokens, temperature))
    rng.shuffle(requests)
    return itertools.cycle(requests)


async def complete(
    session: aiohttp.ClientSession, base_url: str, model: str, request: Request
) -> Result:
    body = {
        "model": model,
        "prompt": request.prompt,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "ignore_eos": True,
    }
    try:
        async with session.post(f"{base_url}/v1/completions", json=body) as response:
            payload = await response.json(content_type=None)
            if response.status != 200:
                return Result(errors=[f"HTTP {response.status}: {str(payload)[:200]}"])
    except (aiohttp.ClientError, TimeoutError) as exc:
        return Result(errors=[f"{type(exc).__name__}: {exc}"])
    usage = payload.get("usage") or {}
    return Result(
        requests=1,
        completion_tokens=int(usage.get("completion_tokens", 0)),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
    )


async def drive(
    base_url: str,
    model: str,
    *,
    concurrency: int,
    seconds: float,
    max_requests: int,
    requests: itertools.cycle[Request] | None = None,
    seed: int = 0,
) -> Result:
    """`concurrency` workers send requests back to back until the budget or deadline is used."""
    source = requests if requests is not None else mix(seed)
    started = time.monotonic()
    deadline = started + seconds
    budget = itertools.count()
    total = Result()
    timeout = aiohttp.ClientTimeout(total=120)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal total
        while time.monotonic() < deadline and next(budget) < max_requests:
            total += await complete(session, base_url, model, next(source))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    total.seconds = time.monotonic() - started
    return total


async def drive_many(
    targets: Sequence[tuple[str, str]],
    *,
    concurrency: int,
    seconds: float,
    max_requests: int,
    seed: int = 0,
    kinds: Sequence[str] = ("repetitive", "random"),
    temperatures: Sequence[float] = (0.0, 1.0),
    max_tokens: Sequence[int] = (48, 96),
) -> list[Result]:
    """The same seeded workload against several servers at once, one driver each."""
    return list(
        await asyncio.gather(
            *(
                drive(
                    url,
                    model,
                    concurrency=concurrency,
                    seconds=seconds,
                    max_requests=max_requests,
                    requests=mix(seed, kinds, temperatures, max_tokens),
                )
                for url, model in targets
            )
        )
    )
