"""spectax health: is spectax itself seeing its endpoints, billing sources and store?"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spectax_grafana import (
    SEL_ENDPOINT,
    SEL_JOB,
    row,
    stat,
    table,
    timeseries,
)
from spectax_grafana import dashboard as spectax_dashboard

UP_DOWN = [
    {
        "type": "value",
        "options": {
            "0": {"text": "down", "color": "red", "index": 0},
            "1": {"text": "up", "color": "green", "index": 1},
        },
    }
]
RED_GREEN = (("red", None), ("green", 1))

instances_up = stat(
    "spectax instances",
    "Prometheus' scrape of each spectax instance (SpectaxAbsent fires when one is down).",
    [(f"max by (instance) (up{{{SEL_JOB}}})", "{{instance}}")],
    threshold_steps=RED_GREEN,
    mappings=UP_DOWN,
    width=6,
)

endpoints_up = stat(
    "Endpoints up",
    "Whether spectax's last scrape of each inference endpoint succeeded"
    " (SpectaxEndpointDown fires after 5 minutes down).",
    [(f"max by (endpoint) (spectax_endpoint_up{{{SEL_ENDPOINT}}})", "{{endpoint}}")],
    threshold_steps=RED_GREEN,
    mappings=UP_DOWN,
    width=12,
)

engine_metrics = stat(
    "Engine metrics present",
    "0 when an endpoint's page carries no engine metrics (e.g. vLLM runs with"
    " --disable-log-stats): spectax then has nothing to assess.",
    [(f"max by (endpoint) (spectax_engine_metrics_present{{{SEL_ENDPOINT}}})", "{{endpoint}}")],
    threshold_steps=RED_GREEN,
    mappings=[
        {
            "type": "value",
            "options": {
                "0": {"text": "missing", "color": "red", "index": 0},
                "1": {"text": "present", "color": "green", "index": 1},
            },
        }
    ],
    width=6,
)

scrape_duration = timeseries(
    "Scrape duration",
    "Duration of spectax's last scrape of each endpoint.",
    [(f"max by (endpoint) (spectax_scrape_duration_seconds{{{SEL_ENDPOINT}}})", "{{endpoint}}")],
    unit="s",
    width=8,
)

scrape_age = timeseries(
    "Time since the last successful scrape",
    "Grows while an endpoint cannot be scraped.",
    [
        (
            "time() - max by (endpoint)"
            f" (spectax_last_scrape_success_timestamp_seconds{{{SEL_ENDPOINT}}})",
            "{{endpoint}}",
        )
    ],
    unit="s",
    width=8,
)

scrape_failures = timeseries(
    "Scrape failures by reason (per minute)",
    "timeout, connection, http_status, too_large (over max_body_bytes), parse, decode.",
    [
        (
            f"sum by (endpoint, reason) (rate(spectax_scrape_failures_total{{{SEL_ENDPOINT}}}"
            "[$__rate_interval])) * 60",
            "{{endpoint}} {{reason}}",
        )
    ],
    width=8,
)

ridge = timeseries(
    "Ridge batch B* in force",
    "B* = a/b of the plain-decode step-time model behind break-even and crossover. The"
    " source label says where it comes from: control (a control endpoint's step times),"
    " baseline (this endpoint's history before speculation), profile (a stored profile),"
    " sweep (a benchmark sweep), roofline (vLLM's FLOP and byte estimates against the GPU's"
    " peaks: a prior) or configured (the endpoint's ridge_batch, or the default).",
    [
        (
            f"max by (endpoint, source) (spectax_ridge_batch_requests{{{SEL_ENDPOINT}}})",
            "{{endpoint}} {{source}}",
        )
    ],
    width=24,
    height=6,
)

billing_up = stat(
    "Billing sources up",
    "Whether spectax's last read of each billing source succeeded.",
    [(f"max by (source) (spectax_billing_up{{{SEL_JOB}}})", "{{source}}")],
    threshold_steps=RED_GREEN,
    mappings=UP_DOWN,
    width=8,
    height=8,
)

billing_age = timeseries(
    "Time since the last successful billing read",
    "BillingDataStale opens a ticket when this passes 6 hours (for 30 minutes).",
    [
        (
            "time() - max by (source)"
            f" (spectax_billing_last_success_timestamp_seconds{{{SEL_JOB}}})",
            "{{source}}",
        )
    ],
    unit="s",
    threshold_steps=(("green", None), ("red", 6 * 3600)),
    threshold_style="dashed",
    width=16,
)

store_leader = stat(
    "Store writer",
    "Which spectax instance writes windows, rollups and billing lines: the leader of an HA"
    " pair on PostgreSQL; a lone instance always leads (SpectaxNoLeader fires when none"
    " does for 5 minutes).",
    [(f"max by (instance) (spectax_leader{{{SEL_JOB}}})", "{{instance}}")],
    threshold_steps=(("blue", None), ("green", 1)),
    mappings=[
        {
            "type": "value",
            "options": {
                "0": {"text": "follows", "color": "blue", "index": 0},
                "1": {"text": "leads", "color": "green", "index": 1},
            },
        }
    ],
    width=8,
)

store_pending = timeseries(
    "Windows waiting for the store",
    "Closed windows held in memory while the database is unreachable; written in order"
    " when it is back.",
    [(f"max by (instance) (spectax_store_pending_windows{{{SEL_JOB}}})", "{{instance}}")],
    threshold_steps=(("green", None), ("orange", 1)),
    threshold_style="line",
    width=8,
)

store_errors = timeseries(
    "Store write errors",
    "Failed attempts to write to the store.",
    [
        (
            "sum by (instance) (increase(spectax_store_write_errors_total"
            f"{{{SEL_JOB}}}[$__rate_interval]))",
            "{{instance}}",
        )
    ],
    draw="bars",
    width=8,
)

build = table(
    "spectax build",
    "Version and Python of each spectax instance.",
    [(f"spectax_build_info{{{SEL_JOB}}}", "")],
    transformations=[
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "Value": True, "__name__": True},
                "renameByName": {},
                "indexByName": {},
            },
        }
    ],
    width=8,
)

dashboard = spectax_dashboard(
    title="spectax health",
    uid="spectax-health",
    description="Is spectax scraping its endpoints, reading its billing sources and writing"
    " its store?",
    cells=[
        row("Scraping"),
        instances_up,
        endpoints_up,
        engine_metrics,
        scrape_duration,
        scrape_age,
        scrape_failures,
        ridge,
        row("Billing sources"),
        billing_up,
        billing_age,
        row("Store"),
        store_leader,
        store_pending,
        store_errors,
        build,
    ],
    runbook={
        instances_up.panel.title: "SpectaxAbsent",
        endpoints_up.panel.title: "SpectaxEndpointDown",
        engine_metrics.panel.title: "SpectaxEndpointDown",
        scrape_age.panel.title: "SpectaxEndpointDown",
        scrape_failures.panel.title: "SpectaxEndpointDown",
        ridge.panel.title: "SpeculationIsATax",
        billing_up.panel.title: "BillingDataStale",
        billing_age.panel.title: "BillingDataStale",
        store_leader.panel.title: "SpectaxNoLeader",
    },
)
