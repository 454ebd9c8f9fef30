"""``python -m spectax.simulate``: serve the demo's mixed fleet on 18001-18007."""

from __future__ import annotations

import asyncio
import contextlib

from spectax.engines import ENGINES
from spectax.simulate.server import start_simulated_servers
from spectax.simulate.sim_profiles import DEMO_PROFILES

BASE_PORT = 18001


async def _main() -> None:
    async with await start_simulated_servers(DEMO_PROFILES, port=BASE_PORT) as fleet:
        for name, url in fleet.urls.items():
            p = fleet.sims[name].profile
            print(
                f"{name:15s} {url}{ENGINES[p.serving_engine].metrics_path}  "
                f"({p.serving_engine}, {p.model_name}, K={p.num_speculative_tokens})",
                flush=True,
            )
        print("Ctrl-C to stop.", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main())


if __name__ == "__main__":
    main()
