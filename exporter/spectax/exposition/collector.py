"""The `/metrics` exposition: a custom Collector over the latest snapshots.

`collect()` runs synchronously inside the HTTP handler, so it only reads the
immutable snapshots the monitors last published and never does I/O. Every
family is declared once in `FAMILIES` with its type and help text; the README's
metrics table is tested against what this serves.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spectax import __version__
from spectax.billing.coordinator import BillingSnapshot
from spectax.economics import Assessment
from spectax.endpoint import EndpointSnapshot
from spectax.scrape import REASONS

PROVISIONED_NOTE = (
    " On provisioned (always-on) endpoints this is GPU capacity, not invoice money:"
    " it becomes money only if replicas are scaled to match."
)


@dataclass(frozen=True)
class StoreStatus:
    pending_windows: int
    write_errors: int
    up: bool = True


@dataclass(frozen=True)
class ReloadStatus:
    """The outcome of the last configuration (re)load, like Prometheus' own gauges."""

    successful: bool = True
    success_timestamp: float | None = None


@dataclass(frozen=True)
class Family:
    name: str
    kind: str  # gauge | counter
    help: str
    labels: tuple[str, ...]

    @property
    def header(self) -> str:
        escaped = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        return f"# HELP {self.name} {escaped}\n# TYPE {self.name} {self.kind}\n"

    @property
    def line_template(self) -> str:
        """`%`-template of one sample line: the escaped label values, then the value."""
        pairs = ",".join(f'{key}="%s"' for key in self.labels)
        return f"{self.name}{{{pairs}}} %s\n" if pairs else f"{self.name} %s\n"


def _f(name: str, kind: str, help_: str, *labels: str) -> Family:
    return Family(name, kind, help_, labels)


