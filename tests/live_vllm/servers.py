"""Real `vllm serve` processes on loopback, and the raw numbers read from their pages.

The vLLM CPU build lives in its own venv outside the source tree, made by `setup.sh`
beside this file (see ../shared/NOTES.md, "A real vLLM server on this CPU-only
machine"). Everything here is synchronous and plain `subprocess`, so it works in a
module-scoped pytest fixture and in `bench/` alike.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from live_vllm import traffic

HERE = Path(__file__).resolve().parent
SETUP = HERE / "setup.sh"
MODEL_NAME = "tiny-llama"
NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 4,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
DRAFT_TOKENS = 3
#: The schedule tier's n-gram server (vLLM's Dynamic Speculative Decoding, PR 32374): K = 4
#: up to 2 running requests, none from 3, which vLLM 0.32's CPU build accepts and runs
#: (seen: drafted tokens per step fell ~14x from one request to six).
SCHEDULE = [[1, 2, 4], [3, 8, 0]]
SERVER_RSS_BYTES = 3_300_000_000  # ~3.2 GB each, measured
READY_TIMEOUT = 240.0  # ~25 s alone; three starting together on 2 cores take longer
STOP_TIMEOUT = 30.0  # SIGTERM stops one in 2-5 s


def vllm_home() -> Path:
    return Path(os.environ.get("SPECTAX_VLLM_HOME", Path.home() / ".cache" / "spectax-vllm"))


def in_ci() -> bool:
    return os.environ.get("SPECTAX_CI") == "1"


def installed(home: Path | None = None) -> bool:
    home = home or vllm_home()
    return (
        (home / "ready").is_file()
        and (home / "venv" / "bin" / "vllm").is_file()
        and (home / "models" / "target" / "config.json").is_file()
        and (home / "models" / "draft" / "config.json").is_file()
    )


def run_setup(log: Path) -> tuple[bool, str]:
    """Run setup.sh (a no-op in well under a second when everything is current)."""
    started = time.monotonic()
    with log.open("ab") as out:
        code = subprocess.call(["bash", str(SETUP)], stdout=out, stderr=subprocess.STDOUT)
    tail = log.read_text(errors="replace")[-3000:]
    seconds = time.monotonic() - started
    return code == 0, f"setup.sh exited {code} after {seconds:.0f} s; log tail:\n{tail}"


def available_memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def why_unavailable(servers: int, log: Path) -> str | None:
    """None when `servers` vLLM processes can run here; otherwise the reason why not.

    In CI (SPECTAX_CI=1) a missing or stale install is installed now; elsewhere it is
    only reported, since setup downloads ~2.5 GB.
    """
    if in_ci():
        ok, detail = run_setup(log)
        if not ok:
            return f"tests/live_vllm/setup.sh failed: {detail}"
    elif not installed():
        return (
            f"the vLLM CPU build is not installed in {vllm_home()}: run "
            "`bash tests/live_vllm/setup.sh` once (~2.5 min, ~2.5 GB; SPECTAX_VLLM_HOME "
            "moves it)"
        )
    memory = available_memory_bytes()
    if memory is not None and memory < servers * SERVER_RSS_BYTES + 1_000_000_000:
        return (
            f"{servers} vLLM servers need ~{servers * SERVER_RSS_BYTES / 1e9:.0f} GB of memory; "
            f"{memory / 1e9:.1f} GB available"
        )
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VllmServer:
    """One `vllm serve` process. kind: "ngram", "ngram_schedule" (n-gram with SCHEDULE),
    "draft" or "control" (no speculation)."""

    name: str
    kind: str
    workdir: Path
    port: int = field(default_factory=free_port)
    cpu_bind: str | None = "nobind"  # VLLM_CPU_OMP_THREADS_BIND; None: vLLM's "auto"
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / f"vllm-{self.name}.log"

    def command(self) -> list[str]:
        home = vllm_home()
        cmd = [
            str(home / "venv" / "bin" / "vllm"),
            "serve",
            str(home / "models" / "target"),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--load-format",
            "dummy",
            "--dtype",
            "bfloat16",
            "--max-model-len",
            "1024",
            "--max-num-seqs",
            "8",
            "--enforce-eager",
        ]
        if self.kind == "ngram":
            cmd += ["--speculative-config", json.dumps(NGRAM_CONFIG)]
        elif self.kind == "ngram_schedule":
            spec = NGRAM_CONFIG | {"num_speculative_tokens_per_batch_size": SCHEDULE}
            cmd += ["--speculative-config", json.dumps(spec)]
        elif self.kind == "draft":
            spec = {
                "method": "draft_model",
                "model": str(home / "models" / "draft"),
                "num_speculative_tokens": DRAFT_TOKENS,
            }
            cmd += ["--speculative-config", json.dumps(spec)]
        elif self.kind != "control":
            raise ValueError(f"unknown server kind {self.kind!r}")
        return cmd

    def environment(self) -> dict[str, str]:
        tmp = self.workdir / f"tmp-{self.name}"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
        }
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            TMPDIR=str(tmp),
            VLLM_CACHE_ROOT=str(tmp / "vllm-cache"),
            TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor-cache"),
        )
        # Three servers share 2 cores. vLLM's "auto" binding pins every server's OpenMP
        # threads to the same core, and spinning OpenMP/numba threads (the n-gram proposer
        # runs under numba) then starve each other: one server ran 40x slower than alone.
        # One passive thread each, unbound, keeps the three balanced.
        env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
        if self.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts}: {' '.join(self.command())}\n".encode())
            out.flush()
            # Its own session: vLLM starts an engine-core child; teardown can reach it.
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                cwd=self.workdir,
                start_new_session=True,
            )

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"vllm {self.name} exited with {self.process.returncode} while starting; "
                    f"log tail:\n{self.tail()}"
                )
            if self.healthy():
                return
            time.sleep(0.5)
        raise RuntimeError(f"vllm {self.name} not healthy in time; log tail:\n{self.tail()}")

    def stop(self) -> float:
        """SIGTERM, then wait; SIGKILL its process group only if it will not stop."""
        if self.process is None:
            return 0.0
        started = time.monotonic()
        pid = self.process.pid
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self.process.wait(10)
        # Children (engine core) left behind in the process group of this server, if any.
        for _ in range(20):
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.25)
        else:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        return time.monotonic() - started

    def restart(self) -> tuple[float, float]:
        """Stop and start again on the same port; (stop seconds, seconds to healthy)."""
        stopped = self.stop()
        started = time.monotonic()
        self.start()
        self.wait_ready(started + READY_TIMEOUT)
        return stopped, time.monotonic() - started

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def page(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as r:
            return str(r.read().decode("utf-8"))

    def raw(self) -> Raw:
        return Raw.parse(self.page())


@contextmanager
def running(servers: Sequence[VllmServer]) -> Iterator[float]:
    """Start all servers at once, wait until each is healthy; yields seconds to ready."""
    started = time.monotonic()
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready(started + READY_TIMEOUT)
        yield time.monotonic() - started
    finally:
        for server in servers:
            server.stop()


def fleet(workdir: Path) -> list[VllmServer]:
    """The three servers of the tier: n-gram, draft model, and the no-speculation control."""
    return [
        VllmServer("ngram", "ngram", workdir),
        VllmServer("draft", "draft", workdir),
        VllmServer("control", "control", workdir),
    ]


# ------------------------------------------------------------------ raw numbers from pages

RAW_COUNTERS = {
    "output": "vllm:generation_tokens_total",
    "prompt": "vllm:prompt_tokens_total",
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "tpot_sum": "vllm:request_time_per_output_token_seconds_sum",
    "tpot_count": "vllm:request_time_per_output_token_seconds_count",
    "iter_sum": "vllm:iteration_tokens_total_sum",
    "iter_count": "vllm:iteration_tokens_total_count",
    "itl_sum": "vllm:inter_token_latency_seconds_sum",
    "itl_count": "vllm:inter_token_latency_seconds_count",
    "running": "vllm:num_requests_running",
}


@dataclass(frozen=True)
class Raw:
    """The numbers of one vLLM page for MODEL_NAME, summed over `engine`, by prometheus_client.

    Independent of spectax's own parser. Spec-decode keys are absent on a server
    without speculation.
    """

    values: dict[str, float]
    process_start: float | None

    @classmethod
    def parse(cls, text: str) -> Raw:
        by_sample: dict[str, float] = defaultdict(float)
        start = None
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "process_start_time_seconds":
                    start = s.value
                elif s.labels.get("model_name") == MODEL_NAME:
                    by_sample[s.name] += s.value
        values = {key: by_sample[name] for key, name in RAW_COUNTERS.items() if name in by_sample}
        return cls(values, start)

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    def get(self, key: str) -> float | None:
        return self.values.get(key)

    def __sub__(self, before: Raw) -> dict[str, float]:
        """Counter deltas (gauges dropped); no reset handling: compare within one process."""
        return {k: v - before.values.get(k, 0.0) for k, v in self.values.items() if k != "running"}


def settle(
    servers: Sequence[VllmServer], quiet_seconds: float = 1.0, timeout: float = 60.0
) -> dict[str, Raw]:
    """Wait until no server's counters move for `quiet_seconds` and none runs a request."""
    deadline = time.monotonic() + timeout
    last = {s.name: s.raw() for s in servers}
    while time.monotonic() < deadline:
        time.sleep(quiet_seconds)
        now = {s.name: s.raw() for s in servers}
        if all(now[n].values == last[n].values and not now[n].get("running") for n in now):
            return now
        last = now
    raise RuntimeError(f"vLLM counters still moving after {timeout} s")


def drive_slots(
    servers: Sequence[VllmServer],
    start: float,
    seconds: float,
    concurrency: int,
    requests: Callable[[], itertools.cycle[traffic.Request]],
    tail: float,
) -> dict[str, dict[str, float]]:
    """One window's traffic: each server in turn alone for an equal slot of the `seconds`
    from `start` (wall time), at `concurrency`, sent the same seeded `requests()`; no request
    starts later than `tail` seconds before its slot ends. The raw page deltas of each
    server over its slot, by server name.

    One server at a time, so each one's step times are its own and not the noise of
    engines sharing two cores (seen: with three busy at once, the control's mean step time
    did not grow with tokens per step)."""
    slot = seconds / len(servers)
    deltas = {}
    for i, server in enumerate(servers):
        end = start + (i + 1) * slot
        before = server.raw()
        asyncio.run(
            traffic.drive(
                server.url,
                MODEL_NAME,
                concurrency=concurrency,
                seconds=max(end - tail - time.time(), 0.5),
                max_requests=200,
                requests=requests(),
            )
        )
        time.sleep(max(end - 0.2 - time.time(), 0.0))
        deltas[server.name] = server.raw() - before
    return deltas


def new_workdir(prefix: str = "spectax-live-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
