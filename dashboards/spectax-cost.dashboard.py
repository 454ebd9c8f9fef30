"""Cost review: "Inference cost review" — spend, cost per token, savings or tax, billing.

For the monthly budget meeting (default range: 30 days). The money on provisioned
(always-on) endpoints is GPU capacity, not invoice money, unless replicas are scaled.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grafanalib import core
from spectax_grafana import (
    DASHED,
    SEL_ENDPOINT,
    SEL_JOB,
    SEL_MODEL,
    bargauge,
    by_regexp,
    row,
    timeseries,
)
from spectax_grafana import dashboard as spectax_dashboard

SPEND = f'spectax_spend_usd_total{{{SEL_ENDPOINT}, basis="estimated"}}'
COST_1H = "endpoint:spectax_cost_per_million_output_tokens_usd:ratio_rate1h"
COST_7D = "endpoint:spectax_cost_per_million_output_tokens_usd:ratio_rate7d"

spend_rate = timeseries(
    "Spend by endpoint ($/h)",
    "Accrued spend per hour, stacked. basis=estimated is the price-table estimate (GPU"
    " price × GPUs × time; serverless endpoints only while busy).",
    [
        (
            f"sum by (endpoint, basis) (rate(spectax_spend_usd_total{{{SEL_ENDPOINT}}}"
            "[$__rate_interval])) * 3600",
            "{{endpoint}} ({{basis}})",
        )
    ],
    unit="currencyUSD",
    stacked=True,
    width=16,
)

spend_total = bargauge(
    "Spend over the range",
    "Estimated spend per endpoint over the dashboard's time range.",
    [(f"sum by (endpoint) (increase({SPEND}[$__range]))", "{{endpoint}}")],
    unit="currencyUSD",
    min_value=0,
    color_mode="continuous-BlPu",
    width=8,
)

spend_cumulative = timeseries(
    "Cumulative spend over the range",
    "Spend since the start of the time range (the spend counter survives spectax restarts).",
    [(f"sum by (endpoint) ({SPEND}) - sum by (endpoint) ({SPEND} @ start())", "{{endpoint}}")],
    unit="currencyUSD",
    width=24,
)

cost_per_million = timeseries(
    "Cost per million output tokens, against its 7-day baseline",
    "Estimated spend / output tokens over the last hour (solid) and over the last 7 days"
    " (dashed): the two series CostPerMillionTokensRegression compares (it opens a ticket"
    " when the hour is 20% above the baseline for an hour).",
    [
        (f"{COST_1H}{{{SEL_ENDPOINT}}}", "{{endpoint}} last hour"),
        (f"{COST_7D}{{{SEL_ENDPOINT}}}", "{{endpoint}} 7-day baseline"),
    ],
    unit="currencyUSD",
    overrides=[by_regexp("/baseline/", custom__lineStyle=DASHED)],
)

cost_by_scenario = timeseries(
    "Cost per million output tokens: actual against no speculation",
    "Per model over spectax's window. No speculation (dashed) prices the GPU time the same"
    " output would have taken without it.",
    [
        (
            "max by (endpoint, model, scenario)"
            f" (spectax_cost_per_million_output_tokens_usd{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} {{scenario}}",
        )
    ],
    unit="currencyUSD",
    overrides=[by_regexp("/no_speculation/", custom__lineStyle=DASHED)],
)

# Savings: spectax exports a rate ($/h over its window), so totals are the time-average
# of that rate, counting scrapes without a figure (idle) as 0, times the duration.
SAVINGS = f"spectax_speculation_savings_usd_per_hour{{{SEL_MODEL}}}"
SCRAPES_IN_RANGE = f"scalar(max(count_over_time(spectax_build_info{{{SEL_JOB}}}[$__range])))"

savings_total = bargauge(
    "Savings (or tax) over the range",
    "Net value of the GPU time speculation saved over the time range; negative = tax."
    " On provisioned endpoints it is capacity, money only if replicas are scaled to match.",
    [
        (
            "sum by (endpoint) (max by (endpoint, model) "
            f"(sum_over_time({SAVINGS}[$__range]))) / {SCRAPES_IN_RANGE} * $__range_s / 3600",
            "{{endpoint}}",
        )
    ],
    unit="currencyUSD",
    threshold_steps=(("red", None), ("green", 0)),
    width=8,
)

savings_daily = timeseries(
    "Savings (or tax) per day, rolling",
    "Savings over the preceding 24 hours at each point; negative = tax.",
    [
        (
            f"sum by (endpoint) (max by (endpoint, model) (avg_over_time({SAVINGS}[1d]))) * 24",
            "{{endpoint}}",
        )
    ],
    unit="currencyUSD",
    threshold_steps=(("red", None), ("green", 0)),
    threshold_style="line+area",
    width=16,
)

drift = timeseries(
    "Estimate against billed (drift)",
    "(estimated − billed) / billed over each billing source's last final period. The"
    " dotted lines are BillingEstimateDrift's ±10% ticket threshold.",
    [(f"max by (source) (spectax_billing_drift_ratio{{{SEL_JOB}}})", "{{source}}")],
    unit="percentunit",
    threshold_steps=(("red", None), ("green", -0.1), ("red", 0.1)),
    threshold_style="dashed",
)

spend_by_basis = timeseries(
    "Daily spend by basis",
    "Spend over the preceding 24 hours: the price-table estimate, and the billed amount"
    " once a billing source has a final bill.",
    [
        (
            f"sum by (basis) (increase(spectax_spend_usd_total{{{SEL_ENDPOINT}}}[1d]))",
            "{{basis}}",
        )
    ],
    unit="currencyUSD",
)

cold_starts = timeseries(
    "Cold starts",
    "Engine restarts spectax saw (a new process start time or counters going down).",
    [
        (
            f"sum by (endpoint) (increase(spectax_cold_starts_total{{{SEL_ENDPOINT}}}"
            "[$__rate_interval]))",
            "{{endpoint}}",
        )
    ],
    draw="bars",
    width=8,
)

cold_start_duration = timeseries(
    "Cold-start duration",
    "The last cold start's duration: first successful scrape with engine metrics minus the"
    " process start time (or the configured cold_start_seconds when it cannot be measured).",
    [
        (
            f"max by (endpoint) (spectax_cold_start_duration_seconds{{{SEL_ENDPOINT}}})",
            "{{endpoint}}",
        )
    ],
    unit="s",
    draw="points",
    width=8,
)

cold_start_cost = timeseries(
    "Cold-start cost ($/h) and share of spend",
    "What cold starts cost (serverless endpoints: duration × GPUs × price, included in"
    " spend), and their share of the endpoint's spend over the last hour (right axis):"
    " ColdStartsDominateCost opens a ticket above 50% for an hour.",
    [
        (
            f"sum by (endpoint) (rate(spectax_cold_start_cost_usd_total{{{SEL_ENDPOINT}}}"
            "[$__rate_interval])) * 3600",
            "{{endpoint}} cold-start cost",
        ),
        (
            f"endpoint:spectax_cold_start_spend_share:ratio_rate1h{{{SEL_ENDPOINT}}}",
            "{{endpoint}} share of spend",
        ),
    ],
    unit="currencyUSD",
    overrides=[
        by_regexp(
            "/share of spend/",
            unit="percentunit",
            custom__axisPlacement="right",
            custom__lineStyle=DASHED,
        )
    ],
    width=8,
)

dashboard = spectax_dashboard(
    title="Inference cost review",
    uid="spectax-cost",
    description="Spend, cost per million output tokens, savings or tax from speculative"
    " decoding, estimate against bill, cold starts.",
    cells=[
        row("Spend"),
        spend_rate,
        spend_total,
        spend_cumulative,
        row("Cost per million output tokens"),
        cost_per_million,
        cost_by_scenario,
        row("Speculation: savings or tax"),
        savings_total,
        savings_daily,
        row("Billing"),
        drift,
        spend_by_basis,
        row("Cold starts"),
        cold_starts,
        cold_start_duration,
        cold_start_cost,
    ],
    runbook={
        spend_rate.panel.title: "CostPerMillionTokensRegression",
        cost_per_million.panel.title: "CostPerMillionTokensRegression",
        cost_by_scenario.panel.title: "SpeculationIsATax",
        savings_total.panel.title: "SpeculationIsATax",
        savings_daily.panel.title: "SpeculationIsATax",
        drift.panel.title: "BillingEstimateDrift",
        spend_by_basis.panel.title: "BillingEstimateDrift",
        cold_starts.panel.title: "ColdStartsDominateCost",
        cold_start_duration.panel.title: "ColdStartsDominateCost",
        cold_start_cost.panel.title: "ColdStartsDominateCost",
    },
    time=core.Time("now-30d", "now"),
)
