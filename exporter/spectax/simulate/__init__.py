"""Simulated vLLM servers: pages generated from step-time physics, for demos and tests.

- :mod:`spectax.simulate.profiles`: what determines an endpoint, and the demo's three.
- :mod:`spectax.simulate.vllm`: one simulated engine (state, exact and steady-state
  stepping, the /metrics page, in their own modules).
- :mod:`spectax.simulate.server`: aiohttp servers on loopback, one per profile.
- :mod:`spectax.simulate.fleet`: the demo endpoints' configuration (billing, drafts).
- :mod:`spectax.simulate.history`: a month of the demo's history, written fast.
- ``python -m spectax.simulate``: the three demo endpoints on ports 18001-18003.
"""

from spectax.simulate.profiles import DEMO_PROFILES, SimProfile
from spectax.simulate.server import METRICS_CONTENT_TYPE, SimulatedFleet, start_simulated_servers
from spectax.simulate.vllm import SimTotals, SimulatedVllm

__all__ = [
    "DEMO_PROFILES",
    "METRICS_CONTENT_TYPE",
    "SimProfile",
    "SimTotals",
    "SimulatedFleet",
    "SimulatedVllm",
    "start_simulated_servers",
]
