"""Fleet scale: N endpoints scraped every 15 s by one spectax process, alone, then with Prometheus.

A loopback server plays N vLLM replicas, each on its own port and, like vLLM's
uvicorn, closing idle connections after 5 s (so every scrape opens a new
connection, as in a real fleet). Each serves a real recorded page
(tests/fixtures/vllm-0.32.0/spec_draft_3_after.txt) whose counters grow with
time, so every scrape parses a fresh body. spectax runs as its own process
(`spectax run`) on SQLite. Two measured phases of --seconds each, after one
interval of warm-up:

1. spectax alone (benchmarks 2, 4 and 7 of the fleet-scale issue): its CPU
   seconds per minute (user and system) and per scrape, the lag of every
   scrape behind its target's schedule as the target server sees it (arrival
   k minus arrival 0 + k x interval), /metrics latency and size (read every
   --metrics-every seconds with Prometheus' Accept header, gzip, from a process of
   its own), peak RSS; with --gc-log, spectax's collector passes of 10 ms or more
   and those that overlapped the slowest reads;
2. spectax and Prometheus 2.42 (Debian package) scraping the same N targets
   at the same time (benchmark 3): CPU per scrape of each, and the ratio. On a
   2-core machine the two (and the target server) share the cores, so each
   one's CPU per scrape is higher than alone.

    python bench/scale.py [--endpoints 2000] [--seconds 120] [--no-prometheus] [--gc-log F]

It prints numbers, never fails on them.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from load_curves import write_history

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "spec_draft_3_after.txt"
PAGE_MODEL = "tiny-llama"  # the model the page serves
VLLM_KEEPALIVE_SECONDS = 5.0  # uvicorn's --timeout-keep-alive as vLLM sets it
# Counters (and the histogram sums and counts spectax reads) that grow with time, so every
# scrape sees new traffic: tokens, drafts, finished requests, step and token timings.
GROWING = re.compile(
    r"^(vllm:(?:generation_tokens|prompt_tokens|spec_decode_num_drafts|spec_decode_num_draft_tokens|"
    r"spec_decode_num_accepted_tokens|request_success)_total\{[^}]*\}"
    r"|vllm:(?:iteration_tokens_total|inter_token_latency_seconds|"
    r"request_time_per_output_token_seconds)_(?:sum|count)\{[^}]*\}) (\S+)$",
    re.M,
)

# spectax run with every garbage-collector pass of 10 ms or more logged (wall clock,
# generation, seconds, objects collected) to the file in argv[1], for --gc-log.
GC_LOGGING_SPECTAX = """
import gc, runpy, sys, time
log = open(sys.argv.pop(1), "w", buffering=1)
started = {}
def timed(phase, info):
    if phase == "start":
        started["t"] = time.perf_counter()
        return
    took = time.perf_counter() - started["t"]
    if took >= 0.01:
        log.write(f"{time.time():.3f} {info['generation']} {took:.4f} {info['collected']}\\n")
