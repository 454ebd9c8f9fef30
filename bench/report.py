"""Benchmark: `spectax report` over a year of history for 100 endpoints.

Builds (once, then reuses) a SQLite store holding what a year of the daemon
leaves behind for 100 endpoints: one hourly rollup row per endpoint and hour
(876,000 rows) and one daily row per endpoint and day (36,500 rows), the
tables the report reads. The rows are generated directly, not by running
monitors: hourly sums from a simple traffic model per endpoint (daily load
cycle, acceptance per position, draft cost ratio, ridge batch, provisioned or
serverless billing, a few restarts), daily rows summed from them with the
store's own rollup function, so they add up exactly as the daemon's do.

Then it times the report for the last month (rollup of what is due, reading
two months of daily and hourly rows, computing, rendering) in each format, and
prints the figures.

    PYTHONPATH=exporter python bench/report.py [--endpoints 100] [--days 365]
        [--db /tmp/spectax-bench-report.sqlite] [--fresh]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import create_engine, func, insert, select

from spectax import economics
from spectax.report.build import build_report
from spectax.report.figures import EndpointInfo
from spectax.report.period import Month
from spectax.report.read import ProjectionReader
from spectax.report.render import render
from spectax.store import Store
from spectax.store.models import DailyRow, HourlyRow
from spectax.store.rollup import VERDICT_COLUMNS, rollup_rows

NANO = Decimal("0.000000001")
END = datetime(2026, 1, 1, tzinfo=UTC)  # the year of history ends here; the report is 2025-12
METHODS = ("eagle3", "ngram", "draft_model", "mtp", None)


def endpoint_profile(i: int) -> dict[str, Any]:
    rng = random.Random(i)
    method = METHODS[i % len(METHODS)]
    k = {"eagle3": 4, "ngram": 3, "draft_model": 5, "mtp": 2, None: 0}[method]
    return {
        "name": f"ep-{i:03d}",
        "billing_mode": "serverless" if i % 3 == 0 else "provisioned",
        "method": method,
        "k": k,
        "c": {"eagle3": 0.05, "ngram": 0.0, "draft_model": 0.12, "mtp": 0.05, None: 0.0}[method],
        "p0": rng.uniform(0.45, 0.92),
        "decay": rng.uniform(0.55, 0.9),
        "concurrency": rng.choice([1.5, 4, 8, 16, 32, 64, 96]),
        "amplitude": rng.uniform(0.2, 0.7),
        "ridge": rng.choice([24.0, 32.0, 48.0]),
        "usd_per_hour": Decimal(rng.choice(["1.99", "2.69", "3.99", "4.49"])),
        "gpus": rng.choice([1, 1, 2, 4, 8]),
        "draft_weight_bytes": 10**9 if method == "draft_model" else 500 * 10**6,
    }


def hour_rows(p: dict[str, Any], start: datetime, hours: int, rng: random.Random) -> list[Any]:
    """An endpoint's hourly sums: load follows a daily cycle, acceptance a per-position decay."""
    rows = []
    k, c, ridge = p["k"], p["c"], p["ridge"]
    positions = [p["p0"] * p["decay"] ** j for j in range(k)]
    tau = 1.0 + sum(positions)
    price = p["usd_per_hour"] * p["gpus"]
    for h in range(hours):
        t = start + timedelta(hours=h)
        phase = 2 * math.pi * (t.hour / 24.0)
        b = max(0.0, p["concurrency"] * (1 - p["amplitude"] * math.cos(phase)) * rng.gauss(1, 0.1))
        busy = 3600.0 if b > 0.05 else 0.0
        # Output tokens: ~30 tokens/s per running request, fewer when compute-bound.
        g = int(b * 3600 * 30 * tau / (1 + b / ridge) / (1 + k * 0.1)) if busy else 0
        steps = g / tau if g else 0
        drafts = int(steps) if k else None
        per_pos = [int(steps * q * rng.gauss(1, 0.02)) for q in positions] if k else []
        accepted = sum(per_pos) if k else None
        draft_tokens = k * int(steps) if k else None
        restarts = 1 if rng.random() < 0.004 else 0
        serverless = p["billing_mode"] == "serverless"
        spend = (price * Decimal(busy if serverless else 3600.0) / 3600).quantize(NANO)
        cold = draft_load = Decimal(0)
        if restarts and serverless:
            cold = (price * 60 / 3600).quantize(NANO)
            draft_load = (price * 1 / 3600).quantize(NANO)
            spend += cold
        busy_spend = spend - cold if serverless else (spend * Decimal(busy / 3600)).quantize(NANO)
        savings = None
        judged = dict.fromkeys(VERDICT_COLUMNS, 0 if k else None)
        if k and g and draft_tokens:
            s = economics.modelled_speedup(g, accepted or 0, draft_tokens, b, ridge, c)
            if s is not None:
                savings = economics.speculation_savings_usd(float(busy_spend), s, float(draft_load))
                # The hour's 12 windows, judged as the daemon does on the default basis.
                judged["windows_pays" if s > 1 else "windows_tax"] = 12
                judged["windows_basis_default"] = 12
        rows.append(
            SimpleNamespace(
                endpoint=p["name"],
                model="served-model",
                start=t,
                end=t + timedelta(hours=1),
                windows=12,
                seconds=3600.0,
                busy_seconds=busy,
                restarts=restarts,
                output_tokens=g,
                prompt_tokens=g * 2,
                requests_finished=g // 250,
                drafts=drafts,
                draft_tokens=draft_tokens,
                accepted_tokens=accepted,
                accepted_per_position=json.dumps(per_pos),
                running_seconds=b * 3600.0,
                iteration_tokens_sum=float(g * 3),
                iteration_tokens_count=float(steps),
                inter_token_latency_sum=float(steps) * 0.03,
                inter_token_latency_count=float(steps),
                time_per_output_token_sum=float(g // 250) * 0.03,
                time_per_output_token_count=float(g // 250),
                estimated_flops=0.0,  # vLLM without --enable-mfu-metrics
                estimated_read_bytes=0.0,
                # The KV cache (migration 0007): the report's capacity section reads it.
                preemptions=0,
                waiting_seconds=0.0,
                kv_usage_seconds=min(1.0, b / 64) * 3600.0,
                kv_cache_blocks=8192.0,
                kv_block_size=16.0,
                kv_cache_bytes=None,
                spend_usd=spend,
                busy_spend_usd=busy_spend,
                cold_start_usd=cold,
                draft_load_usd=draft_load,
                speculation_savings_usd=savings,
                draft_cost_ratio=c if k else None,
                ridge_batch_requests=ridge,
                **judged,
                ridge_batch_source="configured",
                speedup_low_ratio=None,
                speedup_high_ratio=None,
                step_overhead_ratio=0.0 if k else None,
            )
        )
    return rows


def build_store(path: Path, endpoints: int, days: int) -> None:
    url = f"sqlite+aiosqlite:///{path}"
    asyncio.run(_create_schema(url))
    engine = create_engine(f"sqlite:///{path}")
    start = END - timedelta(days=days)
    t0 = time.perf_counter()
    with engine.begin() as conn:
        for i in range(endpoints):
            p = endpoint_profile(i)
            hourly = hour_rows(p, start, days * 24, random.Random(1000 + i))
            conn.execute(insert(HourlyRow), [_columns(r) for r in hourly])
            daily = []
            for d in range(days):
                group = hourly[d * 24 : (d + 1) * 24]
                daily += rollup_rows(p["name"], group[0].start, "day", group)
            conn.execute(insert(DailyRow), daily)
            if sys.stderr.isatty():
                print(f"\r  writing history: endpoint {i + 1}/{endpoints}", end="", file=sys.stderr)
    print(f"\r  wrote the history in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    engine.dispose()


async def _create_schema(url: str) -> None:
    store = await Store.open(url)
    await store.close()


def _columns(row: Any) -> dict[str, Any]:
    return dict(vars(row))


def row_counts(path: Path) -> tuple[int, int]:
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        hourly = conn.execute(select(func.count()).select_from(HourlyRow)).scalar_one()
        daily = conn.execute(select(func.count()).select_from(DailyRow)).scalar_one()
    engine.dispose()
    return hourly, daily


def infos(endpoints: int) -> dict[str, EndpointInfo]:
    result = {}
    for i in range(endpoints):
        p = endpoint_profile(i)
        result[p["name"]] = EndpointInfo(
            name=p["name"],
            configured=True,
            billing_mode=p["billing_mode"],
            method=p["method"],
            draft_weight_bytes=p["draft_weight_bytes"] if p["method"] else None,
            gpu_memory_bytes=80 * 10**9,
        )
    return result


async def time_report(
    path: Path, endpoints: int, fmt: str, orm: bool = False
) -> tuple[float, float, float, int]:
    """(wall s to build, wall s to render, CPU s of both, bytes) for the last month.

    As `spectax report` does it (rows read by a projection), or with `orm` through
    `Store.rows()`, for comparison."""
    month = Month.of(END - timedelta(days=1))
    url = f"sqlite+aiosqlite:///{path}"
    t0, cpu = time.perf_counter(), time.process_time()
    store = await Store.open(url)
    try:
        if orm:
            report = await build_report(store, month, infos(endpoints))
        else:
            async with ProjectionReader(url) as reader:
                report = await build_report(store, month, infos(endpoints), reader=reader)
    finally:
        await store.close()
    t1 = time.perf_counter()
    text = render(report, fmt)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, time.process_time() - cpu, len(text.encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoints", type=int, default=100)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--db", type=Path, default=Path("/tmp/spectax-bench-report.sqlite"))
    parser.add_argument("--fresh", action="store_true", help="rebuild the store")
    args = parser.parse_args()
    marker = args.db.with_suffix(".json")
    wanted = {"endpoints": args.endpoints, "days": args.days, "version": 1}
    if args.fresh or not args.db.exists() or _read(marker) != wanted:
        args.db.unlink(missing_ok=True)
        print(f"building {args.db}: {args.endpoints} endpoints x {args.days} days", file=sys.stderr)
        build_store(args.db, args.endpoints, args.days)
        marker.write_text(json.dumps(wanted))
    hourly, daily = row_counts(args.db)
    print(f"machine: {platform.platform()}; CPython {platform.python_version()}")
    print(f"store:   {args.db} ({args.db.stat().st_size / 1e6:.0f} MB, SQLite)")
    scale = f"{args.endpoints} endpoints x {args.days} d"
    print(f"rows:    {hourly:,} hourly, {daily:,} daily ({scale})")
    print(f"report:  {Month.of(END - timedelta(days=1))} (reads it and the month before)")
    print()
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    header = f"{'format':<8}{'build s':>10}{'render s':>10}{'total s':>10}{'CPU s':>10}"
    print(f"{header}{'bytes':>12}")
    worst = worst_cpu = 0.0
    for fmt in ("md", "csv", "html"):
        build, rendering, cpu, size = asyncio.run(time_report(args.db, args.endpoints, fmt))
        worst, worst_cpu = max(worst, build + rendering), max(worst_cpu, cpu)
        print(
            f"{fmt:<8}{build:>10.2f}{rendering:>10.2f}{build + rendering:>10.2f}{cpu:>10.2f}"
            f"{size:>12,}"
        )
    build, rendering, cpu, size = asyncio.run(time_report(args.db, args.endpoints, "md", True))
    print(
        f"{'md, rows through Store.rows() (ORM), for comparison':<52}"
        f"{build + rendering:>6.2f} s wall {cpu:>6.2f} s CPU"
    )
    print()
    verdict = "OK" if worst < 10.0 else "OVER"
    print(f"slowest: {worst:.2f} s wall, {worst_cpu:.2f} s CPU (target < 10 s: {verdict})")
    return 0 if worst < 10.0 else 1


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(main())
