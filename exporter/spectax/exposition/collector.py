"""The `/metrics` exposition: a custom Collector over the latest snapshots.

`collect()` runs synchronously inside the HTTP handler, so it only reads the
immutable snapshots the monitors last published and never does I/O. What the
families are is the catalog's (`families.py`); this module says which samples a
snapshot gives them, once, for both renderings: prometheus_client's metric
families (`collect()`, the reference; OpenMetrics goes through it) and the fast
text encoder (`render_text()`, what Prometheus gets, `text.py`).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spectax import __version__
from spectax.billing.coordinator import BillingSnapshot
from spectax.economics import Assessment, Capacity
from spectax.economics.draft_schedule import DraftSchedule
from spectax.economics.k_schedule import straddling
from spectax.economics.load_curve import LoadCurve
from spectax.endpoint import EndpointSnapshot
from spectax.engines import not_exposed
from spectax.exposition.families import FAMILIES, AddSample, Family
from spectax.exposition.text import (
    Formatted,
    FormattedLines,
    Page,
    Settings,
    TextEncoder,
    line_writer,
)
from spectax.health import REASONS
from spectax.pipeline.model_ledger import DROP_REASONS


@dataclass(frozen=True)
class StoreStatus:
    pending_windows: int
    write_errors: int
    up: bool = True
    quarantined_rows: Mapping[str, int] = field(default_factory=dict)  # endpoint -> rows
    leader: bool = True  # this process writes to the store (spectax.store.leader)
    oldest_pending_age_seconds: float = 0.0  # how long the oldest write has waited


@dataclass(frozen=True)
class ReloadStatus:
    """The outcome of the last configuration (re)load, like Prometheus' own gauges."""

    successful: bool = True
    success_timestamp: float | None = None


class SnapshotCollector(Collector):
    """Yields fresh metric families from the snapshots `snapshots()` returns."""

    def __init__(
        self,
        snapshots: Callable[[], Mapping[str, EndpointSnapshot]],
        store_status: Callable[[], StoreStatus],
        reload_status: Callable[[], ReloadStatus] | None = None,
        billing: Callable[[], BillingSnapshot] | None = None,
        *,
        load_curves: Callable[[], LoadCurves] | None = None,
        version: str = __version__,
        python_version: str = platform.python_version(),
    ):
        """`version` and `python_version` label `spectax_build_info`; a test that compares
        whole pages passes fixed ones, so that a release or a new Python changes no line."""
        self._snapshots = snapshots
        self._store_status = store_status
        self._reload_status = reload_status
        self._billing = billing
        self._load_curves = load_curves
        self._build = (version, python_version)
        self._text = TextEncoder(
            endpoint_observations, Settings(endpoint_settings, settings_key, same_settings)
        )

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on the snapshot

    def collect(self) -> Iterator[Metric]:
        families = {name: _metric_family(family) for name, family in FAMILIES.items()}

        def add(name: str, labels: tuple[str, ...], value: float | None) -> None:
            if value is not None and not math.isnan(value):
                families[name].add_metric(list(labels), value)

        self._spectax_samples(add)
        if self._load_curves is not None:
            curves = self._load_curves()
            load_curve_samples(add, curves.curves, curves.boundaries, curves.schedules)
        for name, snap in sorted(self._snapshots().items()):
            endpoint_samples(add, name, snap)
        yield from families.values()

    def render_text(self) -> bytes:
        """The text exposition (format 0.0.4) of what `collect()` yields, whole."""
        return b"".join(self.render_page().parts)

    def render_page(self) -> Page:
        """The text exposition, fast at fleet scale: each endpoint's lines are formatted once
        per snapshot, and the page is made a family at a time off the event loop (see
        `text.py`)."""
        curves = self._load_curves() if self._load_curves is not None else None
        formatted = curves.lines if curves is not None else None
        return self._text.render(self._spectax_samples, self._snapshots(), formatted)

    def prerender(self, name: str, snap: EndpointSnapshot) -> None:
        """Format an endpoint's lines as soon as its snapshot changes, in the scrape that
        changed it, so that a request for /metrics only joins them: at 2,000 endpoints
        formatting them all takes about 250 ms, joining them about 20 ms."""
        self._text.fragments(name, snap)

    def _spectax_samples(self, add: AddSample) -> None:
        """Samples about spectax itself rather than an endpoint."""
        add("spectax_build_info", self._build, 1)
        store = self._store_status()
        add("spectax_store_pending_windows", (), float(store.pending_windows))
        add("spectax_store_write_errors_total", (), float(store.write_errors))
        add("spectax_store_up", (), float(store.up))
        add("spectax_store_oldest_pending_age_seconds", (), store.oldest_pending_age_seconds)
        add("spectax_leader", (), float(store.leader))
        # every endpoint from 0, so that the first quarantined row is an increase (rate())
        for name in sorted({*self._snapshots(), *store.quarantined_rows}):
            count = store.quarantined_rows.get(name, 0)
            add("spectax_store_quarantined_rows_total", (name,), float(count))
        if self._reload_status is not None:
            reload = self._reload_status()
            add("spectax_config_last_reload_successful", (), float(reload.successful))
            add(
                "spectax_config_last_reload_success_timestamp_seconds",
                (),
                reload.success_timestamp,
            )
        if self._billing is not None:
            _billing_samples(add, self._billing())