gc.callbacks.append(timed)
sys.argv[0] = "spectax"
runpy.run_module("spectax", run_name="__main__", alter_sys=True)
"""

# What Prometheus 2.42 sends (it also asks for gzip, as aiohttp does by default).
PROMETHEUS_ACCEPT = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.platform()}; {cpu}; {os.cpu_count()} CPUs; Python {platform.python_version()}"
    )


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


#: The line after which `--variants` adds a target's other handlers' lines.
HANDLED = 'http_requests_total{handler="/v1/completions",method="POST",status="2xx"}'


class Targets:
    """N fake replicas on one loopback server; counters grow with wall time. With
    `variants` > 1, target i's page has i % variants more `http_requests_total` lines (the
    handlers it was asked on): the same series spectax reads, in pages that differ
    elsewhere, as a real fleet's do."""

    def __init__(self, count: int, variants: int = 1):
        self.count = count
        self.variants = variants
        template = PAGE.read_text()
        self.parts: list[str] = []
        self.bases: list[float] = []
        last = 0
        for match in GROWING.finditer(template):
            self.parts.append(template[last : match.start(2)])
            self.bases.append(float(match.group(2)))
            last = match.end(2)
        self.tail = template[last:]
        self.arrivals: dict[int, list[float]] = defaultdict(list)
        self.prometheus_scrapes = 0
        self.started = time.time()

    def page(self, target: int) -> str:
        growth = 1.0 + (time.time() - self.started) / 60.0 + target * 1e-4
        out = []
        for part, base in zip(self.parts, self.bases, strict=True):
            out.append(part)
            value = base * growth
            out.append(f"{round(value)}.0" if base.is_integer() else repr(round(value, 6)))
        out.append(self.tail)
        page = "".join(out)
        variant = target % self.variants
        if variant:
            head, line, rest = page.partition(HANDLED)
            end = rest.index("\n") + 1
            more = "".join(
                f'http_requests_total{{handler="/v{k}",method="GET",status="4xx"}} {k + 1}.0\n'
                for k in range(variant)
            )
            page = head + line + rest[:end] + more + rest[end:]
        return page

    async def handle(self, request: web.Request) -> web.Response:
        target = int(request.match_info["target"])
        if request.headers.get("User-Agent", "").startswith("Prometheus"):
            self.prometheus_scrapes += 1
            return web.Response(text=self.page(target), content_type="text/plain")
        self.arrivals[target].append(time.monotonic())
        return web.Response(text=self.page(target), content_type="text/plain")

    def lags(self, interval: float, since: float, until: float) -> list[tuple[float, float]]:
        """How late each scrape arrived in [since, until], against its target's schedule
        (its first arrival, then every `interval`), with when it arrived (wall clock)."""
        wall = time.time() - time.monotonic()
        return sorted(
            (t - (times[0] + k * interval), t + wall)
            for times in self.arrivals.values()
            for k, t in enumerate(times)
            if since <= t <= until
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--window", default="5m", help="spectax's window (and so its boundaries)")
    parser.add_argument(
        "--one-target-server",
        dest="distinct_targets",
        action="store_false",
        help="serve every replica from one host:port (connections are then shared and kept)",
    )
    parser.add_argument(
        "--metrics-every",
        type=float,
        default=5.0,
        help="seconds between two reads of spectax's /metrics (Prometheus would use 15)",
    )
    parser.add_argument(
        "--gc-log",
        type=Path,
        help="log spectax's garbage-collector passes of 10 ms or more to this file",
    )
    parser.add_argument(
        "--history-hours",
        type=float,
        default=0.0,
        help="start spectax on a store holding this many hours of each endpoint's windows",
    )
    parser.add_argument(
        "--history-copy",
        type=Path,
        help="with --history-hours: copy the store from this file if it exists (its windows "
        "age: for runs one after the other), else write it and save a copy there",
    )
    parser.add_argument(
        "--variants",
        type=int,
        default=1,
        help="serve this many variants of the page, differing in lines spectax does not "
        "read (target i gets i %% N more HTTP handler lines)",
    )
    parser.add_argument("--reader", help=argparse.SUPPRESS)  # the /metrics reader's own process
    args = parser.parse_args()
    if args.reader:
        print(json.dumps(await read_metrics(args.reader, args.seconds, args.metrics_every)))
        return
    work = Path(tempfile.mkdtemp(prefix="spectax-scale-"))
    targets = Targets(args.endpoints, args.variants)
    app = web.Application()
    app.router.add_get("/t/{target}/metrics", targets.handle)
    # vLLM's HTTP server (uvicorn) closes an idle connection after 5 s, so with a 15 s
    # interval every scrape of a real replica opens a new connection; each replica is
    # its own host:port here, so no connection serves two of them.
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=VLLM_KEEPALIVE_SECONDS)
    await runner.setup()
    hosts = []
    for _ in range(args.endpoints if args.distinct_targets else 1):
        target_port = free_port()
        await web.TCPSite(runner, "127.0.0.1", target_port, backlog=4096).start()
        hosts.append(f"127.0.0.1:{target_port}")

    port = free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "scrape_interval": f"{args.interval}s",
        "scrape_timeout": "10s",
        "window": args.window,
        "state_directory": str(work / "state"),
        "endpoints": [
            {
                "name": f"replica-{i:05d}",
                "url": f"http://{hosts[i % len(hosts)]}/t/{i}/metrics",
                "gpu": "H100 SXM",
                "price": {"usd_per_hour": 3.99},
                "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
            }
            for i in range(args.endpoints)
        ],
    }
    (work / "spectax.yml").write_text(yaml.safe_dump(config))
    if args.history_hours > 0:
        database = work / "state" / "spectax.sqlite"
        if args.history_copy is not None and args.history_copy.exists():
            database.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(args.history_copy, database)
            print(f"history: copied from {args.history_copy}", flush=True)
        else:
            names = [endpoint["name"] for endpoint in config["endpoints"]]
            await write_history(database, names, args.history_hours, PAGE_MODEL)
            if args.history_copy is not None:
                shutil.copyfile(database, args.history_copy)
    run = ["-m", "spectax"] if args.gc_log is None else ["-c", GC_LOGGING_SPECTAX, str(args.gc_log)]
    spectax = subprocess.Popen(
        [
            sys.executable,
            *run,
            "--log-level",
            "warning",
            "run",
            "--config",
            str(work / "spectax.yml"),
        ],
        stdout=(work / "spectax.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                try:
                    async with session.get(f"{url}/-/ready") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.2)
            await asyncio.sleep(args.interval)  # warm-up: start-up and first scrapes excluded
            alone = await measure(url, spectax.pid, None, targets, args)
            prometheus_binary = shutil.which("prometheus")
            if prometheus_binary and not args.no_prometheus:
                prometheus = start_prometheus(prometheus_binary, work, hosts, args)
                # warm-up: its first rounds create 1.3 M series and cost twice the steady state
                await asyncio.sleep(2 * args.interval)
                beside = await measure(url, spectax.pid, prometheus.pid, targets, args)
        rss = peak_rss_mb(spectax.pid)
    finally:
        spectax.terminate()
        spectax.wait(30)
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        await runner.cleanup()

    print(f"machine: {machine()}")
    print(
        f"endpoints {args.endpoints}, interval {args.interval:g} s, {args.seconds:g} s per phase"
        + (f", {args.variants} variants of the page" if args.variants > 1 else "")
    )
    print("\n1. spectax alone")
    report_spectax(alone)
    lags = [lag for lag, _ in alone["lags"]]
    print(
        f"   scrape lag behind schedule: max {lags[-1]:.3f} s, p99 "
        f"{lags[int(len(lags) * 0.99)]:.3f} s, p50 {lags[len(lags) // 2]:.3f} s "
        f"(target: max < 1 s); the latest arrived {alone['lags'][-1][1] % 300:.1f} s after a "
        "5-minute boundary"
    )
    latencies = sorted(took for took, _ in alone["reads"])
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    print(
        f"   /metrics: {alone['size'] / 1e6:.2f} MB ({alone['gzip_size'] / 1e6:.2f} MB gzipped), "
        f"p50 {statistics.median(latencies) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, "
        f"max {latencies[-1] * 1e3:.0f} ms over {len(latencies)} requests (target: p99 < 250 ms)"
        f"; the last read's load curves: {alone['bins']} bins"
    )
    for took, ended in sorted(alone["reads"], reverse=True)[:3]:
        print(
            f"   slow /metrics read: {took * 1e3:.0f} ms, ended at {ended:.3f} "
            f"({ended % 300:.1f} s after a 5-minute boundary)"
        )
    if args.gc_log:
        report_gc(args.gc_log, alone["reads"])
    print(f"   target server (this process) CPU: {alone['own_cpu']:.2f} s per minute")
    print(f"   spectax peak RSS: {rss:.0f} MB (target < 200 MB)")
    if prometheus is None:
        print("\n2. prometheus: not installed (apt-get install prometheus) or disabled")
        shutil.rmtree(work, ignore_errors=True)
        return
    print("\n2. spectax and Prometheus side by side")
    report_spectax(beside)
    prom_user, prom_system = beside["prometheus_cpu"]
    prom_scrapes = beside["prometheus_scrapes"]
    prom_per_scrape = (prom_user + prom_system) / max(prom_scrapes, 1)
    spectax_per_scrape = sum(beside["cpu"]) / max(beside["scrapes"], 1)
    print(
        f"   prometheus CPU: {(prom_user + prom_system) / beside['elapsed'] * 60:.2f} s per "
        f"minute (user {prom_user:.1f} s, system {prom_system:.1f} s), {prom_scrapes} scrapes, "
        f"{prom_per_scrape * 1e3:.3f} ms per scrape"
    )
    print(
        f"   CPU per scrape, spectax / prometheus: {spectax_per_scrape / prom_per_scrape:.2f} "
        f"(target <= 1.5)"
    )
    shutil.rmtree(work, ignore_errors=True)


def start_prometheus(
    binary: str, work: Path, hosts: list[str], args: argparse.Namespace
) -> subprocess.Popen[bytes]:
    """Prometheus scraping the same replicas: one job per replica path."""
    config = {
        "global": {"scrape_interval": f"{int(args.interval)}s", "scrape_timeout": "10s"},
        "scrape_configs": [
            {
                "job_name": f"replica-{i:05d}",
                "metrics_path": f"/t/{i}/metrics",
                "static_configs": [{"targets": [hosts[i % len(hosts)]]}],
            }
            for i in range(args.endpoints)
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'prom'}",
            f"--web.listen-address=127.0.0.1:{free_port()}",
        ],
        stdout=(work / "prometheus.log").open("w"),
        stderr=subprocess.STDOUT,
    )