_E, _M = "endpoint", "model"
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        _f(
            "spectax_build_info", "gauge", "spectax build: version and Python.", "version", "python"
        ),
        _f(
            "spectax_endpoint_info",
            "gauge",
            "Configured endpoint: engine, GPU, GPU count, speculative method and billing mode.",
            _E,
            "engine",
            "gpu",
            "gpus",
            "method",
            "billing_mode",
        ),
        _f("spectax_endpoint_up", "gauge", "1 when the last scrape of the endpoint succeeded.", _E),
        _f(
            "spectax_engine_metrics_present",
            "gauge",
            "1 when the page carries engine metrics; 0 e.g. when vLLM runs --disable-log-stats.",
            _E,
        ),
        _f("spectax_scrape_duration_seconds", "gauge", "Duration of the last scrape.", _E),
        _f(
            "spectax_last_scrape_success_timestamp_seconds",
            "gauge",
            "Unix time of the last successful scrape.",
            _E,
        ),
        _f("spectax_scrape_failures_total", "counter", "Failed scrapes by reason.", _E, "reason"),
        _f(
            "spectax_acceptance_ratio",
            "gauge",
            "Accepted / proposed draft tokens over the window (vLLM's acceptance rate, alpha).",
            _E,
            _M,
        ),
        _f(
            "spectax_acceptance_length_tokens",
            "gauge",
            "Mean tokens emitted per verify step over the window, bonus token included (tau).",
            _E,
            _M,
        ),
        _f(
            "spectax_position_acceptance_ratio",
            "gauge",
            "Share of drafts whose token at this position was accepted, over the window.",
            _E,
            _M,
            "position",
        ),
        _f(
            "spectax_breakeven_acceptance_ratio",
            "gauge",
            "Acceptance above which speculation pays at the window's concurrency (alpha*).",
            _E,
            _M,
        ),
        _f(
            "spectax_acceptance_threshold_ratio",
            "gauge",
            "Configured paging threshold for the acceptance ratio.",
            _E,
        ),
        _f(
            "spectax_speedup_ratio",
            "gauge",
            "GPU time without speculation / with it over the window; below 1 speculation is a tax.",
            _E,
            _M,
            "method",
        ),
        _f(
            "spectax_concurrency_requests",
            "gauge",
            "Time-average of running requests over the window (B).",
            _E,
            _M,
        ),
        _f(
            "spectax_crossover_concurrency_requests",
            "gauge",
            "Concurrency above which speculation is a tax at the window's acceptance (B_x).",
            _E,
            _M,
        ),
        _f(
            "spectax_ridge_batch_requests",
            "gauge",
            "Ridge batch B* = a/b of the step-time model in force: calibrated from the"
            " endpoint's own step times when the fit is sound, else configured.",
            _E,
            "source",
        ),
        _f(
            "spectax_recommended_speculative_tokens",
            "gauge",
            "Draft length whose every position clears the break-even acceptance; 0 = turn it off.",
            _E,
            _M,
        ),
        _f(
            "spectax_gpu_cost_usd_per_hour",
            "gauge",
            "Price in force for the endpoint: USD per GPU-hour times GPU count.",
            _E,
        ),
        _f(
            "spectax_spend_usd_total",
            "counter",
            "Accrued spend of the endpoint; basis=estimated is the price-table estimate,"
            " basis=billed the final lines of its billing source (see spectax_billing_*).",
            _E,
            "basis",
        ),
        _f(
            "spectax_cost_per_million_output_tokens_usd",
            "gauge",
            "Realized cost per million output tokens over the window (scenario=actual), and the"
            " price of the GPU time the same output would have taken without speculation"
            " (scenario=no_speculation)." + PROVISIONED_NOTE,
            _E,
            _M,
            "scenario",
        ),
        _f(
            "spectax_speculation_savings_usd_per_hour",
            "gauge",
            "Value of the GPU time speculation saved over the window, per hour; negative = tax."
            + PROVISIONED_NOTE,
            _E,
            _M,
        ),
        _f(
            "spectax_draft_overhead_usd_per_hour",
            "gauge",
            "Spend on drafting compute, on rejected draft tokens (their drafting included, so the"
            " kinds overlap), and on VRAM the draft holds instead of KV cache.",
            _E,
            _M,
            "kind",
        ),
        _f(
            "spectax_cold_starts_total",
            "counter",
            "Engine restarts seen (new process start time or counters going down).",
            _E,
        ),
        _f(
            "spectax_cold_start_cost_usd_total",
            "counter",
            "Estimated cost of cold starts on serverless endpoints: load time x GPUs x price.",
            _E,
        ),
        _f(
            "spectax_cold_start_duration_seconds",
            "gauge",
            "Duration of the last cold start: first successful scrape minus process start"
            " (or the configured duration when it cannot be measured).",
            _E,
        ),
        _f(
            "spectax_billing_up",
            "gauge",
            "1 when the last read of the billing source succeeded.",
            "source",
        ),
        _f(
            "spectax_billing_last_success_timestamp_seconds",
            "gauge",
            "Unix time of the last successful read of the billing source.",
            "source",
        ),
        _f(
            "spectax_billing_drift_ratio",
            "gauge",
            "(estimated - billed) / billed spend of the endpoints the billing source bills, over"
            " its last final period that spectax watched whole; positive: the estimate is high.",
            "source",
        ),
        _f(
            "spectax_store_pending_windows",
            "gauge",
            "Window rows closed but not yet written to the store (held while it is unreachable).",
        ),
        _f("spectax_store_write_errors_total", "counter", "Failed attempts to write to the store."),
        _f("spectax_store_up", "gauge", "1 when the last attempt to reach the store succeeded."),
        _f(
            "spectax_config_last_reload_successful",
            "gauge",
            "1 when the last configuration reload (SIGHUP or POST /-/reload) succeeded.",
        ),
        _f(
            "spectax_config_last_reload_success_timestamp_seconds",
            "gauge",
            "Unix time of the last successful configuration load (start-up or reload).",
        ),
        _f(
            "spectax_output_tokens_total",
            "counter",
            "Output tokens counted by spectax since it started (sums of engine deltas).",
            _E,
            _M,
        ),
        _f(
            "spectax_draft_tokens_total",
            "counter",
            "Draft tokens proposed, counted by spectax since it started.",
            _E,
            _M,
        ),
        _f(
            "spectax_accepted_tokens_total",
            "counter",
            "Draft tokens accepted, counted by spectax since it started.",
            _E,
            _M,
        ),
    )
}
LINE_TEMPLATES = {name: family.line_template for name, family in FAMILIES.items()}
HEADERS = {name: family.header.encode() for name, family in FAMILIES.items()}


