"""`spectax backfill` against a real Prometheus (the Debian package): a --to past "now"
reads the windows up to the sources' delay ago only, and its progress counts those (it
counted every window up to --to: 30/719)."""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from pathlib import Path

import pytest
import yaml

from promstack import history_start, prometheus_holding
from spectax.cli.backfill import backfill_main

W = 60.0


@pytest.mark.e2e
async def test_progress_counts_only_the_windows_up_to_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t0 = history_start()
    history = f'vllm:generation_tokens_total{{model_name="m"}} 5 {t0}\n# EOF\n'
    async with prometheus_holding(tmp_path, history) as server:
        config = tmp_path / "spectax.yml"
        source = {"url": server.url, "endpoint_labels": ["model_name"], "delay": "1s"}
        config.write_text(
            yaml.safe_dump(
                {
                    "window": f"{W:g}s",
                    "state_directory": str(tmp_path / "state"),
                    "sources": [source],
                }
            )
        )
        start = (time.time() // W - 5) * W
        args = argparse.Namespace(config=config, start=start, end=start + 12 * 3600)
        done = await asyncio.to_thread(backfill_main, args)  # it runs its own event loop
    assert done == 0
    err = capsys.readouterr().err
    counts = [(int(a), int(b)) for a, b in re.findall(r"backfill: (\d+)/(\d+) windows", err)]
    assert counts, err
    finished, total = counts[-1]
    assert finished == total and 4 <= total <= 6, err  # not 725 windows to --to