@dataclass(frozen=True, slots=True)
class CurveLines:
    """One endpoint and model's curve, the K schedule it implies, the batch sizes where the
    endpoint's configured K schedule changes K (None: it runs none), and its /metrics lines
    made of them: by family, the curve's lines as one piece of bytes."""

    curve: LoadCurve
    schedule: DraftSchedule | None
    boundary: tuple[int, ...] | None
    lines: Mapping[str, bytes]

    @classmethod
    def of(
        cls,
        key: tuple[str, str],
        curve: LoadCurve,
        schedule: DraftSchedule | None,
        boundary: tuple[int, ...] | None,
    ) -> CurveLines:
        lines: dict[str, list[str]] = {}
        schedules = {key: schedule} if schedule is not None else {}
        boundaries = {key: boundary} if boundary is not None else {}
        load_curve_samples(line_writer(lines), {key: curve}, boundaries, schedules)
        text = {family: "".join(found).encode() for family, found in lines.items()}
        return cls(curve, schedule, boundary, text)


@dataclass(frozen=True)
class LoadCurves:
    """Each endpoint and model's load curve over the lookback (`spectax.curve_book`), and
    its lines of `/metrics`, formatted once when the curves are made: at 2,000 endpoints
    they are up to ~150,000 lines, too many to format at every read."""

    curves: Mapping[tuple[str, str], LoadCurve] = field(default_factory=dict)
    #: By family, its lines: a piece of bytes per curve with lines in the family, in
    #: (endpoint, model) order.
    lines: Formatted = field(default_factory=FormattedLines)
    #: By endpoint and model, the batch sizes where the endpoint's configured K schedule
    #: changes K, as the curve's lines were made with them.
    boundaries: Mapping[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    #: The K schedule each curve implies (`economics.draft_schedule`), by endpoint and model.
    schedules: Mapping[tuple[str, str], DraftSchedule] = field(default_factory=dict)

    @classmethod
    def gathered(cls, made: Mapping[tuple[str, str], CurveLines]) -> LoadCurves:
        """The curves made one at a time (`CurveLines`), with each family's pieces in
        (endpoint, model) order: the page `load_curve_samples` gives all at once. The
        pieces are kept as they are: joined (as str, then encoded) they tripled the lines'
        ~18 MB at 2,000 endpoints for the time of a refresh (`bench/load_curves.py`)."""
        pieces: dict[str, list[bytes]] = {}
        for key in sorted(made):
            for family, text in made[key].lines.items():
                pieces.setdefault(family, []).append(text)
        return cls(
            {key: m.curve for key, m in made.items()},
            FormattedLines((family, tuple(found)) for family, found in pieces.items()),
            {key: m.boundary for key, m in made.items() if m.boundary is not None},
            {key: m.schedule for key, m in made.items() if m.schedule is not None},
        )


def load_curve_samples(
    add: AddSample,
    curves: Mapping[tuple[str, str], LoadCurve],
    boundaries: Mapping[tuple[str, str], tuple[int, ...]],
    schedules: Mapping[tuple[str, str], DraftSchedule],
) -> None:
    """The load curves' samples: per bin, labelled by its lower edge, and the crossover;
    where the endpoint runs a configured K schedule (`boundaries`, by endpoint and model),
    whether each bin straddles a boundary; where the curve implies a K schedule, the K it
    advises per bin and what it is worth."""
    for (endpoint, model), curve in sorted(curves.items()):
        stalled = set(curve.stalls)
        schedule = boundaries.get((endpoint, model))
        advised = schedules.get((endpoint, model))
        k_of = advised.k_by_bin if advised is not None else {}
        for b in curve.bins:
            labels = (endpoint, model, str(b.low))
            add("spectax_load_time_share_ratio", labels, b.time_share)
            add("spectax_load_speedup_ratio", labels, b.speedup)
            add("spectax_load_acceptance_ratio", labels, b.acceptance)
            add("spectax_load_speculation_savings_usd", labels, b.savings_usd)
            add("spectax_load_output_tokens_per_request_second", labels, b.output_rate)
            add("spectax_load_draft_tokens_per_step", labels, b.draft_tokens_per_step)
            add("spectax_load_stalled", labels, float(b.low in stalled))
            if schedule is not None:
                boundary = float(straddling(b.low, b.high, schedule))
                add("spectax_load_schedule_boundary", labels, boundary)
            add("spectax_load_recommended_speculative_tokens", labels, k_of.get(b.low))
        if advised is not None:
            add("spectax_load_schedule_at_stake_usd", (endpoint, model), advised.at_stake_usd)
        crossover = curve.crossover_requests
        add(
            "spectax_load_crossover_running_requests",
            (endpoint, model),
            math.inf if crossover is None else float(crossover),
        )


def endpoint_samples(add: AddSample, name: str, snap: EndpointSnapshot) -> None:
    """Everything `/metrics` shows of one endpoint: its settings, its state, then each
    model's assessment."""
    endpoint_settings(add, name, snap)
    endpoint_observations(add, name, snap)


def endpoint_observations(add: AddSample, name: str, snap: EndpointSnapshot) -> None:
    """What an endpoint's scrapes change: its state, then each model's assessment."""
    _endpoint_state(add, name, snap)
    for model, assessment in sorted(snap.assessments.items()):
        _model_assessment(add, (name, model), assessment)
    for model, capacity in sorted(snap.capacities.items()):
        _model_capacity(add, (name, model), capacity)


def endpoint_settings(add: AddSample, name: str, snap: EndpointSnapshot) -> None:
    """The families of an endpoint that change only with what `settings_key` holds (its
    configuration, price, counts of failures and dropped models, the counterfactual in
    force), so that the text encoder formats them again only then: ~13 of an endpoint's ~65
    lines at every scrape (issue 31). No family here has a line in `endpoint_observations`."""
    config = snap.config
    speculation = config.speculation
    add(
        "spectax_endpoint_info",
        (
            name,
            config.engine,
            config.gpu or "",
            str(config.gpus),
            speculation.method if speculation else "none",
            config.billing_mode,
        ),
        1,
    )
    for reason in REASONS:
        add("spectax_scrape_failures_total", (name, reason), float(snap.failures.get(reason, 0)))
    for dropped in DROP_REASONS:
        count = float(snap.models_dropped.get(dropped, 0))
        add("spectax_models_dropped_total", (name, dropped), count)
    add("spectax_acceptance_threshold_ratio", (name,), config.acceptance_threshold)
    if (slo := config.latency_slo) is not None:
        add("spectax_latency_slo_seconds", (name, slo.metric, slo.percentile), slo.seconds)
    if speculation is not None:
        step = snap.step_model
        add("spectax_ridge_batch_requests", (name, step.source), step.ridge_batch)
        add("spectax_model_info", (name, step.source, step.profile or ""), 1)
    if snap.usd_per_hour is not None:
        add("spectax_gpu_cost_usd_per_hour", (name,), float(snap.usd_per_hour) * config.gpus)


def settings_key(snap: EndpointSnapshot) -> tuple[object, ...]:
    """What `endpoint_settings` reads of a snapshot. The configuration and the two counts
    are replaced, never changed, so compared by identity (`same_settings`)."""
    return (snap.config, snap.failures, snap.models_dropped, snap.usd_per_hour, snap.step_model)


def same_settings(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return a[0] is b[0] and a[1] is b[1] and a[2] is b[2] and a[3:] == b[3:]


def _billing_samples(add: AddSample, billing: BillingSnapshot) -> None:
    for source in billing.sources:
        if source.up is not None:
            add("spectax_billing_up", (source.name,), float(source.up))
        add("spectax_billing_last_success_timestamp_seconds", (source.name,), source.last_success)
    for endpoint, amount in sorted(billing.billed_usd_total.items()):
        add("spectax_spend_usd_total", (endpoint, "billed"), float(amount))
    for source_name, ratio in sorted(billing.drift.items()):
        add("spectax_billing_drift_ratio", (source_name,), ratio)


def _endpoint_state(add: AddSample, name: str, snap: EndpointSnapshot) -> None:
    config = snap.config
    speculation = config.speculation
    add("spectax_endpoint_up", (name,), float(snap.up))
    if snap.up:  # unknown while down: absent, never the 0 of a page without engine families
        add("spectax_engine_metrics_present", (name,), float(snap.engine_metrics))
    add("spectax_scrape_duration_seconds", (name,), snap.scrape_duration_seconds)
    add("spectax_last_scrape_success_timestamp_seconds", (name,), snap.last_success_timestamp)
    if snap.usd_per_hour is not None:
        add("spectax_spend_usd_total", (name, "estimated"), float(snap.spend_usd_total))
    add("spectax_cold_starts_total", (name,), float(snap.cold_starts_total))
    add("spectax_cold_start_duration_seconds", (name,), snap.last_cold_start_seconds)
    add("spectax_unobserved_seconds_total", (name,), snap.unobserved_seconds_total)
    if snap.usd_per_hour is not None and config.billing_mode == "serverless":
        add("spectax_cold_start_cost_usd_total", (name,), float(snap.cold_start_usd_total))
    absent = not_exposed(config.engine)
    for model, (output, drafted, accepted) in sorted(snap.tokens_total.items()):
        add("spectax_output_tokens_total", (name, model), output)
        if speculation is not None:
            if "draft_tokens" not in absent:  # SGLang, TGI: nothing, not a 0 that looks real
                add("spectax_draft_tokens_total", (name, model), drafted)
            add("spectax_accepted_tokens_total", (name, model), accepted)


def _model_assessment(
    add: AddSample, endpoint_model: tuple[str, str], assessment: Assessment
) -> None:
    """One model's economics over the window; `endpoint_model` are its first two labels."""
    add("spectax_concurrency_requests", endpoint_model, assessment.concurrency_requests)
    add("spectax_acceptance_ratio", endpoint_model, assessment.acceptance_ratio)
    add("spectax_acceptance_length_tokens", endpoint_model, assessment.acceptance_length_tokens)
    for position, ratio in enumerate(assessment.position_acceptance_ratio):
        add("spectax_position_acceptance_ratio", (*endpoint_model, str(position)), ratio)
    add("spectax_speedup_ratio", (*endpoint_model, "modeled"), assessment.speedup_ratio)
    add("spectax_speedup_ratio", (*endpoint_model, "measured"), assessment.speedup_measured_ratio)
    add("spectax_speedup_band_ratio", (*endpoint_model, "low"), assessment.speedup_low_ratio)
    add("spectax_speedup_band_ratio", (*endpoint_model, "high"), assessment.speedup_high_ratio)
    if assessment.verdict_basis is not None:
        add(
            "spectax_verdict_info",
            (*endpoint_model, assessment.verdict, assessment.verdict_basis),
            1,
        )
    add("spectax_step_overhead_ratio", endpoint_model, assessment.step_overhead_ratio)
    if (latency := assessment.latency) is not None:
        for metric, found in sorted(latency.quantiles.items()):
            for label, seconds in found.by_label().items():
                add("spectax_latency_seconds", (*endpoint_model, metric, label), seconds)
        for (metric, label), ratio in sorted(latency.ratios.items()):
            labels = (*endpoint_model, metric, label, latency.basis or "")
            add("spectax_latency_speculation_ratio", labels, ratio)
    _break_even(add, endpoint_model, assessment)
    add(
        "spectax_cost_per_million_output_tokens_usd",
        (*endpoint_model, "actual"),
        assessment.cost_per_million_output_tokens_usd,
    )
    add(
        "spectax_cost_per_million_output_tokens_usd",
        (*endpoint_model, "no_speculation"),
        assessment.cost_per_million_output_tokens_no_speculation_usd,
    )
    savings = assessment.per_hour(assessment.speculation_savings_usd)
    add("spectax_speculation_savings_usd_per_hour", endpoint_model, savings)
    for kind, usd in (
        ("draft_compute", assessment.draft_compute_usd),
        ("rejected", assessment.rejected_usd),
        ("vram", assessment.vram_usd),
    ):
        add(
            "spectax_draft_overhead_usd_per_hour", (*endpoint_model, kind), assessment.per_hour(usd)
        )


def _break_even(add: AddSample, endpoint_model: tuple[str, str], assessment: Assessment) -> None:
    """Where speculation breaks even and what to run: what an uncertain verdict turns on
    (the h and the B* at which the speedup is 1), for the alerts to quote."""
    breakeven = assessment.breakeven_acceptance_ratio
    add("spectax_breakeven_acceptance_ratio", endpoint_model, breakeven)
    # 0/1 only where the break-even was priced (a window that drafted): absent otherwise.
    priced = breakeven is not None or assessment.no_acceptance_pays
    add(
        "spectax_no_acceptance_pays",
        endpoint_model,
        float(assessment.no_acceptance_pays) if priced else None,
    )
    add(
        "spectax_breakeven_step_overhead_ratio",
        endpoint_model,
        assessment.breakeven_step_overhead_ratio,
    )
    add(
        "spectax_breakeven_ridge_batch_requests",
        endpoint_model,
        assessment.breakeven_ridge_batch_requests,
    )
    add(
        "spectax_crossover_concurrency_requests",
        endpoint_model,
        assessment.crossover_concurrency_requests,
    )
    for name, tokens in (
        ("spectax_recommended_speculative_tokens", assessment.recommended_speculative_tokens),
        ("spectax_speculative_tokens", assessment.speculative_tokens),
    ):
        add(name, endpoint_model, None if tokens is None else float(tokens))
    add("spectax_recommended_speedup_ratio", endpoint_model, assessment.recommended_speedup_ratio)


def _model_capacity(add: AddSample, endpoint_model: tuple[str, str], capacity: Capacity) -> None:
    """One model's KV cache over the window, and what the draft takes of it."""
    add("spectax_kv_cache_blocks", endpoint_model, capacity.kv_cache_blocks)
    add("spectax_kv_cache_usage_ratio", endpoint_model, capacity.kv_usage_ratio)
    add("spectax_kv_cache_headroom_ratio", endpoint_model, capacity.kv_headroom_ratio)
    add("spectax_requests_waiting", endpoint_model, capacity.requests_waiting)
    add("spectax_preemptions_per_hour", endpoint_model, capacity.preemptions_per_hour)
    for scenario, requests in (
        ("actual", capacity.concurrency_capacity_requests),
        ("no_draft", capacity.concurrency_capacity_no_draft_requests),
    ):
        add("spectax_kv_cache_concurrency_requests", (*endpoint_model, scenario), requests)
    if capacity.draft_blocks_basis is not None:
        basis = (*endpoint_model, capacity.draft_blocks_basis)
        add("spectax_draft_kv_cache_blocks", basis, capacity.draft_blocks)
    add("spectax_draft_kv_cache_share_ratio", endpoint_model, capacity.draft_kv_share_ratio)


def _metric_family(family: Family) -> CounterMetricFamily | GaugeMetricFamily:
    """A fresh, empty prometheus_client family for one scrape (`collect()`)."""
    if family.kind == "counter":
        return CounterMetricFamily(family.name, family.help, labels=list(family.labels))
    return GaugeMetricFamily(family.name, family.help, labels=list(family.labels))
