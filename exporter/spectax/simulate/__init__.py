"""Simulated inference servers: pages generated from step-time physics, for demos and tests.

- :mod:`spectax.simulate.sim_profiles`: what determines an endpoint, and the demo's mixed fleet.
- :mod:`spectax.simulate.vllm_engine`: one simulated engine (state, exact and steady-state
  stepping in their own modules); its page is its `serving_engine`'s
  (:mod:`spectax.simulate.pages`: vLLM, SGLang, TensorRT-LLM, TGI, llama.cpp).
- :mod:`spectax.simulate.server`: aiohttp servers on loopback, one per profile.
- :mod:`spectax.simulate.demo_fleet`: the demo endpoints' configuration (billing, drafts).
- :mod:`spectax.simulate.demo_history`: a month of the demo's history, written fast.
- ``python -m spectax.simulate``: the demo endpoints on ports 18001-18007.
"""

from spectax.simulate.server import METRICS_CONTENT_TYPE, SimulatedFleet, start_simulated_servers
from spectax.simulate.sim_profiles import DEMO_PROFILES, SimProfile
from spectax.simulate.vllm_engine import SimTotals, SimulatedVllm

__all__ = [
    "DEMO_PROFILES",
    "METRICS_CONTENT_TYPE",
    "SimProfile",
    "SimTotals",
    "SimulatedFleet",
    "SimulatedVllm",
    "start_simulated_servers",
]
