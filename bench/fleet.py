"""Fleet mode at scale: one spectax reading N replicas' windows from a real Prometheus.

The replicas are simulated as bench/scale.py simulates them: each serves the series
spectax reads from a recorded vLLM page (tests/fixtures/vllm-0.32.0/spec_draft_3_after.txt:
tokens, drafts, accepted tokens per position, finished requests by reason, the three
histograms' sums and counts, the FLOP estimates, running requests: every series the fleet
queries name, `promql.names()`, 28 a replica of that page),
counters growing at a rate of the replica's own, one sample every --interval seconds.
Prometheus does not scrape them live: the samples are written as OpenMetrics and turned
into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`, from
(lookback + one window) before the start to the end of the measured windows, so the
blocks reach into the future and Prometheus answers each live window as if it had
scraped it. (A real Prometheus of such a fleet holds the replicas' ~650 series each;
spectax's queries select by metric name, so the others cost it nothing.)

`spectax run` (SQLite, no configured endpoints, one `sources:` entry with
`endpoint_labels: [namespace, pod]`: each replica its own endpoint, or with
--replicas-per-endpoint K, K pods of one deployment summed into one endpoint as
data-parallel ranks are) reads the windows as they close, `delay` after each boundary.
Measured: the CPU of each window's read (user + system, /proc, from one window written to
the next, i.e. averaged over a window), per replica; how long after its boundary each
window's rows were all in the store (polled once a second); peak RSS (VmHWM).

    PYTHONPATH=exporter python bench/fleet.py [--replicas 20000] [--window 300] [--windows 2]
    PYTHONPATH=exporter python bench/fleet.py --replicas 500 --window 60   # ~2 min

It prints numbers, never fails on them.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "tests" / "fixtures" / "vllm-0.32.0" / "spec_draft_3_after.txt"
sys.path.insert(0, str(ROOT / "bench"))

from scale import cpu_times, free_port, machine, peak_rss_mb  # noqa: E402
from spectax.sources.promql import names  # noqa: E402

# The series spectax's queries read (spectax.sources.promql.names), as on the page.
READ = re.compile(r"^(" + "|".join(map(re.escape, names())) + r")\{([^}]*)\} (\S+)$", re.M)
TARGETS = {"cpu": 0.10, "lateness": 30.0, "rss": 300.0}


def page_series() -> list[tuple[str, str, float]]:
    """(metric name, labels without `engine`, value at the page's time) of the series read."""
    out = []
    for name, labels, value in READ.findall(PAGE.read_text()):
        kept = ",".join(p for p in labels.split(",") if not p.startswith("engine="))
        out.append((name, kept, float(value)))
    return out


def write_openmetrics(
    path: Path, replicas: int, per_endpoint: int, t0: int, t1: int, interval: int
) -> int:
    """The replicas' samples from t0 to t1, grouped by metric family as OpenMetrics wants;
    returns the number of samples."""
    series = page_series()
    stamps = list(range(t0, t1 + 1, interval))
    samples = 0
    families: dict[str, list[tuple[str, float]]] = {}
    for name, labels, value in series:
        families.setdefault(name, []).append((labels, value))
    with path.open("w", buffering=1 << 22) as out:
        for name, members in families.items():
            for replica in range(replicas):
                pod = f'namespace="ns-{replica // per_endpoint:05d}",pod="pod-{replica:05d}"'
                rate = 1.0 + (replica % 97) / 97  # per second, relative to the page's value
                for labels, value in members:
                    head = f'{name}{{{labels},{pod},job="vllm"}} '
                    if name.endswith("running"):
                        lines = [f"{head}{(replica + k) % 5} {t}\n" for k, t in enumerate(stamps)]
                    elif value.is_integer():
                        lines = [
                            f"{head}{math.floor(value * (1 + rate * (t - t0) / 300))} {t}\n"
                            for t in stamps
                        ]
                    else:
                        lines = [
                            f"{head}{value * (1 + rate * (t - t0) / 300):.6f} {t}\n" for t in stamps
                        ]
                    out.write("".join(lines))
                    samples += len(lines)
        out.write("# EOF\n")
    return samples


def written(database: Path, end: float) -> int:
    """How many endpoints' rows of the window ending at `end` are in the store."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as db:
            stamp = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M:%S")
            row = db.execute(
                'SELECT COUNT(DISTINCT endpoint) FROM windows WHERE "end" LIKE ?', (stamp + "%",)
            ).fetchone()
            return int(row[0])
    except sqlite3.Error:
        return 0


def wait_ready(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} not ready within {seconds:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--replicas", type=int, default=20000)
    parser.add_argument("--replicas-per-endpoint", type=int, default=1)
    parser.add_argument("--window", type=int, default=300, help="seconds")
    parser.add_argument("--windows", type=int, default=2, help="windows measured")
    parser.add_argument("--interval", type=int, default=15, help="seconds between samples")
    parser.add_argument("--delay", type=float, default=15.0, help="the source's delay, s")
    parser.add_argument("--lookback", type=float, default=300.0, help="the source's lookback, s")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--profile", type=Path, help="run spectax under cProfile, its stats written here"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spectax-fleet-"))
    load_before = os.getloadavg()
    now = time.time()
    soonest = (math.floor(now / args.window) + 1) * args.window  # the first window's end, at best
    t0 = int(soonest - args.window - args.lookback - 2 * args.interval)
    # Two windows to spare: generating 20,000 replicas' blocks takes minutes.
    t1 = int(soonest + (args.windows + 2) * args.window + args.interval)
    started = time.monotonic()
    samples = write_openmetrics(
        work / "fleet.om",
        args.replicas,
        args.replicas_per_endpoint,
        t0 // args.interval * args.interval,
        t1,
        args.interval,
    )
    generated = time.monotonic() - started
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(work / "fleet.om"),
            str(work / "prom"),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    blocks = time.monotonic() - started - generated
    (work / "fleet.om").unlink()
    prom_port, port = free_port(), free_port()
    (work / "prometheus.yml").write_text("global: {}\n")
    prometheus = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'prom'}",
            "--storage.tsdb.retention.time=30d",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=(work / "prometheus.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    spectax: subprocess.Popen[bytes] | None = None
    try:
        wait_ready(f"http://127.0.0.1:{prom_port}/-/ready", 120)
        config = {
            "listen": f"127.0.0.1:{port}",
            "window": f"{args.window}s",
            "state_directory": str(work / "state"),
            "endpoints": [],
            "sources": [
                {
                    "type": "prometheus",
                    "url": f"http://127.0.0.1:{prom_port}",
                    "selector": 'job="vllm"',
                    "endpoint_labels": ["namespace"]
                    if args.replicas_per_endpoint > 1
                    else ["namespace", "pod"],
                    "delay": f"{args.delay:g}s",
                    "lookback": f"{args.lookback:g}s",
                    "timeout": "120s",
                    "endpoint": {
                        "gpu": "H100 SXM",
                        "price": {"usd_per_hour": 3.99},
                        "speculation": {"method": "draft_model", "draft_cost_ratio": 0.1},
                    },
                }
            ],
        }
        (work / "spectax.yml").write_text(yaml.safe_dump(config))
        spectax = subprocess.Popen(
            [
                sys.executable,
                *(["-m", "cProfile", "-o", str(args.profile.resolve())] if args.profile else []),
                "-m",
                "spectax",
                "--log-level",
                "warning",
                "run",
                "--config",
                str(work / "spectax.yml"),
            ],
            stdout=(work / "spectax.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        wait_ready(f"http://127.0.0.1:{port}/-/ready", 120)
        first_end = (math.floor((time.time() - args.delay) / args.window) + 1) * args.window
        if first_end + args.windows * args.window > t1:
            raise SystemExit("the blocks were made too slowly for the windows to measure")
        endpoints = math.ceil(args.replicas / args.replicas_per_endpoint)
        database = work / "state" / "spectax.sqlite"
        rows = []  # (window end, s after the boundary, CPU s so far, RSS now, Prometheus CPU s)
        for k in range(args.windows + 1):
            end = first_end + k * args.window
            while written(database, end) < endpoints:
                if spectax.poll() is not None:
                    raise SystemExit(
                        f"spectax exited: {(work / 'spectax.log').read_text()[-3000:]}"
                    )
                if time.time() > end + args.delay + 600:
                    raise SystemExit(f"window {end} not written within 10 minutes")
                time.sleep(1.0)
            cpu, prom = sum(cpu_times(spectax.pid)), sum(cpu_times(prometheus.pid))
            rows.append((end, time.time() - end, cpu, rss_mb(spectax.pid), prom))
            print(
                f"window ending {datetime.fromtimestamp(end, UTC):%H:%M:%S}: written "
                f"{rows[-1][1]:.1f} s after its boundary, RSS {rows[-1][3]:.0f} MiB",
                flush=True,
            )
        peak = peak_rss_mb(spectax.pid)
    finally:
        if spectax is not None:
            spectax.terminate()
            spectax.wait(30)
        prometheus.terminate()
        prometheus.wait(30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, endpoints, samples, generated, blocks, rows, peak, load_before)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def report(
    args: argparse.Namespace,
    endpoints: int,
    samples: int,
    generated: float,
    blocks: float,
    rows: list[tuple[float, float, float, float, float]],
    peak: float,
    load_before: tuple[float, float, float],
) -> None:
    cpu = [(b[2] - a[2]) for a, b in itertools.pairwise(rows)]
    per_window = sum(cpu) / len(cpu)
    share = per_window / args.window
    late = max(r[1] for r in rows[1:])
    print(f"\nmachine: {machine()}")
    print(
        f"load average before/after: {load_before[0]:.1f}/{os.getloadavg()[0]:.1f} "
        f"(1 min, {os.cpu_count()} CPUs)"
    )
    print(
        f"{args.replicas} replicas as {endpoints} endpoints, {len(page_series())} series each, "
        f"a sample every "
        f"{args.interval} s; {samples / 1e6:.1f} M samples written in {generated:.0f} s, "
        f"blocks made in {blocks:.0f} s"
    )
    print(
        f"window {args.window} s, source delay {args.delay:g} s, lookback {args.lookback:g} s;"
        f" first window (discovery, {endpoints} new endpoints): written {rows[0][1]:.1f} s "
        f"after its boundary\n"
    )
    prometheus = sum(b[4] - a[4] for a, b in itertools.pairwise(rows)) / len(cpu)
    table = [
        ("CPU per window (after the first)", f"{per_window:.2f} s", "", ""),
        (
            "CPU averaged over a window",
            f"{share * 100:.2f} % of a core",
            "< 10 %",
            f"{share / TARGETS['cpu']:.2f}",
        ),
        ("Prometheus CPU per window (answering)", f"{prometheus:.2f} s", "", ""),
        ("CPU per replica per window", f"{per_window / args.replicas * 1e3:.3f} ms", "", ""),
        (
            "later windows written after boundary, max",
            f"{late:.1f} s",
            "<= 30 s",
            f"{late / TARGETS['lateness']:.2f}",
        ),
        ("peak RSS (VmHWM)", f"{peak:.0f} MiB", "< 300 MiB", f"{peak / TARGETS['rss']:.2f}"),
    ]
    print(f"{'figure':42} {'value':>20} {'target':>10} {'ratio':>6}")
    for name, value, target, ratio in table:
        print(f"{name:42} {value:>20} {target:>10} {ratio:>6}")


if __name__ == "__main__":
    main()
