"""The latency row of "is it paying?": quantiles with the SLO, speculation's effect on them.

Its own module so that the paying dashboard gains a row with a few lines (the capacity row
sits beside it). The quantiles are spectax's (spectax_latency_seconds: histogram_quantile
over the window's bucket deltas), the SLO is the operator's (config latency_slo).
"""

from spectax_grafana import DASHED, SEL_ENDPOINT, SEL_MODEL, by_regexp, row, timeseries

ALERT = "SpeculationHurtsTailLatency"

quantiles = timeseries(
    "Latency quantiles: p50, p95, p99 time per output token, with the SLO",
    "p50/p95/p99 of each request's time per output token (TPOT) over spectax's window,"
    " from vLLM's histogram buckets exactly as Prometheus' histogram_quantile computes them"
    " (linear inside a bucket; a rank in the +Inf bucket shows the largest finite bound)."
    " Dashed: the endpoint's objective (config latency_slo), where one is set. Select an"
    " endpoint and its control to compare them here.",
    [
        (
            "max by (endpoint, model, percentile)"
            f' (spectax_latency_seconds{{{SEL_MODEL}, metric="tpot"}})',
            "{{endpoint}} {{model}} {{percentile}}",
        ),
        (
            "max by (endpoint, metric, percentile)"
            f" (spectax_latency_slo_seconds{{{SEL_ENDPOINT}}})",
            "{{endpoint}} SLO {{metric}} {{percentile}}",
        ),
    ],
    unit="s",
    min_value=0,
    overrides=[by_regexp("/ SLO /", custom__lineStyle=DASHED)],
)

ratio = timeseries(
    "Latency with against without speculation (above 1: speculation makes it slower)",
    "Each quantile with speculation / the same quantile without it. basis measured: against"
    " the control endpoint over the same window, for TPOT, inter-token latency, TTFT and"
    " end-to-end latency. basis modeled (no control): TPOT only, 1 / the step model's mean"
    " speedup for every percentile, a tail modelled from means, not measured."
    " SpeculationHurtsTailLatency fires when a ratio is above 1.05 while the quantile is"
    " beyond the endpoint's SLO.",
    [
        (
            "max by (endpoint, model, metric, percentile, basis)"
            f" (spectax_latency_speculation_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} {{metric}} {{percentile}} ({{basis}})",
        )
    ],
    threshold_steps=(("green", None), ("red", 1.05)),
    threshold_style="line",
    overrides=[by_regexp("/modeled/", custom__lineStyle=DASHED)],
)

CELLS = [row("Latency"), quantiles, ratio]
RUNBOOK = {quantiles.panel.title: ALERT, ratio.panel.title: ALERT}