class SnapshotCollector(Collector):
    """Yields fresh metric families from the snapshots `snapshots()` returns."""

    def __init__(
        self,
        snapshots: Callable[[], Mapping[str, EndpointSnapshot]],
        store_status: Callable[[], StoreStatus],
        reload_status: Callable[[], ReloadStatus] | None = None,
        billing: Callable[[], BillingSnapshot] | None = None,
    ):
        self._snapshots = snapshots
        self._store_status = store_status
        self._reload_status = reload_status
        self._billing = billing
        self._rendered: dict[str, tuple[EndpointSnapshot, dict[str, bytes]]] = {}
        self._last_body: tuple[tuple[str, list[EndpointSnapshot]] | None, bytes] = (None, b"")

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on the snapshot

    def collect(self) -> Iterator[Metric]:
        families = {name: _new(family) for name, family in FAMILIES.items()}

        def put(name: str, labels: tuple[str, ...], value: float | None) -> None:
            if value is not None and not math.isnan(value):
                families[name].add_metric(list(labels), value)

        self._process(put)
        for name, snap in sorted(self._snapshots().items()):
            _endpoint_samples(put, name, snap)
        yield from families.values()

    def render_text(self) -> bytes:
        """The text exposition (format 0.0.4) of what `collect()` yields, fast at fleet scale.

        Each endpoint's sample lines are formatted once per snapshot, when it
        changes (one scrape of that endpoint), and kept; a request only joins
        them under their families' headers; while nothing changed, requests get
        the same bytes. `collect()` stays the reference (OpenMetrics goes
        through it); tests check that both say the same.
        """
        process: dict[str, list[str]] = {}
        self._process(_line_writer(process))
        snapshots = sorted(self._snapshots().items())
        key = (repr(process), [snap for _, snap in snapshots])
        last_key, last_body = self._last_body
        if last_key is not None and last_key[0] == key[0] and _same(last_key[1], key[1]):
            return last_body
        del last_key, last_body
        fragments = [self._fragments(name, snap) for name, snap in snapshots]
        self._rendered = {
            name: self._rendered[name] for name, _ in snapshots if name in self._rendered
        }
        out: list[bytes] = []
        for family in FAMILIES.values():
            out.append(HEADERS[family.name])
            out.extend(line.encode() for line in process.get(family.name, ()))
            for fragment in fragments:
                lines = fragment.get(family.name)
                if lines is not None:
                    out.append(lines)
        self._last_body = (None, b"")  # the old body can go before the new one is joined
        body = b"".join(out)
        self._last_body = (key, body)
        return body

    def prerender(self, name: str, snap: EndpointSnapshot) -> None:
        """Format an endpoint's lines as soon as its snapshot changes, in the scrape that
        changed it, so that a request for /metrics only joins them: at 2,000 endpoints
        formatting them all takes about 250 ms, joining them about 20 ms."""
        self._fragments(name, snap)

    def _fragments(self, name: str, snap: EndpointSnapshot) -> dict[str, bytes]:
        """The endpoint's lines per family, encoded: a request joins bytes, no 6 MB str."""
        cached = self._rendered.get(name)
        if cached is not None and cached[0] is snap:
            return cached[1]
        lines: dict[str, list[str]] = {}
        _endpoint_samples(_line_writer(lines), name, snap)
        fragment = {family: "".join(text).encode() for family, text in lines.items()}
        self._rendered[name] = (snap, fragment)
        return fragment

    def _process(self, put: Put) -> None:
        """Samples about spectax itself rather than an endpoint."""
        put("spectax_build_info", (__version__, platform.python_version()), 1)
        store = self._store_status()
        put("spectax_store_pending_windows", (), float(store.pending_windows))
        put("spectax_store_write_errors_total", (), float(store.write_errors))
        put("spectax_store_up", (), float(store.up))
        if self._reload_status is not None:
            reload = self._reload_status()
            put("spectax_config_last_reload_successful", (), float(reload.successful))
            put(
                "spectax_config_last_reload_success_timestamp_seconds",
                (),
                reload.success_timestamp,
            )
        if self._billing is not None:
            _billing(put, self._billing())


Put = Callable[[str, tuple[str, ...], float | None], None]


def _billing(put: Put, billing: BillingSnapshot) -> None:
    for source in billing.sources:
        if source.up is not None:
            put("spectax_billing_up", (source.name,), float(source.up))
        put("spectax_billing_last_success_timestamp_seconds", (source.name,), source.last_success)
    for endpoint, amount in sorted(billing.billed_usd_total.items()):
        put("spectax_spend_usd_total", (endpoint, "billed"), float(amount))
    for source_name, ratio in sorted(billing.drift.items()):
        put("spectax_billing_drift_ratio", (source_name,), ratio)


def _endpoint_samples(put: Put, name: str, snap: EndpointSnapshot) -> None:
    _endpoint(put, name, snap)
    for model, assessment in sorted(snap.assessments.items()):
        _assessment(put, name, model, assessment, snap)