async def measure(
    url: str,
    spectax_pid: int,
    prometheus_pid: int | None,
    targets: Targets,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One phase of --seconds: CPU of spectax (and Prometheus), scrapes, lags, /metrics.

    /metrics is read from a process of its own, as Prometheus would: this one is busy
    serving 2,000 targets, and its own delays would count as spectax's."""
    user0, system0 = cpu_times(spectax_pid)
    prom0 = cpu_times(prometheus_pid) if prometheus_pid else (0.0, 0.0)
    own0, t0 = time.process_time(), time.monotonic()
    scrapes0 = sum(len(v) for v in targets.arrivals.values())
    prom_scrapes0 = targets.prometheus_scrapes
    reader = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--reader",
        f"{url}/metrics",
        f"--seconds={args.seconds}",
        f"--metrics-every={args.metrics_every}",
        stdout=subprocess.PIPE,
    )
    out, _ = await reader.communicate()
    reads = json.loads(out)
    t1 = time.monotonic()
    user1, system1 = cpu_times(spectax_pid)
    prom1 = cpu_times(prometheus_pid) if prometheus_pid else (0.0, 0.0)
    return {
        "elapsed": t1 - t0,
        "cpu": (user1 - user0, system1 - system0),
        "prometheus_cpu": (prom1[0] - prom0[0], prom1[1] - prom0[1]),
        "prometheus_scrapes": targets.prometheus_scrapes - prom_scrapes0,
        "scrapes": sum(len(v) for v in targets.arrivals.values()) - scrapes0,
        "lags": targets.lags(args.interval, t0, t1),
        "own_cpu": (time.process_time() - own0) / (t1 - t0) * 60,
        "size": reads["size"],
        "gzip_size": reads["gzip_size"],
        "bins": reads["bins"],
        "reads": reads["reads"],
    }


