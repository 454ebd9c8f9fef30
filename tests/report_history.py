"""The report tests' history: hour-long window rows summed as the daemon would have, the
golden month built from them (every recommendation, an unconfigured and an unpriced
endpoint, cold starts, month over month), storing rows, and the report built from a store
as `spectax report` builds it."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from spectax import economics
from spectax.cli.report import described_endpoints
from spectax.config import Settings, validate
from spectax.engines.base import Histogram
from spectax.report.build import Report, build_report
from spectax.report.period import Month
from spectax.report.read import ProjectionReader
from spectax.report.write import endpoint_infos
from spectax.store import Store
from spectax.store.rows import encode_buckets

NANO = Decimal("0.000000001")
MAY = Month(2026, 5)


async def report_of(
    url: str,
    month: Month,
    settings: Settings,
    only: list[str] | None = None,
    spend_source: Any = None,
) -> Report:
    """The report as `spectax report` builds it (rows read by the projection reader)."""
    store = await Store.open(url)
    try:
        async with ProjectionReader(url) as reader:
            infos = endpoint_infos(described_endpoints(settings))
            return await build_report(store, month, infos, only, spend_source, reader=reader)
    finally:
        await store.close()


def window_row(
    endpoint: str,
    start: datetime,
    *,
    concurrency: float,
    output_tokens: int,
    positions: tuple[float, ...] = (),
    c: float | None = None,
    ridge: float = 32.0,
    usd_per_hour: str | None = None,
    billing: str = "provisioned",
    restarts: int = 0,
    cold_usd: str = "0",
    draft_load_usd: str = "0",
    model: str = "served-model",
    basis: str | None = "default",
) -> dict[str, Any]:
    """One hour-long window row, summed as the daemon would have. Its verdict follows the band
    the basis gives (ECONOMICS.md §3b: measured none, calibrated ±5%, profile ±3%, default
    ±50%); basis None is a window written before spectax kept it (before migration 0004)."""
    seconds = 3600.0
    busy = seconds if output_tokens > 0 else 0.0
    spend = busy_spend = cold = draft_load = None
    if usd_per_hour is not None:
        price = Decimal(usd_per_hour)
        cold, draft_load = Decimal(cold_usd), Decimal(draft_load_usd)
        if billing == "serverless":
            spend = (price * Decimal(busy) / 3600 + cold).quantize(NANO)
            busy_spend = spend - cold
        else:
            spend = price.quantize(NANO)
            busy_spend = (spend * Decimal(busy / seconds)).quantize(NANO)
    drafts = draft_tokens = accepted = None
    per_position: list[int] = []
    savings = speedup = alpha = breakeven = draft_compute = rejected = None
    if positions:
        drafts = round(output_tokens / (1 + sum(positions)))
        per_position = [round(drafts * p) for p in positions]
        accepted = sum(per_position)
        draft_tokens = len(positions) * drafts
        speedup = economics.modelled_speedup(
            output_tokens, accepted, draft_tokens, concurrency, ridge, c or 0.0
        )
        alpha = accepted / draft_tokens
        breakeven = economics.breakeven_acceptance(concurrency, ridge, c or 0.0)
        if busy_spend is not None and speedup is not None:
            savings = economics.speculation_savings_usd(
                float(busy_spend), speedup, float(draft_load or 0)
            )
            r = economics.relative_batch(ridge, concurrency)
            shares = (
                economics.draft_compute_share(output_tokens, accepted, draft_tokens, r, c or 0.0),
                economics.rejected_share(output_tokens, accepted, draft_tokens, r, c or 0.0),
            )
            draft_compute, rejected = (float(busy_spend) * x for x in shares)
    verdict, band, source = "no_speculation", None, "configured"
    if positions and speedup is not None:
        verdict = "pays" if speedup > 1 else "tax"
        if basis is not None:
            width = {"measured": 0.0, "calibrated": 0.05, "profile": 0.03, "default": 0.5}[basis]
            band = (speedup * (1 - width), speedup * (1 + width))
            source = {"measured": "control", "calibrated": "baseline"}.get(basis, "configured")
            source = "profile" if basis == "profile" else source
            if basis != "measured":
                verdict = "pays" if band[0] > 1 else "tax" if band[1] < 1 else "uncertain"
    return {
        "endpoint": endpoint,
        "model": model,
        "start": start,
        "end": start + timedelta(seconds=seconds),
        "seconds": seconds,
        "busy_seconds": busy,
        "restarts": restarts,
        "output_tokens": output_tokens,
        "prompt_tokens": output_tokens * 2,
        "requests_finished": output_tokens // 200,
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "accepted_per_position": json.dumps(per_position),
        "running_seconds": concurrency * seconds,
        "iteration_tokens_sum": None,
        "iteration_tokens_count": None,
        "inter_token_latency_sum": None,
        "inter_token_latency_count": None,
        "time_per_output_token_sum": None,
        "time_per_output_token_count": None,
        "spend_usd": spend,
        "busy_spend_usd": busy_spend,
        "cold_start_usd": cold,
        "draft_load_usd": draft_load,
        "concurrency_requests": concurrency,
        "acceptance_ratio": alpha,
        "breakeven_acceptance_ratio": breakeven,
        "speedup_ratio": speedup,
        "ridge_batch_requests": ridge,
        "ridge_batch_source": source,
        "draft_cost_ratio": c,
        "speculation_savings_usd": savings,
        "verdict": verdict,
        "speedup_low_ratio": band[0] if band else None,
        "speedup_high_ratio": band[1] if band else None,
        "step_overhead_ratio": 0.0 if band else None,
        "verdict_basis": basis if band else None,
        # What the assessment concluded, as sums (0009): at h = 0, the h these windows carry.
        "plain_busy_seconds": busy * speedup if speedup is not None else None,
        "assessed_busy_seconds": busy if speedup is not None else 0.0,
        "draft_compute_usd": draft_compute,
        "rejected_usd": rejected,
    }


GOLDEN_DAYS = [date(2026, 4, 29), date(2026, 4, 30), date(2026, 5, 1), date(2026, 5, 2)]
GOLDEN_HOURS = (0, 4, 8, 12, 16, 20)
GOLDEN_CONFIG: dict[str, Any] = {
    "endpoints": [
        {
            "name": "coder",
            "url": "http://127.0.0.1:1",
            "billing_mode": "provisioned",
            "price": {"usd_per_hour": 2.5},
            "gpu_memory_bytes": 80 * 10**9,
            "speculation": {"method": "eagle", "draft_weight_bytes": 400 * 10**6},
        },
        {
            "name": "chat",
            "url": "http://127.0.0.1:2",
            "billing_mode": "serverless",
            "price": {"usd_per_hour": 3.0},
            "gpu_memory_bytes": 80 * 10**9,
            "speculation": {
                "method": "draft_model",
                "draft_cost_ratio": 0.1,
                "draft_weight_bytes": 2 * 10**9,
            },
        },
        {
            "name": "creative",
            "url": "http://127.0.0.1:3",
            "billing_mode": "serverless",
            "price": {"usd_per_hour": 3.0},
            "speculation": {"method": "eagle3"},
            "control": "creative-plain",
        },
        {
            "name": "creative-plain",
            "url": "http://127.0.0.1:4",
            "billing_mode": "serverless",
            "price": {"usd_per_hour": 3.0},
        },
        {
            "name": "batch",
            "url": "http://127.0.0.1:5",
            "billing_mode": "provisioned",
            "price": {"usd_per_hour": 4.0},
            "speculation": {"method": "ngram"},
        },
        {"name": "idle-endpoint", "url": "http://127.0.0.1:6"},
        {
            "name": "support",
            "url": "http://127.0.0.1:7",
            "engine": "sglang",
            "billing_mode": "provisioned",
            "price": {"usd_per_hour": 2.5},
            "speculation": {"method": "eagle", "draft_cost_ratio": 0.05},
        },
    ]
}


def without_drafted_count(row: dict[str, Any]) -> dict[str, Any]:
    """A window as the daemon writes it for SGLang: verify calls (drafts) and accepted
    tokens, no drafted count, so no acceptance ratio, no modelled speedup: uncertain, on
    nothing better than the defaults."""
    return {
        **row,
        "draft_tokens": None,
        "accepted_per_position": "[]",
        "acceptance_ratio": None,
        "breakeven_acceptance_ratio": None,
        "speedup_ratio": None,
        "speculation_savings_usd": None,
        "plain_busy_seconds": None,
        "assessed_busy_seconds": 0.0,
        "draft_compute_usd": None,
        "rejected_usd": None,
        "verdict": "uncertain",
        "speedup_low_ratio": None,
        "speedup_high_ratio": None,
        "step_overhead_ratio": None,
        "verdict_basis": "default",
    }


def golden_windows() -> list[dict[str, Any]]:
    rows = []
    for day in GOLDEN_DAYS:
        for hour in GOLDEN_HOURS:
            t = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
            odd = hour in (4, 12, 20)
            rows.append(
                window_row(
                    "coder",
                    t,
                    concurrency=2.0,
                    output_tokens=180_000,
                    positions=(0.8, 0.5, 0.2),
                    c=0.05,
                    usd_per_hour="2.5",
                    basis="calibrated",
                )
            )
            # Pays at 4 running requests, a tax at 80: disable above the crossover.
            restart = day == date(2026, 5, 2) and hour == 8
            rows.append(
                window_row(
                    "chat",
                    t,
                    concurrency=80.0 if odd else 4.0,
                    output_tokens=900_000 if odd else 150_000,
                    positions=(0.7, 0.5, 0.35, 0.25),
                    c=0.1,
                    usd_per_hour="3.0",
                    billing="serverless",
                    restarts=int(restart),
                    cold_usd="0.05" if restart else "0",
                    draft_load_usd="0.0125" if restart else "0",
                    # The last day without its profile: the default band leaves 1.5 uncertain.
                    basis="profile" if day != GOLDEN_DAYS[-1] else "default",
                )
            )
            # Low concurrency throughout; every other hour the traffic accepts little.
            rows.append(
                window_row(
                    "creative",
                    t,
                    concurrency=6.0,
                    output_tokens=400_000,
                    positions=(0.15, 0.05, 0.02, 0.01) if odd else (0.8, 0.65, 0.5, 0.4),
                    c=0.05,
                    usd_per_hour="3.0",
                    billing="serverless",
                    basis="measured",
                )
            )
            rows.append(
                window_row(
                    "creative-plain",
                    t,
                    concurrency=6.0,
                    output_tokens=300_000,
                    usd_per_hour="3.0",
                    billing="serverless",
                )
            )
            # Saturated, low acceptance: a tax at every hour.
            rows.append(
                window_row(
                    "batch",
                    t,
                    concurrency=100.0,
                    output_tokens=2_000_000,
                    positions=(0.4, 0.25, 0.15),
                    c=0.0,
                    usd_per_hour="4.0",
                )
            )
            # SGLang: it speculates, but shows only its (derived) acceptance length.
            rows.append(
                without_drafted_count(
                    window_row(
                        "support",
                        t,
                        concurrency=8.0,
                        output_tokens=300_000,
                        positions=(0.7, 0.5, 0.3),
                        c=0.05,
                        usd_per_hour="2.5",
                    )
                )
            )
            if day.month == 4:  # retired at the end of April: month over month shows it
                rows.append(
                    window_row(
                        "retired", t, concurrency=1.0, output_tokens=10_000, usd_per_hour="1"
                    )
                )
            # In the store, not in the configuration, and without a price.
            rows.append(
                window_row(
                    "legacy",
                    t,
                    concurrency=3.0,
                    output_tokens=50_000,
                    positions=(0.6, 0.4),
                    c=None,
                    basis=None,
                )
            )
    for row in rows:
        if row["endpoint"] in GOLDEN_KV:
            blocks, kv_bytes, usage, waiting, preemptions = GOLDEN_KV[row["endpoint"]]
            row.update(
                kv_cache_blocks=blocks,
                kv_block_size=16,
                kv_cache_bytes=kv_bytes,
                kv_usage_seconds=usage * row["seconds"],
                waiting_seconds=waiting * row["seconds"],
                preemptions=preemptions,
            )
    return rows


# The KV cache (migration 0008): blocks, stated bytes, usage, waiting requests, preemptions
# a window. creative's draft takes blocks its control keeps (measured); coder's engine states
# its KV bytes (configured, 2 MB a block); the others stored none.
GOLDEN_KV = {
    "creative": (6000.0, None, 0.85, 2.0, 3),
    "creative-plain": (8000.0, None, 0.6, 0.5, 0),
    "coder": (10000.0, 20e9, 0.3, 0.0, 0),
}


async def fill_golden(url: str) -> None:
    """The golden month's windows (`golden_windows`) stored at `url`, rolled up."""
    await stored(url, golden_windows())


async def stored(url: str, windows: list[dict[str, Any]]) -> str:
    """`windows` saved per endpoint through the store, rolled up: the report's history."""
    store = await Store.open(url)
    try:
        by_endpoint: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in windows:
            by_endpoint[row["endpoint"]].append(row)
        for endpoint, rows in by_endpoint.items():
            await store.save(endpoint, rows, None)
        await store.rollup()
    finally:
        await store.close()
    return url


def with_buckets(row: dict[str, Any], field: str, histogram: Histogram) -> None:
    """A stored window's columns of one latency histogram (`field`: time_per_output_token)."""
    row[f"{field}_sum"] = histogram.sum
    row[f"{field}_count"] = histogram.count
    row[f"{field}_buckets"] = encode_buckets(histogram.buckets)


def golden_settings(url: str) -> Settings:
    return validate({**GOLDEN_CONFIG, "storage_url": url}, "<golden>")
