"""Simulated vLLM servers: pages generated from step-time physics, for demos and tests.

- :mod:`spectax.simulate.vllm`: the engine model and the /metrics page renderer.
- :mod:`spectax.simulate.server`: aiohttp servers on loopback, one per profile.
- ``python -m spectax.simulate``: the three demo endpoints on ports 18001-18003.
"""

from spectax.simulate.server import METRICS_CONTENT_TYPE, SimulatedFleet, start_simulated_servers
from spectax.simulate.vllm import DEMO_PROFILES, SimProfile, SimTotals, SimulatedVllm

__all__ = [
    "DEMO_PROFILES",
    "METRICS_CONTENT_TYPE",
    "SimProfile",
    "SimTotals",
    "SimulatedFleet",
    "SimulatedVllm",
    "start_simulated_servers",
]
