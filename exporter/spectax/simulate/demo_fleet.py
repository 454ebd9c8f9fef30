"""The demo fleet's configuration: the simulated endpoints as spectax is told about them.

One place for what `spectax demo`, `spectax demo --history` and the report (without
configured endpoints) all say about the simulated servers: their GPU and billing,
their drafter and its weights, which endpoint is the control of which, and which names
the profile a benchmark sweep of its model taught (`DEMO_SWEPT`: the live demo stores
it before it starts, so its verdict rests on a profile; see `spectax.simulate.bench_sweep`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from spectax.config import Settings, validate
from spectax.endpoint_config import EndpointConfig
from spectax.simulate.sim_profiles import DEMO_PROFILES, SimProfile

__all__ = [
    "DEMO_DEFAULTS",
    "DEMO_SWEPT",
    "DEMO_URLS",
    "DRAFT_WEIGHT_BYTES",
    "H100_MEMORY_BYTES",
    "demo_endpoint_configs",
    "demo_endpoints",
    "demo_settings",
]

EMPTY: Mapping[str, str] = MappingProxyType({})
# Without a configuration file the demo scrapes faster, so figures appear within seconds.
# The load curve is binned again every minute (the default's 5 minutes is a default window),
# so office-chat's crossover shows while its 8-minute load cycle first turns.
DEMO_DEFAULTS: dict[str, Any] = {
    "scrape_interval": "5s",
    "window": "1m",
    "load_curve": {"refresh_interval": "1m"},
}
H100_MEMORY_BYTES = 80 * 10**9
# How each demo server is billed: always-on GPUs, and two serverless ones.
DEMO_BILLING: dict[str, dict[str, Any]] = {
    "code-assistant": {
        "gpu": "H100 SXM",
        "price": {"provider": "runpod", "product": "pods secure"},
        "billing_mode": "provisioned",
    },
    "chat-creative": {
        "gpu": "H100 80GB (H100 PRO)",
        "price": {"provider": "runpod", "product": "serverless flex"},
        "billing_mode": "serverless",
    },
    "chat-control": {
        "gpu": "H100 80GB (H100 PRO)",
        "price": {"provider": "runpod", "product": "serverless flex"},
        "billing_mode": "serverless",
    },
    **{
        name: {
            "gpu": "H100 SXM",
            "price": {"provider": "runpod", "product": "pods secure"},
            "billing_mode": "provisioned",
        }
        for name in ("support-bot", "summarizer", "docs-qa", "edge-assistant", "office-chat")
    },
}
# The speculative method each demo server simulates (a `speculation.method` of the config).
DEMO_METHODS = {
    "code-assistant": "eagle",
    "chat-creative": "draft_model",
    "support-bot": "eagle",
    "summarizer": "eagle3",
    "docs-qa": "medusa",
    "edge-assistant": "draft_model",
    "office-chat": "eagle",
}
# The drafters' weights: EAGLE heads for the coder, a 1B draft model (bf16) for the chat,
# heads for the others.
DRAFT_WEIGHT_BYTES = {
    "code-assistant": 500 * 10**6,
    "chat-creative": 2 * 10**9,
    "support-bot": 400 * 10**6,
    "summarizer": 500 * 10**6,
    "docs-qa": 300 * 10**6,
    "edge-assistant": 1 * 10**9,  # a 0.5B draft model in bf16
    "office-chat": 400 * 10**6,
}
# The endpoints whose verdict rests on a stored profile, by its name: the code assistant and
# the office chat have no control, and a sweep of the model is what settles their
# "uncertain" (spectax.settle): the office chat's load curve is sure on both sides of its
# crossover.
DEMO_SWEPT = {
    "code-assistant": "qwen2.5-coder-7b-h100-eagle",
    "office-chat": "qwen2.5-7b-h100-eagle",
}
# Placeholder addresses (`python -m spectax.simulate`'s ports): the history and the report
# need the demo endpoints' billing, not their servers.
DEMO_URLS = {
    "code-assistant": "http://127.0.0.1:18001",
    "chat-creative": "http://127.0.0.1:18002",
    "chat-control": "http://127.0.0.1:18003",
    "support-bot": "http://127.0.0.1:18004",
    "summarizer": "http://127.0.0.1:18005",
    "docs-qa": "http://127.0.0.1:18006",
    "edge-assistant": "http://127.0.0.1:18007",
    "office-chat": "http://127.0.0.1:18008",
}


def demo_endpoints(
    urls: dict[str, str], profiles: dict[str, SimProfile], swept: Mapping[str, str] = EMPTY
) -> list[dict[str, Any]]:
    """Endpoint configuration for the simulated servers, matching what each one simulates;
    those in `swept` name their stored profile (the live demo's `DEMO_SWEPT`)."""
    endpoints = []
    for name, url in urls.items():
        profile = profiles[name]
        endpoint: dict[str, Any] = {
            "name": name,
            "url": url,
            "engine": profile.serving_engine,
            "gpu_memory_bytes": H100_MEMORY_BYTES,
            "ridge_batch": profile.ridge_batch,
            **DEMO_BILLING.get(name, {}),
        }
        if profile.num_speculative_tokens > 0:
            endpoint["speculation"] = {
                "method": DEMO_METHODS.get(name, "draft_model"),
                "draft_cost_ratio": profile.draft_cost_ratio,
                "draft_weight_bytes": DRAFT_WEIGHT_BYTES.get(name, 0),
            }
        if name in swept:
            endpoint["profile"] = swept[name]
        endpoints.append(endpoint)
    for endpoint in endpoints:
        if endpoint["name"] == "chat-creative" and "chat-control" in urls:
            endpoint["control"] = "chat-control"
    return endpoints


def demo_settings(
    base: Settings, urls: dict[str, str], swept: Mapping[str, str] = EMPTY
) -> Settings:
    """`base` with its endpoints replaced by the demo's, at these addresses."""
    raw = base.config.model_dump(exclude={"endpoints"}, exclude_none=True)
    raw["endpoints"] = demo_endpoints(urls, DEMO_PROFILES, swept)
    return validate(raw, "<demo>")


def demo_endpoint_configs() -> list[EndpointConfig]:
    """The demo endpoints as validated configuration, at their placeholder addresses."""
    return [EndpointConfig.model_validate(e) for e in demo_endpoints(DEMO_URLS, DEMO_PROFILES)]
