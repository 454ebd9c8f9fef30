"""The catalog of every family `/metrics` serves: name, type, help text and labels.

Declared once, here: the collector and the text encoder both walk this list
(in this order), and the metrics table of docs/metrics.md, the dashboards and the alert
rules are tested against it. A new family is one entry below plus the line in
the collector that gives it samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spectax.economics.load_curve import STALL_SHARE

ENDPOINT, MODEL = "endpoint", "model"  # the labels nearly every family carries
RUNNING_REQUESTS = "running_requests"  # a load curve bin's lower edge

# The money families' caveat, in their help text. `spectax assess` prints its own footer
# (cli/assess.py), worded for a terminal reader: the two texts differ on purpose.
PROVISIONED_CAPACITY_NOTE = (
    " On provisioned (always-on) endpoints this is GPU capacity, not invoice money:"
    " it becomes money only if replicas are scaled to match."
)


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge | counter
    help: str
    labels: tuple[str, ...]


# Where a family's samples go: (family name, label values in the family's order, value);
# a value of None or NaN means "no sample", never a 0 that looks real.
AddSample = Callable[[str, tuple[str, ...], float | None], None]


def gauge(name: str, help_: str, *labels: str) -> Family:
    return Family(name, "gauge", help_, labels)


def counter(name: str, help_: str, *labels: str) -> Family:
    return Family(name, "counter", help_, labels)


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        gauge("spectax_build_info", "spectax build: version and Python.", "version", "python"),
        gauge(
            "spectax_endpoint_info",
            "Configured endpoint: engine, GPU, GPU count, speculative method and billing mode.",
            ENDPOINT,
            "engine",
            "gpu",
            "gpus",
            "method",
            "billing_mode",
        ),
        gauge("spectax_endpoint_up", "1 when the last scrape of the endpoint succeeded.", ENDPOINT),
        gauge(
            "spectax_engine_metrics_present",
            "1 when the page carries engine metrics; 0 e.g. when vLLM runs --disable-log-stats;"
            " absent while the endpoint is down (spectax_endpoint_up 0).",
            ENDPOINT,
        ),
        gauge("spectax_scrape_duration_seconds", "Duration of the last scrape.", ENDPOINT),
        gauge(
            "spectax_last_scrape_success_timestamp_seconds",
            "Unix time of the last successful scrape.",
            ENDPOINT,
        ),
        counter("spectax_scrape_failures_total", "Failed scrapes by reason.", ENDPOINT, "reason"),
        counter(
            "spectax_models_dropped_total",
            "Model names not exported or stored: limit - a new name refused while the endpoint"
            " holds 128 (counted on each page it is on); expired - a held name forgotten after"
            " a window on no page.",
            ENDPOINT,
            "reason",
        ),
        gauge(
            "spectax_acceptance_ratio",
            "Accepted / proposed draft tokens over the window (vLLM's acceptance rate, alpha).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_acceptance_length_tokens",
            "Mean tokens emitted per verify step over the window, bonus token included (tau).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_position_acceptance_ratio",
            "Share of drafts whose token at this position was accepted, over the window.",
            ENDPOINT,
            MODEL,
            "position",
        ),
        gauge(
            "spectax_breakeven_acceptance_ratio",
            "Acceptance above which speculation pays at the window's concurrency (alpha*).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_no_acceptance_pays",
            "1 when no acceptance would pay at the window's concurrency and step overhead (the"
            " break-even acceptance would be above 1, so spectax_breakeven_acceptance_ratio is"
            " absent); 0 when one would.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_breakeven_step_overhead_ratio",
            "Step overhead h at which the window's modelled speedup is exactly 1, at the ridge"
            " batch in force (h*): speculation pays unless a speculative step's fixed cost is"
            " more than 1 + h* times a plain one's. 0 or below: a tax at any h.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_breakeven_ridge_batch_requests",
            "Ridge batch B* above which the window's modelled speedup is over 1, at the step"
            " overhead in force; absent when no B* would make it pay.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_acceptance_threshold_ratio",
            "Configured paging threshold for the acceptance ratio.",
            ENDPOINT,
        ),
        gauge(
            "spectax_speedup_ratio",
            "GPU time without speculation / with it over the window; below 1 speculation is a tax.",
            ENDPOINT,
            MODEL,
            "method",
        ),
        gauge(
            "spectax_speedup_band_ratio",
            "Low and high ends of the speedup the verdict uses: the calibration's own spread,"
            " or the plausible range of unknown parameters; one value when measured.",
            ENDPOINT,
            MODEL,
            "bound",
        ),
        gauge(
            "spectax_latency_seconds",
            "Latency quantile over the window from the engine's histogram buckets, as"
            " histogram_quantile computes it; metric: tpot, itl, ttft or e2e.",
            ENDPOINT,
            MODEL,
            "metric",
            "percentile",
        ),
        gauge(
            "spectax_latency_speculation_ratio",
            "The latency quantile with speculation / without it (above 1: speculation makes it"
            " slower). basis: measured against the control, or modeled (TPOT only: 1 / the"
            " step model's mean speedup, not a measured tail).",
            ENDPOINT,
            MODEL,
            "metric",
            "percentile",
            "basis",
        ),
        gauge(
            "spectax_latency_slo_seconds",
            "The operator's latency objective for the endpoint (config latency_slo).",
            ENDPOINT,
            "metric",
            "percentile",
        ),
        gauge(
            "spectax_verdict_info",
            "The verdict over the window (pays, tax, or uncertain when the band straddles 1)"
            " and its basis: measured, calibrated, profile or default.",
            ENDPOINT,
            MODEL,
            "verdict",
            "basis",
        ),
        gauge(
            "spectax_step_overhead_ratio",
            "Extra fixed cost of a speculative step over a plain one's (h, ECONOMICS.md 3b):"
            " implied by the window's own time per token against the plain curve, or assumed.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_concurrency_requests",
            "Time-average of running requests over the window (B).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_kv_cache_blocks",
            "KV-cache blocks of the engine as of the window's end (vLLM num_gpu_blocks,"
            " summed over data-parallel ranks).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_kv_cache_usage_ratio",
            "Time-average share of the KV cache in use over the window.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_kv_cache_headroom_ratio",
            "Time-average share of the KV cache free over the window (1 - usage).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_requests_waiting",
            "Time-average of requests waiting to be scheduled over the window.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_preemptions_per_hour",
            "Requests the engine preempted (evicted from a full KV cache) over the window, per"
            " hour.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_kv_cache_concurrency_requests",
            "Requests the KV cache holds at once at the window's mean context length (blocks /"
            " blocks per request): scenario=actual, and no_draft with the blocks the draft"
            " takes given back. Capacity, not money.",
            ENDPOINT,
            MODEL,
            "scenario",
        ),
        gauge(
            "spectax_draft_kv_cache_blocks",
            "KV-cache blocks the draft takes: basis=measured (the control's blocks minus"
            " these) or configured (draft_weight_bytes / the engine's bytes per block).",
            ENDPOINT,
            MODEL,
            "basis",
        ),
        gauge(
            "spectax_draft_kv_cache_share_ratio",
            "Share of the KV cache the endpoint would have without the draft that the draft"
            " takes: draft blocks / (blocks + draft blocks).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_crossover_concurrency_requests",
            "Concurrency above which speculation is a tax at the window's acceptance (B_x).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_ridge_batch_requests",
            "Ridge batch B* = a/b of plain decoding, from the counterfactual's source: control,"
            " baseline (own history before speculation), profile, sweep, roofline or configured.",
            ENDPOINT,
            "source",
        ),
        gauge(
            "spectax_model_info",
            "Where the counterfactual (the plain-decode step time) comes from, and the profile"
            " named, if any.",
            ENDPOINT,
            "source",
            "profile",
        ),
        gauge(
            "spectax_recommended_speculative_tokens",
            "Draft length to run: of those observed, the one with the highest predicted speedup,"
            " if it beats what runs (else the length that runs); 0 = turn it off.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_speculative_tokens",
            "Draft length the window ran (K), from the engine's per-position acceptance counters.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_recommended_speedup_ratio",
            "Predicted speedup at the recommended draft length: the speedup in force when that"
            " is the length that runs, 1 when it is 0 (off).",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_gpu_cost_usd_per_hour",
            "Price in force for the endpoint: USD per GPU-hour times GPU count.",
            ENDPOINT,
        ),
        counter(
            "spectax_spend_usd_total",
            "Accrued spend of the endpoint; basis=estimated is the price-table estimate,"
            " basis=billed the final lines of its billing source (see spectax_billing_*).",
            ENDPOINT,
            "basis",
        ),
        gauge(
            "spectax_cost_per_million_output_tokens_usd",
            "Realized cost per million output tokens over the window (scenario=actual), and the"
            " price of the GPU time the same output would have taken without speculation"
            " (scenario=no_speculation)." + PROVISIONED_CAPACITY_NOTE,
            ENDPOINT,
            MODEL,
            "scenario",
        ),
        gauge(
            "spectax_speculation_savings_usd_per_hour",
            "Value of the GPU time speculation saved over the window, per hour; negative = tax."
            + PROVISIONED_CAPACITY_NOTE,
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_draft_overhead_usd_per_hour",
            "Spend on drafting compute, on rejected draft tokens (their drafting included, so the"
            " kinds overlap), and on VRAM the draft holds instead of KV cache.",
            ENDPOINT,
            MODEL,
            "kind",
        ),
        counter(
            "spectax_cold_starts_total",
            "Engine restarts seen (new process start time or counters going down).",
            ENDPOINT,
        ),
        counter(
            "spectax_cold_start_cost_usd_total",
            "Estimated cost of cold starts on serverless endpoints: load time x GPUs x price.",
            ENDPOINT,
        ),
        gauge(
            "spectax_cold_start_duration_seconds",
            "Load seconds billed for the last restart: the new process's age at first sight"
            " (first successful scrape minus process start, an upper bound of the load), or"
            " the configured duration when it cannot be measured.",
            ENDPOINT,
        ),
        counter(
            "spectax_unobserved_seconds_total",
            "Seconds across engine restarts in which no scrape could see the old process:"
            " from its last scrape to the new process's start (the whole gap when the start"
            " is unknown). What it served then is lost.",
            ENDPOINT,
        ),
        # The load curve (economics.load_curve): the stored windows of the lookback
        # (`load_curve.lookback`) binned by mean running requests, labelled by the bin's
        # lower edge (1, 2, 4, ... 256); recomputed every `load_curve.refresh_interval`.
        gauge(
            "spectax_load_time_share_ratio",
            "Share of the load curve's lookback the endpoint's model spent at this many mean"
            " running requests (the bin from this edge to the next power of two).",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_speedup_ratio",
            "Speculation's speedup in the load bin over the lookback: busy time without"
            " speculation over busy time, summed (measured where a control measured it).",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_acceptance_ratio",
            "Draft acceptance in the load bin over the lookback (summed counts).",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_speculation_savings_usd",
            "Net savings of speculation in the load bin over the lookback; negative: a tax."
            + PROVISIONED_CAPACITY_NOTE,
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_output_tokens_per_request_second",
            "Output tokens per second per running request in the load bin over the lookback.",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_draft_tokens_per_step",
            "Draft tokens proposed per request-step in the load bin over the lookback (the"
            " draft length that ran, in the mean; 0 where nothing was drafted): where a K"
            " schedule shortens or stops drafting, it falls.",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_stalled",
            f"1 when the load bin's output rate per running request is under {STALL_SHARE:g}"
            " of both"
            " neighbouring bins' (and, measured against a control, under the plain rate):"
            " throughput collapsing at a load, as at a K schedule's boundary.",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_schedule_boundary",
            "1 when the load bin holds batch sizes on both sides of a boundary of the"
            " endpoint's configured K schedule (speculation.schedule): its windows ran two K"
            " and its figures mix them; only on endpoints with a schedule.",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_recommended_speculative_tokens",
            "Draft length the load curve advises for the bin (its K schedule: the bin's best"
            " K at its load, with the h its own speedup implies); 0 = speculation off there."
            " Absent where no K can be chosen (no per-position counts).",
            ENDPOINT,
            MODEL,
            RUNNING_REQUESTS,
        ),
        gauge(
            "spectax_load_schedule_at_stake_usd",
            "What running the load curve's K schedule would have saved over the lookback:"
            " each bin's busy spend times its predicted speedup minus the one in force,"
            " summed; negative: it would have cost." + PROVISIONED_CAPACITY_NOTE,
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_load_crossover_running_requests",
            "Mean running requests from which speculation was a tax over the lookback, above"
            " a load at which it paid (the load curve's crossover); +Inf when there is none.",
            ENDPOINT,
            MODEL,
        ),
        gauge(
            "spectax_billing_up",
            "1 when the last read of the billing source succeeded.",
            "source",
        ),
        gauge(
            "spectax_billing_last_success_timestamp_seconds",
            "Unix time of the last successful read of the billing source.",
            "source",
        ),
        gauge(
            "spectax_billing_drift_ratio",
            "(estimated - billed) / billed spend of the endpoints the billing source bills, over"
            " its last final period that spectax watched whole; positive: the estimate is high.",
            "source",
        ),
        gauge(
            "spectax_store_pending_windows",
            "Window rows closed but not yet written to the store (held while it is unreachable).",
        ),
        counter("spectax_store_write_errors_total", "Failed attempts to write to the store."),
        gauge("spectax_store_up", "1 when the last attempt to reach the store succeeded."),
        gauge(
            "spectax_store_oldest_pending_age_seconds",
            "Seconds the oldest window write not yet in the store has waited; 0: none waits.",
        ),
        gauge(
            "spectax_leader",
            "1 when this process writes windows, rollups and billing to the store; 0 while"
            " it follows the other process of an HA pair (it still scrapes and serves), or"
            " before it holds the lock (its database not reached yet).",
        ),
        counter(
            "spectax_store_quarantined_rows_total",
            "Window rows the store refused for their values (out of range, too long), kept in"
            " quarantine.jsonl in the state directory instead; the rest of the batch is written.",
            ENDPOINT,
        ),
        gauge(
            "spectax_config_last_reload_successful",
            "1 when the last configuration reload (SIGHUP or POST /-/reload) succeeded.",
        ),
        gauge(
            "spectax_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load (start-up or reload).",
        ),
        counter(
            "spectax_output_tokens_total",
            "Output tokens counted by spectax since it started (sums of engine deltas).",
            ENDPOINT,
            MODEL,
        ),
        counter(
            "spectax_draft_tokens_total",
            "Draft tokens proposed, counted by spectax since it started.",
            ENDPOINT,
            MODEL,
        ),
        counter(
            "spectax_accepted_tokens_total",
            "Draft tokens accepted, counted by spectax since it started.",
            ENDPOINT,
            MODEL,
        ),
    )
}
