"""On-call: "Speculative decoding: is it paying?" — which endpoints pay and which are a tax.

The alerts' runbook (alerts/runbook.md) points here: every speculation alert has a panel
that shows the series it evaluates, and the panels link back to the runbook's sections.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spectax_grafana import (
    DASHED,
    SEL_ENDPOINT,
    SEL_MODEL,
    bargauge,
    by_name,
    by_regexp,
    row,
    stat,
    table,
    timeseries,
)
from spectax_grafana import dashboard as spectax_dashboard

SPEEDUP = "endpoint_model:spectax_speedup_ratio:measured_or_modeled"

VERDICT_COLUMNS = {
    "Value #A": "Verdict",
    "Value #B": "Acceptance",
    "Value #C": "Break-even",
    "Value #D": "Speedup",
    "Value #E": "$ per M output tokens",
    "Value #F": "Savings $/h",
    "Value #G": "Recommended K",
}

verdict = table(
    "Is it paying? Per endpoint and model",
    "Pays when the speedup is at least 1 (measured against the control endpoint where there"
    " is one, modelled otherwise), i.e. when acceptance is above break-even. Figures are"
    " over spectax's window (default 5 minutes). Savings are negative when speculation is a"
    " tax; on provisioned endpoints they are GPU capacity, not invoice money. A row with no"
    " verdict, acceptance or speedup is an endpoint with no speculation configured (a"
    " control, or plain decoding), or one that drafted nothing in the window.",
    [
        (f"max by (endpoint, model) ({SPEEDUP}{{{SEL_MODEL}}} >= bool 1)", ""),
        (f"max by (endpoint, model) (spectax_acceptance_ratio{{{SEL_MODEL}}})", ""),
        (f"max by (endpoint, model) (spectax_breakeven_acceptance_ratio{{{SEL_MODEL}}})", ""),
        (f"max by (endpoint, model) ({SPEEDUP}{{{SEL_MODEL}}})", ""),
        (
            "max by (endpoint, model) "
            f'(spectax_cost_per_million_output_tokens_usd{{{SEL_MODEL}, scenario="actual"}})',
            "",
        ),
        (f"sum by (endpoint, model) (spectax_speculation_savings_usd_per_hour{{{SEL_MODEL}}})", ""),
        (f"max by (endpoint, model) (spectax_recommended_speculative_tokens{{{SEL_MODEL}}})", ""),
    ],
    transformations=[
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {"endpoint": "Endpoint", "model": "Model", **VERDICT_COLUMNS},
                "indexByName": {
                    name: i for i, name in enumerate(["endpoint", "model", *VERDICT_COLUMNS.keys()])
                },
            },
        },
    ],
    overrides=[
        by_name(
            "Verdict",
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "TAX", "color": "red", "index": 0},
                        "1": {"text": "pays", "color": "green", "index": 1},
                    },
                },
                {
                    "type": "special",
                    "options": {
                        "match": "null+nan",
                        "result": {"text": "no speculation configured", "index": 2},
                    },
                },
            ],
            custom__cellOptions={"type": "color-background"},
        ),
        by_name("Acceptance", unit="percentunit"),
        by_name("Break-even", unit="percentunit"),
        by_name("Speedup", decimals=2),
        by_name("$ per M output tokens", unit="currencyUSD"),
        by_name(
            "Savings $/h",
            unit="currencyUSD",
            thresholds={
                "mode": "absolute",
                "steps": [{"color": "red", "value": None}, {"color": "green", "value": 0}],
            },
            custom__cellOptions={"type": "color-text"},
        ),
        by_name(
            "Recommended K",
            mappings=[{"type": "value", "options": {"0": {"text": "off", "index": 0}}}],
        ),
    ],
    sort_by="Verdict",
    height=9,
)

acceptance = timeseries(
    "Acceptance against break-even and the warning threshold",
    "Acceptance = accepted / proposed draft tokens over 5 minutes (the series"
    " SpecDecodeAcceptanceBelowThreshold evaluates). Break-even (dashed) depends on the"
    " concurrency: below it speculation is a tax, and SpeculationIsATax pages. The warning"
    " threshold (dotted red) is the endpoint's configured acceptance_threshold: under it"
    " SpecDecodeAcceptanceBelowThreshold warns, which may still pay.",
    [
        (
            f"endpoint_model:spectax_acceptance:ratio_rate5m{{{SEL_MODEL}}}",
            "{{endpoint}} {{model}} acceptance",
        ),
        (
            f"max by (endpoint, model) (spectax_breakeven_acceptance_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} break-even",
        ),
        (
            f"max by (endpoint) (spectax_acceptance_threshold_ratio{{{SEL_ENDPOINT}}}"
            " and on (job, instance, endpoint)"
            f' spectax_endpoint_info{{{SEL_ENDPOINT}, method!="none"}})',
            "{{endpoint}} warning threshold",
        ),
    ],
    unit="percentunit",
    min_value=0,
    max_value=1,
    overrides=[
        by_regexp("/break-even/", custom__lineStyle=DASHED),
        by_regexp(
            "/warning threshold/",
            custom__lineStyle={"dash": [2, 6], "fill": "dot"},
            color={"mode": "fixed", "fixedColor": "red"},
        ),
    ],
)

positions = bargauge(
    "Per-position acceptance",
    "Share of drafts whose token at position k (from 0) was accepted. A position is worth"
    " drafting while it stays above break-even; the recommended K is the last such position"
    " + 1.",
    [
        (
            "max by (endpoint, model, position)"
            f" (spectax_position_acceptance_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} position {{position}}",
        )
    ],
    unit="percentunit",
    min_value=0,
    max_value=1,
    color_mode="continuous-RdYlGr",
)

speedup = timeseries(
    "Speedup: modelled and measured (below 1 is a tax)",
    "GPU time without speculation / with it over spectax's window. Measured compares"
    " against a control endpoint serving the same model without speculation; the alerts"
    " prefer it where it exists.",
    [
        (
            f"max by (endpoint, model, method) (spectax_speedup_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} {{method}}",
        )
    ],
    threshold_steps=(("red", None), ("green", 1)),
    threshold_style="line+area",
    overrides=[by_regexp("/measured/", custom__lineWidth=2)],
)

concurrency = timeseries(
    "Concurrency against crossover",
    "Running requests (time-average over the window) against the crossover concurrency"
    " above which today's acceptance no longer pays (dashed).",
    [
        (
            f"max by (endpoint, model) (spectax_concurrency_requests{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} running requests",
        ),
        (
            f"max by (endpoint, model) (spectax_crossover_concurrency_requests{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} crossover",
        ),
    ],
    overrides=[by_regexp("/crossover/", custom__lineStyle=DASHED)],
)

cost = timeseries(
    "Cost per million output tokens: actual against no speculation",
    "Actual: spend / output tokens over the window. No speculation (dashed): what the GPU"
    " time for the same output would have cost without speculation. Actual above the"
    " dashed line means speculation is a tax.",
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

overhead = timeseries(
    "Draft overhead by kind ($/h)",
    "Spend on drafting compute, on rejected draft tokens (their drafting included, so the"
    " kinds overlap: do not add them up) and on the VRAM the draft holds.",
    [
        (
            f"sum by (endpoint, kind) (spectax_draft_overhead_usd_per_hour{{{SEL_MODEL}}})",
            "{{endpoint}} {{kind}}",
        )
    ],
    unit="currencyUSD",
)

savings = timeseries(
    "Net savings per hour (negative = tax)",
    "Value of the GPU time speculation saved, per hour. On provisioned endpoints this is"
    " capacity, which becomes money only if replicas are scaled to match.",
    [
        (
            f"sum by (endpoint, model) (spectax_speculation_savings_usd_per_hour{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}}",
        )
    ],
    unit="currencyUSD",
    threshold_steps=(("red", None), ("green", 0)),
    threshold_style="line+area",
)

recommended_k = stat(
    "Recommended draft length (K)",
    "The largest K whose every position clears break-even; 0 (off) means turn speculation"
    " off on this endpoint at today's load.",
    [
        (
            f"max by (endpoint, model) (spectax_recommended_speculative_tokens{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}}",
        )
    ],
    threshold_steps=(("red", None), ("green", 1)),
    mappings=[{"type": "value", "options": {"0": {"text": "off", "index": 0}}}],
    decimals=0,
    width=12,
    height=8,
)

dashboard = spectax_dashboard(
    title="Speculative decoding: is it paying?",
    uid="spectax-paying",
    description="On-call view: per endpoint, whether speculative decoding pays or is a tax,"
    " and why (acceptance, concurrency, cost).",
    cells=[
        row("Verdict"),
        verdict,
        row("Acceptance"),
        acceptance,
        positions,
        row("Speedup and load"),
        speedup,
        concurrency,
        row("Money"),
        cost,
        savings,
        overhead,
        recommended_k,
    ],
    runbook={
        verdict.panel.title: "SpeculationIsATax",
        acceptance.panel.title: "SpecDecodeAcceptanceBelowThreshold",
        positions.panel.title: "SpecDecodeAcceptanceBelowThreshold",
        speedup.panel.title: "SpeculationIsATax",
        concurrency.panel.title: "SpeculationConcurrencyAboveCrossover",
        cost.panel.title: "SpeculationIsATax",
        savings.panel.title: "SpeculationIsATax",
        overhead.panel.title: "SpeculationIsATax",
        recommended_k.panel.title: "SpeculationIsATax",
    },
)