async def read_metrics(url: str, seconds: float, every: float) -> dict[str, Any]:
    """Read /metrics as Prometheus does every `every` seconds for `seconds`: each read's
    (seconds taken, wall clock when it ended), the last body's size and its load curves'
    bins (`spectax_load_time_share_ratio` lines)."""
    reads, size, gzip_size, bins = [], 0, 0, 0
    headers = {**PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < t0 + seconds:
            started = time.monotonic()
            async with session.get(url, headers=headers, auto_decompress=False) as r:
                compressed = await r.read()
            reads.append((time.monotonic() - started, time.time()))
            body = gzip.decompress(compressed)
            gzip_size, size = len(compressed), len(body)
            bins = body.count(b"\nspectax_load_time_share_ratio{")
            await asyncio.sleep(max(0.0, started + every - time.monotonic()))
    return {"reads": reads, "size": size, "gzip_size": gzip_size, "bins": bins}


def report_gc(log: Path, reads: list[tuple[float, float]]) -> None:
    """The garbage-collector passes of 10 ms or more, and those that overlapped slow reads."""
    passes = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    for generation in (0, 1, 2):
        took = sorted(p[2] for p in passes if p[1] == generation)
        if took:
            print(
                f"   gc generation {generation}: {len(took)} passes >= 10 ms, "
                f"max {took[-1] * 1e3:.0f} ms, median {statistics.median(took) * 1e3:.0f} ms"
            )
    median = statistics.median(took for took, _ in reads)
    for took, ended in sorted(reads, reverse=True)[:5]:
        during = [p for p in passes if ended - took <= p[0] <= ended]
        paused = sum(p[2] for p in during) * 1e3
        print(
            f"   read of {took * 1e3:.0f} ms (median {median * 1e3:.0f}): "
            f"{len(during)} gc passes >= 10 ms during it, {paused:.0f} ms in all"
        )


def report_spectax(phase: dict[str, Any]) -> None:
    user, system = phase["cpu"]
    per_minute = (user + system) / phase["elapsed"] * 60
    print(
        f"   spectax CPU: {per_minute:.2f} s per minute = {per_minute / 60:.1%} of one core "
        f"(user {user:.1f} s, system {system:.1f} s; target < 30%)"
    )
    print(
        f"   spectax scrapes: {phase['scrapes']} ({phase['scrapes'] / phase['elapsed']:.1f}/s), "
        f"{(user + system) / max(phase['scrapes'], 1) * 1e3:.3f} ms CPU per scrape"
    )


if __name__ == "__main__":
    asyncio.run(main())
