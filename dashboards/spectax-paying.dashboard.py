"""On-call: "Speculative decoding: is it paying?" — which endpoints pay and which are a tax.

The alerts' runbook (alerts/runbook.md) points here: every speculation alert has a panel
that shows the series it evaluates, and the panels link back to the runbook's sections.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import latency_panels
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
DOTTED = {"dash": [2, 6], "fill": "dot"}


def coded(metric: str, label: str, codes: dict[str, int]) -> str:
    """An info gauge's label as a number a table cell maps back to text: instant tables
    merge on shared labels only, so a verdict or basis cannot be a label column there."""
    parts = [
        f'({metric}{{{SEL_MODEL}, {label}="{value}"}} * {code})' for value, code in codes.items()
    ]
    return f"max by (endpoint, model) ({' or '.join(parts)})"


# Verdicts rank worst first (a table sorted by Verdict shows the taxes on top); bases
# rank most trusted last. The text and colour of each code are the Verdict and Basis
# columns' value mappings below.
VERDICTS = {"tax": 0, "uncertain": 1, "pays": 2}
BASES = {"default": 0, "profile": 1, "calibrated": 2, "measured": 3}


NO_VERDICT = "no verdict: no speculation configured, or no traffic"
# spectax_endpoint_info's engine label, coded for the table like the verdict (every engine
# spectax registers has one: tests/test_dashboards.py checks).
ENGINE_CODES = {"vllm": 0, "sglang": 1, "trtllm": 2, "tgi": 3, "llamacpp": 4}
# The acceptance cell of an engine that counts no drafted tokens (SGLang, TGI): it
# speculates (it has an acceptance length) but has no acceptance ratio to show.
NOT_EXPOSED = -1
# The break-even cell where no acceptance would pay (spectax_no_acceptance_pays): the
# break-even would be above 1, which spectax never exports and no panel plots.
NO_ACCEPTANCE_PAYS = -1


def breakeven_acceptance() -> str:
    """alpha* per endpoint and model, never above 1 (spectax exports none; the filter keeps
    it so for any exporter of the metric)."""
    return f"max by (endpoint, model) (spectax_breakeven_acceptance_ratio{{{SEL_MODEL}}} <= 1)"


def engine_by_model() -> str:
    """The endpoint's engine (coded) on each of its models' rows."""
    engines = " or ".join(
        f'(spectax_endpoint_info{{{SEL_ENDPOINT}, engine="{name}"}} * {code})'
        for name, code in ENGINE_CODES.items()
    )
    return (
        "max by (endpoint, model) (group by (job, instance, endpoint, model)"
        f" (spectax_output_tokens_total{{{SEL_MODEL}}})"
        " * on (job, instance, endpoint) group_left ()"
        f" max by (job, instance, endpoint) ({engines}))"
    )


def mapping(texts: dict[str, tuple[str, str | None]]) -> list[dict[str, object]]:
    options: dict[str, dict[str, object]] = {}
    for i, (code, (text, color)) in enumerate(texts.items()):
        options[code] = {"text": text, "index": i, **({"color": color} if color else {})}
    return [{"type": "value", "options": options}]


VERDICT_COLUMNS = {
    "Value #K": "Engine",
    "Value #A": "Verdict",
    "Value #B": "Basis",
    "Value #C": "Acceptance",
    "Value #L": "Acceptance length",
    "Value #D": "Break-even",
    "Value #E": "Speedup",
    "Value #F": "Band low",
    "Value #G": "Band high",
    "Value #H": "$ per M output tokens",
    "Value #I": "Savings $/h",
    "Value #J": "Recommended K",
}

verdict = table(
    "Is it paying? Per endpoint and model, with the verdict's basis and band",
    "The verdict (spectax_verdict_info): pays when the speedup's whole band is above 1, TAX"
    " when it is all below, uncertain when it straddles 1; measured against a control"
    " endpoint, the band is the measured speedup. Basis: measured (a control), calibrated"
    " (the speed without speculation fitted from a control or the endpoint's own history),"
    " profile (a stored profile or benchmark sweep) or default (configured B* and an"
    " assumed step overhead: usually uncertain; see docs/verdicts.md, 'Three ways to a"
    " trustworthy verdict'). Only a tax on a basis other than default pages. Figures are"
    " over spectax's window (default 5 minutes); a window that proposed no drafts is"
    " priced like any other. Savings are negative when speculation is a tax; on"
    " provisioned endpoints they are GPU capacity, not invoice money. A row with no"
    " verdict is an endpoint with no speculation configured (a control, or plain"
    " decoding), or one with no traffic in the window. Engine: spectax_endpoint_info's. SGLang"
    " and TGI count no drafted tokens: their acceptance is not exposed, their acceptance"
    " length (tokens per verify step) is derived, and without a control there is nothing to"
    " price, so their verdict is uncertain on basis default.",
    [
        (coded("spectax_verdict_info", "verdict", VERDICTS), ""),
        (coded("spectax_verdict_info", "basis", BASES), ""),
        (
            f"max by (endpoint, model) (spectax_acceptance_ratio{{{SEL_MODEL}}})"
            f" or (max by (endpoint, model) (spectax_acceptance_length_tokens{{{SEL_MODEL}}})"
            f" * 0 + {NOT_EXPOSED})",
            "",
        ),
        (
            f"{breakeven_acceptance()} or (max by (endpoint, model)"
            f" (spectax_no_acceptance_pays{{{SEL_MODEL}}} == 1) * 0 + {NO_ACCEPTANCE_PAYS})",
            "",
        ),
        (f"max by (endpoint, model) ({SPEEDUP}{{{SEL_MODEL}}})", ""),
        (f'min by (endpoint, model) (spectax_speedup_band_ratio{{{SEL_MODEL}, bound="low"}})', ""),
        (f'max by (endpoint, model) (spectax_speedup_band_ratio{{{SEL_MODEL}, bound="high"}})', ""),
        (
            "max by (endpoint, model) "
            f'(spectax_cost_per_million_output_tokens_usd{{{SEL_MODEL}, scenario="actual"}})',
            "",
        ),
        (f"sum by (endpoint, model) (spectax_speculation_savings_usd_per_hour{{{SEL_MODEL}}})", ""),
        (f"max by (endpoint, model) (spectax_recommended_speculative_tokens{{{SEL_MODEL}}})", ""),
        (engine_by_model(), ""),
        (f"max by (endpoint, model) (spectax_acceptance_length_tokens{{{SEL_MODEL}}})", ""),
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
                *mapping(
                    {
                        "0": ("TAX", "red"),
                        "1": ("uncertain", "purple"),
                        "2": ("pays", "green"),
                    }
                ),
                {
                    "type": "special",
                    "options": {
                        "match": "null+nan",
                        "result": {"text": NO_VERDICT, "index": 3},
                    },
                },
            ],
            custom__cellOptions={"type": "color-background"},
        ),
        by_name(
            "Basis",
            mappings=mapping(
                {
                    "0": ("default (a guess)", "orange"),
                    "1": ("profile", None),
                    "2": ("calibrated", None),
                    "3": ("measured", None),
                }
            ),
            custom__cellOptions={"type": "color-text"},
        ),
        by_name("Band low", decimals=2),
        by_name("Band high", decimals=2),
        by_name(
            "Engine",
            mappings=mapping({str(code): (name, None) for name, code in ENGINE_CODES.items()}),
        ),
        by_name(
            "Acceptance",
            unit="percentunit",
            mappings=mapping({str(NOT_EXPOSED): ("not exposed by the engine", None)}),
        ),
        by_name("Acceptance length", decimals=2),
        by_name(
            "Break-even",
            unit="percentunit",
            mappings=mapping({str(NO_ACCEPTANCE_PAYS): ("no acceptance pays here", None)}),
        ),
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
    " concurrency: below it speculation is a tax, and SpeculationIsATax pages; where no"
    " acceptance would pay (the table says so) there is no break-even line. The warning"
    " threshold (dotted red) is the endpoint's configured acceptance_threshold: under it"
    " SpecDecodeAcceptanceBelowThreshold warns, which may still pay. SGLang and TGI count no"
    " drafted tokens, so they have no line here: see their acceptance length in the table.",
    [
        (
            f"endpoint_model:spectax_acceptance:ratio_rate5m{{{SEL_MODEL}}}",
            "{{endpoint}} {{model}} acceptance",
        ),
        (breakeven_acceptance(), "{{endpoint}} {{model}} break-even"),
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
            custom__lineStyle=DOTTED,
            color={"mode": "fixed", "fixedColor": "red"},
        ),
    ],
)

positions = bargauge(
    "Per-position acceptance",
    "Share of drafts whose token at position k (from 0) was accepted. A position is worth"
    " drafting while it stays above break-even; the recommended K is the observed length"
    " with the highest predicted speedup (never a length the engine did not draft).",
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
    "Speedup: modelled and measured, with the band (below 1 is a tax)",
    "GPU time without speculation / with it over spectax's window. Measured compares"
    " against a control endpoint serving the same model without speculation; the alerts"
    " prefer it where it exists. The band (dotted, low and high) is the range the verdict"
    " weighs: the calibration's own spread, or with nothing calibrated the whole plausible"
    " range of B* and the step overhead h; one value when measured. A band across 1 is an"
    " uncertain verdict.",
    [
        (
            f"max by (endpoint, model, method) (spectax_speedup_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} {{method}}",
        ),
        (
            f"max by (endpoint, model, bound) (spectax_speedup_band_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} band {{bound}}",
        ),
    ],
    threshold_steps=(("red", None), ("green", 1)),
    threshold_style="line+area",
    overrides=[
        by_regexp("/measured/", custom__lineWidth=2),
        by_regexp("/band (low|high)$/", custom__lineStyle=DOTTED, custom__lineWidth=1),
    ],
)

LOAD_COLUMNS = {
    "Value #A": "Time share",
    "Value #B": "Speedup",
    "Value #C": "Acceptance",
    "Value #D": "Net (lookback)",
    "Value #E": "Tokens/s per request",
    "Value #F": "Stalled",
}


def by_load(metric: str) -> str:
    return f"max by (endpoint, model, running_requests) ({metric}{{{SEL_MODEL}}})"


load_curve = table(
    "Load curve: speedup against running requests, with the traffic's time share",
    "spectax's load curve over its lookback (load_curve.lookback, a day of stored windows"
    " by default): a row per bin of mean running requests (from the edge shown to the next"
    " power of two). Time share: how much of the lookback the endpoint spent there. Speedup"
    " below 1 is a tax at that load; the crossover panel says from which load it stopped"
    " paying. Stalled: the output rate per request collapsed under both neighbouring loads'"
    " (alert SpeculationScheduleStalls), the mark of a K schedule's boundary. Draft tokens"
    " per step: the draft length that ran there, in the mean (0: nothing drafted). K advised:"
    " the curve's K schedule, the best draft length at that load (0: turn it off there);"
    " spectax report and spectax assess write it as vLLM's num_speculative_tokens_per_batch_size.",
    [
        (by_load("spectax_load_time_share_ratio"), ""),
        (by_load("spectax_load_speedup_ratio"), ""),
        (by_load("spectax_load_acceptance_ratio"), ""),
        (by_load("spectax_load_speculation_savings_usd"), ""),
        (by_load("spectax_load_output_tokens_per_request_second"), ""),
        (by_load("spectax_load_draft_tokens_per_step"), ""),
        (by_load("spectax_load_recommended_speculative_tokens"), ""),
        (by_load("spectax_load_stalled"), ""),
    ],
    transformations=[
        {"id": "merge", "options": {}},
        {
            "id": "convertFieldType",
            "options": {
                "conversions": [{"targetField": "running_requests", "destinationType": "number"}]
            },
        },
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {
                    "endpoint": "Endpoint",
                    "model": "Model",
                    "running_requests": "Running requests from",
                    **LOAD_COLUMNS,
                },
                "indexByName": {
                    name: i
                    for i, name in enumerate(
                        ["endpoint", "model", "running_requests", *LOAD_COLUMNS.keys()]
                    )
                },
            },
        },
    ],
    overrides=[
        by_name("Time share", unit="percentunit"),
        by_name("Speedup", decimals=2),
        by_name("Acceptance", unit="percentunit"),
        by_name("Net (lookback)", unit="currencyUSD"),
        by_name("Tokens/s per request", decimals=1),
        by_name("Stalled", mappings=mapping({"0": ("no", None), "1": ("STALLED", "red")})),
    ],
    sort_by="Running requests from",
    width=18,
    height=8,
)

load_crossover = stat(
    "Load curve crossover (running requests)",
    "From this many mean running requests up, speculation was a tax over the load curve's"
    " lookback, above a load at which it paid; no data: it turned at no load seen (spectax"
    " exports +Inf then).",
    [
        (
            "max by (endpoint, model)"
            f" (spectax_load_crossover_running_requests{{{SEL_MODEL}}} < +Inf)",
            "{{endpoint}} {{model}}",
        )
    ],
    decimals=0,
    width=6,
    height=8,
)

model_source = table(
    "Counterfactual source: where the speed without speculation comes from",
    "spectax_model_info: control (a control endpoint's step times, fitted), baseline (this"
    " endpoint's own windows before speculation), profile (a profile learned from an A/B"
    " elsewhere, named in `profile:`), sweep (a benchmark sweep saved with `spectax model"
    " fit --save-profile`), roofline (B* from vLLM's FLOP and byte estimates and the GPU's"
    " datasheet, a prior: basis default, band within x2) or configured (the defaults: the"
    " verdict's basis is then default, and usually uncertain).",
    [(f"max by (endpoint, source, profile) (spectax_model_info{{{SEL_ENDPOINT}}})", "")],
    transformations=[
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "Value": True},
                "renameByName": {"endpoint": "Endpoint", "source": "Source", "profile": "Profile"},
                "indexByName": {"endpoint": 0, "source": 1, "profile": 2},
            },
        }
    ],
    width=12,
    height=8,
)

step_overhead = timeseries(
    "Step overhead h in force, against the h at which it breaks even",
    "Extra fixed cost of a speculative engine step over a plain one (ECONOMICS.md 3b):"
    " implied by the window's own time per token against the plain curve where there is"
    " one, else assumed (the configured step_overhead_ratio, default 0.1; the band then"
    " spans h from the method's floor h_min to 3). It is what an n-gram server that"
    " proposes nothing still pays, and it lowers the break-even concurrency. Break-even"
    " (dashed, spectax_breakeven_step_overhead_ratio, at the B* in force): speculation pays"
    " while h is below it, so an uncertain verdict turns on whether the true h is; at 0 or"
    " below (off the axis) no h pays, as for a window that proposed nothing.",
    [
        (
            f"max by (endpoint, model) (spectax_step_overhead_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}}",
        ),
        (
            f"max by (endpoint, model) (spectax_breakeven_step_overhead_ratio{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} break-even",
        ),
    ],
    min_value=0,
    overrides=[by_regexp("/break-even/", custom__lineStyle=DASHED)],
)

ridge_batch = timeseries(
    "Ridge batch B* in force, against the B* above which it pays",
    "B* in force (spectax_ridge_batch_requests; where it comes from: Counterfactual source) and"
    " the B* above which the window's modelled speedup is over 1 at the h in force (dashed,"
    " spectax_breakeven_ridge_batch_requests; none where no B* would make it pay). A more"
    " memory-bound GPU (larger B*) leaves more idle compute for the drafts; an uncertain"
    " verdict on a configured B* turns on which side of the dashed line the GPU's real one"
    " lies. A sweep or a control measures it (runbook, SpeculationMayBeATax).",
    [
        (
            f"max by (endpoint) (spectax_ridge_batch_requests{{{SEL_ENDPOINT}}})",
            "{{endpoint}} in force",
        ),
        (
            f"max by (endpoint, model) (spectax_breakeven_ridge_batch_requests{{{SEL_MODEL}}})",
            "{{endpoint}} {{model}} break-even",
        ),
    ],
    min_value=0,
    overrides=[by_regexp("/break-even/", custom__lineStyle=DASHED)],
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
    "Of the draft lengths the window observed (up to the K that runs), the one with the"
    " highest predicted speedup, if it beats what runs now; otherwise the K that runs while"
    " it pays, and 0 (off) when it does not: turn speculation off on this endpoint at"
    " today's load.",
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

CAPACITY_BASES = {"configured": 0, "measured": 1}
CAPACITY_COLUMNS = {
    "Value #A": "KV blocks",
    "Value #B": "Draft blocks",
    "Value #C": "Basis",
    "Value #D": "Draft share of KV",
    "Value #E": "Holds (requests)",
    "Value #F": "Without draft",
    "Value #G": "Headroom",
}


def kv(metric: str, selector: str = "") -> str:
    return f"max by (endpoint, model) ({metric}{{{SEL_MODEL}{selector}}})"


basis_code = " or ".join(
    f'(spectax_draft_kv_cache_blocks{{{SEL_MODEL}, basis="{basis}"}} * 0 + {code})'
    for basis, code in CAPACITY_BASES.items()
)
capacity = table(
    "Capacity: the KV cache the draft takes, per endpoint and model",
    "The draft's weights (and its own KV cache) come out of the KV-cache budget. KV blocks:"
    " the engine's (vLLM num_gpu_blocks). Draft blocks, basis measured: the control (same"
    " model, no speculation) has that many more; basis configured: draft_weight_bytes over"
    " the bytes of a block as the engine states its KV cache (a lower bound: the draft's own"
    " KV cache is not counted). Holds: requests of the window's mean context length the KV"
    " cache holds at once; without draft: with the draft's blocks given back. Capacity, in"
    " requests: never money, never added to the savings.",
    [
        (kv("spectax_kv_cache_blocks"), ""),
        (kv("spectax_draft_kv_cache_blocks"), ""),
        (f"max by (endpoint, model) ({basis_code})", ""),
        (kv("spectax_draft_kv_cache_share_ratio"), ""),
        (kv("spectax_kv_cache_concurrency_requests", ', scenario="actual"'), ""),
        (kv("spectax_kv_cache_concurrency_requests", ', scenario="no_draft"'), ""),
        (kv("spectax_kv_cache_headroom_ratio"), ""),
    ],
    transformations=[
        {"id": "merge", "options": {}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "renameByName": {"endpoint": "Endpoint", "model": "Model", **CAPACITY_COLUMNS},
                "indexByName": {
                    name: i
                    for i, name in enumerate(["endpoint", "model", *CAPACITY_COLUMNS.keys()])
                },
            },
        },
    ],
    overrides=[
        by_name(
            "Basis",
            mappings=mapping({"0": ("configured", None), "1": ("measured", None)}),
        ),
        by_name("Draft blocks", decimals=0),
        by_name("Draft share of KV", unit="percentunit"),
        by_name("Holds (requests)", decimals=0),
        by_name("Without draft", decimals=0),
        by_name("Headroom", unit="percentunit"),
    ],
    height=8,
)

headroom = timeseries(
    "KV-cache headroom, with and without speculation",
    "Share of the KV cache free, time-averaged over spectax's window (1 - vLLM"
    " kv_cache_usage_perc). Compare a speculating endpoint with its control: less headroom"
    " at the same load is the draft's capacity cost; near 0, requests wait or are preempted"
    " and the batch grows toward the regime where speculation stops paying.",
    [(kv("spectax_kv_cache_headroom_ratio"), "{{endpoint}} {{model}}")],
    unit="percentunit",
    min_value=0,
    max_value=1,
    threshold_steps=(("red", None), ("green", 0.1)),
    threshold_style="line+area",
)

queueing = timeseries(
    "Waiting requests and preemptions, with and without speculation",
    "Requests waiting to be scheduled (time-average over the window) and requests the"
    " engine preempted from a full KV cache (dashed, per hour). Against the control: more"
    " of either on the speculating endpoint is the draft's capacity cost showing.",
    [
        (kv("spectax_requests_waiting"), "{{endpoint}} {{model}} waiting"),
        (kv("spectax_preemptions_per_hour"), "{{endpoint}} {{model}} preemptions/h"),
    ],
    min_value=0,
    overrides=[by_regexp("/preemptions/", custom__lineStyle=DASHED)],
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
        load_curve,
        load_crossover,
        *latency_panels.CELLS,
        row("How the verdict was reached"),
        model_source,
        step_overhead,
        ridge_batch,
        row("Capacity"),
        capacity,
        headroom,
        queueing,
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
        model_source.panel.title: "SpeculationMayBeATax",
        step_overhead.panel.title: "SpeculationMayBeATax",
        ridge_batch.panel.title: "SpeculationMayBeATax",
        concurrency.panel.title: "SpeculationConcurrencyAboveCrossover",
        load_curve.panel.title: "SpeculationScheduleStalls",
        load_crossover.panel.title: "SpeculationConcurrencyAboveCrossover",
        cost.panel.title: "SpeculationIsATax",
        savings.panel.title: "SpeculationIsATax",
        overhead.panel.title: "SpeculationIsATax",
        recommended_k.panel.title: "SpeculationIsATax",
        **latency_panels.RUNBOOK,
    },
)