def _same(a: list[EndpointSnapshot], b: list[EndpointSnapshot]) -> bool:
    """The same snapshot objects (snapshots are replaced, never changed, so `is` suffices)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _line_writer(lines: dict[str, list[str]]) -> Put:
    """A `put` that formats exposition lines into `lines[family]`."""

    def put(name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is None or math.isnan(value):
            return
        line = LINE_TEMPLATES[name] % (*map(_escape, labels), _number(value))
        lines.setdefault(name, []).append(line)

    return put


def _number(value: float) -> str:
    """A sample value as the text format writes it (shortest round-trip repr, Go's infinities)."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    return repr(float(value))


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _endpoint(put: Callable[..., None], name: str, snap: EndpointSnapshot) -> None:
    cfg = snap.config
    spec = cfg.speculation
    put(
        "spectax_endpoint_info",
        (
            name,
            cfg.engine,
            cfg.gpu or "",
            str(cfg.gpus),
            spec.method if spec else "none",
            cfg.billing_mode,
        ),
        1,
    )
    put("spectax_endpoint_up", (name,), float(snap.up))
    put("spectax_engine_metrics_present", (name,), float(snap.engine_metrics))
    put("spectax_scrape_duration_seconds", (name,), snap.scrape_duration_seconds)
    put("spectax_last_scrape_success_timestamp_seconds", (name,), snap.last_success_timestamp)
    for reason in REASONS:
        put("spectax_scrape_failures_total", (name, reason), float(snap.failures.get(reason, 0)))
    put("spectax_acceptance_threshold_ratio", (name,), cfg.acceptance_threshold)
    if spec is not None:
        put("spectax_ridge_batch_requests", (name, snap.ridge_source), snap.ridge_batch)
    if snap.usd_per_hour is not None:
        put("spectax_gpu_cost_usd_per_hour", (name,), float(snap.usd_per_hour) * cfg.gpus)
        put("spectax_spend_usd_total", (name, "estimated"), float(snap.spend_usd_total))
    put("spectax_cold_starts_total", (name,), float(snap.cold_starts_total))
    put("spectax_cold_start_duration_seconds", (name,), snap.last_cold_start_seconds)
    if snap.usd_per_hour is not None and cfg.billing_mode == "serverless":
        put("spectax_cold_start_cost_usd_total", (name,), float(snap.cold_start_usd_total))
    for model, (output, drafted, accepted) in sorted(snap.tokens_total.items()):
        put("spectax_output_tokens_total", (name, model), output)
        if spec is not None:
            put("spectax_draft_tokens_total", (name, model), drafted)
            put("spectax_accepted_tokens_total", (name, model), accepted)


def _assessment(
    put: Callable[..., None], name: str, model: str, a: Assessment, snap: EndpointSnapshot
) -> None:
    em = (name, model)
    put("spectax_concurrency_requests", em, a.concurrency_requests)
    put("spectax_acceptance_ratio", em, a.acceptance_ratio)
    put("spectax_acceptance_length_tokens", em, a.acceptance_length_tokens)
    for position, ratio in enumerate(a.position_acceptance_ratio):
        put("spectax_position_acceptance_ratio", (*em, str(position)), ratio)
    put("spectax_breakeven_acceptance_ratio", em, a.breakeven_acceptance_ratio)
    put("spectax_speedup_ratio", (*em, "modeled"), a.speedup_ratio)
    put("spectax_speedup_ratio", (*em, "measured"), a.speedup_measured_ratio)
    put("spectax_crossover_concurrency_requests", em, a.crossover_concurrency_requests)
    rec = a.recommended_speculative_tokens
    put("spectax_recommended_speculative_tokens", em, None if rec is None else float(rec))
    put(
        "spectax_cost_per_million_output_tokens_usd",
        (*em, "actual"),
        a.cost_per_million_output_tokens_usd,
    )
    put(
        "spectax_cost_per_million_output_tokens_usd",
        (*em, "no_speculation"),
        a.cost_per_million_output_tokens_no_speculation_usd,
    )
    put("spectax_speculation_savings_usd_per_hour", em, a.per_hour(a.speculation_savings_usd))
    for kind, usd in (
        ("draft_compute", a.draft_compute_usd),
        ("rejected", a.rejected_usd),
        ("vram", a.vram_usd),
    ):
        put("spectax_draft_overhead_usd_per_hour", (*em, kind), a.per_hour(usd))


def _new(family: Family) -> CounterMetricFamily | GaugeMetricFamily:
    if family.kind == "counter":
        return CounterMetricFamily(family.name, family.help, labels=list(family.labels))
    return GaugeMetricFamily(family.name, family.help, labels=list(family.labels))
