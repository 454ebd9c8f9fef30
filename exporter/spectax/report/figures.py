"""The report's figures: additive sums over a span, every ratio recomputed from them.

Nothing here averages a ratio: every ratio (cost per million, acceptance,
concurrency, break-even, speedup) is recomputed from the sums of the span it
describes, whether that span is an hour, a day, a month, an endpoint or the
whole fleet. `spectax.report.endpoint_day` fills them from the stored rows.
What the daemon concluded about each window (its speedup, as the busy time without
speculation over the busy time; its net savings; its draft overhead in dollars) is
summed as it was stored, never recomputed from counters with other parameters.

Verdicts are not recomputed: the daemon judged each window with the band and
basis of its counterfactual (ECONOMICS.md §3b), which an hour's sums do not
hold, and the rollups count its verdicts and bases. The report adds those
counts up; only rows rolled up before the store counted them (migration 0005)
fall back to a verdict from their windows' own speedup, and say their basis was
not recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Literal

from spectax import economics
from spectax.economics.load_curve import LoadCurve, LoadSample, load_curve
from spectax.economics.step_model import BASES, Basis
from spectax.report.spend import combined_basis

SEMANTICS = {"provisioned": "capacity", "serverless": "invoice"}


HourVerdict = Literal["pays", "tax", "uncertain", "no_traffic"]
SpanVerdict = Literal["pays", "tax", "uncertain", "mixed"]
Judged = Literal["pays", "tax", "uncertain"]
NOT_RECORDED = "basis not recorded"


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """What the configuration says about an endpoint (defaults when it is not configured)."""

    name: str
    configured: bool = False
    billing_mode: str | None = None
    method: str | None = None
    draft_weight_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    control: str | None = None
    engine: str = "vllm"

    @property
    def semantics(self) -> str:
        """What speculation's savings are: `capacity` freed, `invoice` money, or `unknown`."""
        return SEMANTICS.get(self.billing_mode or "", "unknown")

    @property
    def vram_fraction(self) -> float | None:
        """Share of GPU memory the draft's weights hold, when both sizes are configured."""
        if not self.draft_weight_bytes or not self.gpu_memory_bytes:
            return None
        return self.draft_weight_bytes / self.gpu_memory_bytes


def majority(pays: int, tax: int, uncertain: int) -> Judged | None:
    """What most of a span's judged windows were: pays or tax when more than half say so,
    else uncertain; None when none was judged. The one rule for an hour, a day's chart
    shading, a month's savings bar and its recommendations, so that they agree."""
    if pays + tax + uncertain <= 0:
        return None
    if pays > tax + uncertain:
        return "pays"
    return "tax" if tax > pays + uncertain else "uncertain"


@dataclass(frozen=True, slots=True, kw_only=True)
class HourPoint:
    """One hour of one speculating model: its counters, and what its windows concluded, summed
    (their verdicts counted, their speedup and net savings, the step overhead h and B* they
    were assessed with): the recommendations' what-ifs start from these, never from a
    speedup recomputed with other parameters."""

    endpoint: str
    model: str
    start: datetime
    output_tokens: int
    accepted_tokens: int
    draft_tokens: int
    drafts: int
    positions: tuple[int, ...]
    seconds: float
    concurrency: float
    ridge_batch: float
    draft_cost_ratio: float
    busy_usd: float | None  # scaled to the day's spend basis; None when unpriced
    draft_load_usd: float
    speedup: float | None  # the windows' own (sum of plain busy time / busy time); None: none
    judged: tuple[int, int, int] | None = None  # windows (pays, tax, uncertain); None: unknown
    savings_usd: float | None = None  # the windows' net savings, scaled; None: unpriced
    step_overhead: float | None = None  # h of the hour's latest window; None: not recorded
    #: The busy seconds the hour's speedup divides, the band of its latest window and the
    #: weakest basis its windows were judged on (None: not recorded): its load curve sample.
    assessed_busy_seconds: float | None = None
    speedup_band: tuple[float, float] | None = None
    basis: Basis | None = None
    #: The hour's windows binned by load (the store's `rollup_load_bins`, money scaled like
    #: the hour's), () when the store has none for it: see `load_samples`.
    bins: tuple[LoadSample, ...] = ()

    @property
    def drafting(self) -> bool:
        return self.output_tokens > 0 and self.draft_tokens > 0

    @property
    def verdict(self) -> HourVerdict:
        """pays | tax | uncertain | no_traffic: what most of the hour's windows were judged.

        The daemon's verdicts, counted by the rollup (`majority`). An hour rolled up before
        they were counted gets §3's rule on its windows' own speedup (pays iff S > 1), and is
        uncertain when that was not recorded either: never judged again from its counters.
        An hour point is of a speculating model, so never `no_speculation`.
        """
        if self.output_tokens <= 0:
            return "no_traffic"
        counted = majority(*self.judged) if self.judged is not None else None
        if counted is not None:
            return counted
        if self.speedup is None:
            return "uncertain"
        return "pays" if self.speedup > 1.0 else "tax"

    @property
    def gains(self) -> bool:
        """The windows' point estimate (their speedup in force) says speculation paid."""
        return self.speedup is not None and self.speedup > 1.0

    @property
    def acceptance(self) -> float | None:
        if not self.drafting:
            return None
        return economics.acceptance_ratio(self.accepted_tokens, self.draft_tokens)

    @property
    def steps_per_draft_token(self) -> float:
        """q = (G - A)/Dt, request-steps per draft token (break-even's h term, §3b)."""
        return (self.output_tokens - self.accepted_tokens) / self.draft_tokens

    @property
    def breakeven(self) -> float | None:
        """alpha* at the hour's concurrency with the h and B* its windows were assessed with;
        None when h was not recorded (never h = 0 in its place)."""
        if not self.drafting or self.step_overhead is None:
            return None
        return economics.breakeven_acceptance(
            self.concurrency,
            self.ridge_batch,
            self.draft_cost_ratio,
            self.step_overhead,
            self.steps_per_draft_token,
        )

    @property
    def relative_batch(self) -> float:
        return economics.relative_batch(self.ridge_batch, self.concurrency)

    def load_samples(self) -> tuple[LoadSample, ...]:
        """The hour's points of the load curve: its windows, each in its own load bin, as
        the daemon bins them (`rollup_load_bins`); else, for an hour rolled up before the
        store kept bins (migration 0012) or whose windows retention had cut into when it
        came, the hour as one point at its mean load (`load_sample`), which puts an hour
        that ran at 4 and at 64 requests at 34."""
        return self.bins or (self.load_sample(),)

    def load_sample(self) -> LoadSample:
        """The hour as one point of the load curve (`economics.load_curve`), at its mean
        running requests. An hourly row keeps its latest window's band, not each window's:
        the band is that one, widened to hold the hour's own speedup. Its evidence is the
        windows judged in it (1 when not counted: then a bin of few hours says it is thin)."""
        busy = self.assessed_busy_seconds or 0.0
        s = self.speedup
        low = high = None
        if s is not None and self.speedup_band is not None:
            low, high = min(self.speedup_band[0], s) * busy, max(self.speedup_band[1], s) * busy
        return LoadSample(
            end=self.start.timestamp() + self.seconds,
            seconds=self.seconds,
            concurrency=self.concurrency,
            windows=sum(self.judged) if self.judged else 1,
            output_tokens=self.output_tokens,
            drafts=self.drafts,
            draft_tokens=self.draft_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=tuple(float(a) for a in self.positions),
            plain_busy_seconds=s * busy if s is not None else None,
            assessed_busy_seconds=busy if s is not None else 0.0,
            low_busy_seconds=low,
            high_busy_seconds=high,
            basis=self.basis,
            savings_usd=self.savings_usd,
            busy_usd=self.busy_usd,
            ridge_batch=self.ridge_batch,
            draft_cost_ratio=self.draft_cost_ratio,
        )


@dataclass(slots=True)
class Figures:
    """Additive sums over a span (an endpoint-day, a month, the fleet), ratios derived on read."""

    priced: bool = False
    spend: Decimal = Decimal(0)  # on the reported basis
    estimated_spend: Decimal = Decimal(0)
    bases: set[str] = field(default_factory=set)
    busy_spend: Decimal = Decimal(0)
    output_tokens: int = 0
    priced_output_tokens: int = 0  # of the days with a spend: what cost per million divides
    prompt_tokens: int = 0
    speculating: bool = False
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    # Accepted tokens of the rows with a drafted count: SGLang and TGI speculate without
    # one, so their accepted tokens give an acceptance length but no acceptance ratio.
    drafted_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    running_seconds: float = 0.0  # of the speculating models' rows (all models' when none)
    model_seconds: float = 0.0
    savings_by: dict[str, float] = field(default_factory=dict)  # semantics -> net savings
    kinds: set[str] = field(default_factory=set)  # the semantics of the endpoints summed
    cold_starts: int = 0
    unobserved_seconds: float = 0.0  # across those restarts, what no scrape saw (0011)
    cold_start_usd: Decimal = Decimal(0)
    draft_load_usd: Decimal = Decimal(0)
    overhead_priced: bool = False
    draft_compute_usd: float = 0.0  # the windows' own (Assessment.draft_compute_usd), summed
    rejected_usd: float = 0.0
    # The windows' speedup as a ratio of sums: busy time without speculation over busy time
    # (of the windows that had a speedup); windows rolled up before 0009 are not recorded.
    plain_busy_seconds: float = 0.0
    assessed_busy_seconds: float = 0.0
    windows_assessment_unrecorded: int = 0
    vram_usd: float | None = None
    # The daemon's verdicts of the speculating models' windows, and their bases.
    windows_pays: int = 0
    windows_tax: int = 0
    windows_uncertain: int = 0
    windows_unrecorded: int = 0  # in rows rolled up before the verdicts were counted
    basis_windows: dict[str, int] = field(default_factory=dict)
    hours_monitored: int = 0
    days_monitored: int = 0
    draft_cost_ratio: float | None = None  # the latest in the span (a parameter, not a sum)
    ridge_batch: float | None = None
    model_source: str | None = None  # the counterfactual's source, band and h, latest too
    speedup_band: tuple[float, float] | None = None
    step_overhead: float | None = None
    parameters_at: datetime | None = None
    single_endpoint: bool = True  # False once endpoints are added up: no break-even then

    # ------------------------------------------------------------ derived

    @property
    def basis(self) -> str:
        return combined_basis(self.bases)

    @property
    def mixed(self) -> bool:
        """Endpoints of two kinds summed: invoice money and freed capacity, never added up."""
        return len(self.kinds) > 1

    @property
    def savings(self) -> float | None:
        """Net savings (negative: tax) of one kind; None without drafts or price, or when mixed.

        Serverless savings are money off the invoice, provisioned ones GPU time freed that is
        money only if replicas are scaled down: a sum of the two is neither (issue 17, #3).
        """
        if self.mixed or not self.savings_by:
            return None
        return sum(self.savings_by.values())

    @property
    def cost_per_million(self) -> float | None:
        if not self.priced:
            return None
        return economics.cost_per_million(float(self.spend), self.priced_output_tokens)

    @property
    def cost_per_million_without_speculation(self) -> float | None:
        """($ + net savings) / G x 1e6: the same output without speculation (ECONOMICS.md §4).

        None when mixed: spend plus savings of one kind over tokens of both would mix them too.
        """
        savings = self.savings
        if not self.priced or savings is None:
            return None
        return economics.cost_per_million(float(self.spend) + savings, self.priced_output_tokens)

    @property
    def acceptance(self) -> float | None:
        """Token-weighted acceptance over the span: sum A / sum Dt, of the rows with a
        drafted count (None when none has one: SGLang, TGI)."""
        if not self.speculating or self.output_tokens <= 0 or self.draft_tokens <= 0:
            return None
        return economics.acceptance_ratio(self.drafted_accepted_tokens, self.draft_tokens)

    @property
    def acceptance_length(self) -> float | None:
        """Tokens per verify step over the span: 1 + sum A / sum drafts (every engine that
        speculates counts its drafts, exactly or derived)."""
        if not self.speculating or self.output_tokens <= 0 or self.drafts <= 0:
            return None
        return economics.acceptance_length(self.accepted_tokens, self.drafts)

    @property
    def position_acceptance(self) -> tuple[float, ...]:
        return economics.position_acceptance(self.accepted_per_position, self.drafts)

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    @property
    def concurrency(self) -> float | None:
        if self.model_seconds <= 0:
            return None
        return self.running_seconds / self.model_seconds

    @property
    def breakeven(self) -> float | None:
        """alpha* at the span's mean concurrency, with the latest c, B* and h the windows were
        assessed with, and the span's steps per draft token (one endpoint only). None when
        h was not recorded: a break-even at h = 0 would not be the daemon's."""
        b = self.concurrency
        if (
            not self.single_endpoint
            or not self.speculating
            or b is None
            or self.ridge_batch is None
            or self.draft_cost_ratio is None
            or self.step_overhead is None
            or self.draft_tokens <= 0
        ):
            return None
        steps = (self.output_tokens - self.drafted_accepted_tokens) / self.draft_tokens
        return economics.breakeven_acceptance(
            b, self.ridge_batch, self.draft_cost_ratio, self.step_overhead, steps
        )

    @property
    def speedup(self) -> float | None:
        """The windows' own speedup over the span: the busy time their output would have
        taken without speculation over the busy time it took (a ratio of sums)."""
        if not self.speculating or self.assessed_busy_seconds <= 0:
            return None
        return self.plain_busy_seconds / self.assessed_busy_seconds

    @property
    def verdict(self) -> SpanVerdict | None:
        """What most of the span's judged windows were: pays, tax or uncertain when more than
        half say so, mixed when none has half; None when none was judged. The one reading of
        the counts that the chart shading, the savings and the recommendations share."""
        pays, tax, uncertain = self.windows_pays, self.windows_tax, self.windows_uncertain
        if uncertain > pays + tax:
            return "uncertain"
        counted = majority(pays, tax, uncertain)
        return "mixed" if counted == "uncertain" else counted

    @property
    def windows_judged(self) -> int:
        """Windows the daemon gave a verdict (pays, tax or uncertain) that the store counted."""
        return self.windows_pays + self.windows_tax + self.windows_uncertain

    @property
    def share_paid(self) -> float | None:
        n = self.windows_judged
        return self.windows_pays / n if n else None

    @property
    def share_tax(self) -> float | None:
        n = self.windows_judged
        return self.windows_tax / n if n else None

    @property
    def share_uncertain(self) -> float | None:
        n = self.windows_judged
        return self.windows_uncertain / n if n else None

    @property
    def basis_unrecorded(self) -> int:
        """Judged windows whose basis was not recorded (written before migration 0004), plus
        the windows whose verdict was not counted either (rolled up before 0005)."""
        recorded = sum(self.basis_windows.values())
        return max(self.windows_judged - recorded, 0) + self.windows_unrecorded

    @property
    def draft_compute(self) -> float | None:
        """GPU time spent drafting, valued: capacity or invoice money, so one kind only."""
        return self.draft_compute_usd if self.overhead_priced and not self.mixed else None

    @property
    def rejected(self) -> float | None:
        return self.rejected_usd if self.overhead_priced and not self.mixed else None

    @property
    def draft_vram(self) -> float | None:
        return None if self.mixed else self.vram_usd

    @property
    def empty(self) -> bool:
        return self.hours_monitored == 0 and self.days_monitored == 0

    # ------------------------------------------------------------ adding up

    def add(self, other: Figures, same_endpoint: bool = True) -> None:
        self.priced = self.priced or other.priced
        self.spend += other.spend
        self.estimated_spend += other.estimated_spend
        self.bases |= other.bases
        self.busy_spend += other.busy_spend
        self.output_tokens += other.output_tokens
        self.priced_output_tokens += other.priced_output_tokens
        self.prompt_tokens += other.prompt_tokens
        self.speculating = self.speculating or other.speculating
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted_tokens += other.accepted_tokens
        self.drafted_accepted_tokens += other.drafted_accepted_tokens
        self.accepted_per_position = add_positions(
            self.accepted_per_position, other.accepted_per_position
        )
        self.running_seconds += other.running_seconds
        self.model_seconds += other.model_seconds
        for key, value in other.savings_by.items():
            self.savings_by[key] = self.savings_by.get(key, 0.0) + value
        self.kinds |= other.kinds
        self.cold_starts += other.cold_starts
        self.unobserved_seconds += other.unobserved_seconds
        self.cold_start_usd += other.cold_start_usd
        self.draft_load_usd += other.draft_load_usd
        self.overhead_priced = self.overhead_priced or other.overhead_priced
        self.draft_compute_usd += other.draft_compute_usd
        self.rejected_usd += other.rejected_usd
        self.plain_busy_seconds += other.plain_busy_seconds
        self.assessed_busy_seconds += other.assessed_busy_seconds
        self.windows_assessment_unrecorded += other.windows_assessment_unrecorded
        if other.vram_usd is not None:
            self.vram_usd = (self.vram_usd or 0.0) + other.vram_usd
        self.windows_pays += other.windows_pays
        self.windows_tax += other.windows_tax
        self.windows_uncertain += other.windows_uncertain
        self.windows_unrecorded += other.windows_unrecorded
        for basis, n in other.basis_windows.items():
            self.basis_windows[basis] = self.basis_windows.get(basis, 0) + n
        self.hours_monitored += other.hours_monitored
        self.days_monitored += other.days_monitored
        if not same_endpoint:
            self.single_endpoint = False
        if other.parameters_at is not None and (
            self.parameters_at is None or other.parameters_at >= self.parameters_at
        ):
            self.parameters_at = other.parameters_at
            self.draft_cost_ratio = other.draft_cost_ratio
            self.ridge_batch = other.ridge_batch
            self.model_source = other.model_source
            self.speedup_band = other.speedup_band
            self.step_overhead = other.step_overhead


def basis_text(f: Figures) -> str:
    """The bases of the daemon's verdicts as shares of the windows, e.g. "calibrated 90.0%,
    default 10.0%"; windows stored before the basis was (migrations 0004, 0005) are named
    as such, never given a basis they did not have."""
    counts = [(b, f.basis_windows.get(b, 0)) for b in BASES]
    total = sum(n for _, n in counts) + f.basis_unrecorded
    if not f.speculating or total == 0:
        return "—"
    if f.basis_unrecorded == total:
        return NOT_RECORDED
    parts = [f"{b} {100 * n / total:.1f}%" for b, n in counts if n]
    if f.basis_unrecorded:
        parts.append(f"not recorded {100 * f.basis_unrecorded / total:.1f}%")
    return ", ".join(parts)


def verdicts_line(month: Figures) -> str:
    """The daemon's verdicts over the month, with how they were reached."""
    basis = f"basis: {basis_text(month)}"
    if not month.windows_judged:
        return f"No window's verdict was recorded this month ({basis})."
    return (
        f"Speculation paid in {month.windows_pays:,} of {month.windows_judged:,} windows judged, "
        f"was a tax in {month.windows_tax:,} and uncertain in {month.windows_uncertain:,} "
        f"({basis})."
    )


def with_bins(
    hours: Sequence[HourPoint],
    bins: Mapping[tuple[str, datetime], Sequence[LoadSample]],
    ratio: float,
) -> list[HourPoint]:
    """The hours with their windows' load bins (by model and hour), whose money is scaled by
    the day's `ratio` (billed over estimated spend) as the hour's own is."""
    return [
        replace(h, bins=tuple(_scaled(s, ratio) for s in found))
        if (found := bins.get((h.model, h.start)))
        else h
        for h in hours
    ]


def _scaled(sample: LoadSample, ratio: float) -> LoadSample:
    if ratio == 1.0:
        return sample
    return replace(
        sample,
        savings_usd=sample.savings_usd * ratio if sample.savings_usd is not None else None,
        busy_usd=sample.busy_usd * ratio if sample.busy_usd is not None else None,
    )


def total(figures: Iterable[Figures]) -> Figures:
    """The sum over several endpoints (break-even is not defined for a sum of endpoints)."""
    result = Figures(single_endpoint=False)
    for f in figures:
        result.add(f, same_endpoint=False)
    return result


def add_positions(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Accepted drafts per position, added position by position (the shorter padded with 0)."""
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (int(b[i]) if i < len(b) else 0) for i in range(n)]


def month_curve(hours: Iterable[HourPoint]) -> LoadCurve | None:
    """One endpoint's month as a load curve: every hour's windows binned by load
    (`HourPoint.load_samples`), the hours that drafted nothing included (idle, or under a K
    schedule's K = 0): their time is time spent at that load, as the daemon's curve counts
    it (`curve_book`). None when no hour drafted: a model that never speculated has no
    curve, on /metrics either. The load curve table and the schedule advice both read it."""
    hours = list(hours)
    if not any(h.drafting for h in hours):
        return None
    return load_curve(s for h in hours for s in h.load_samples())
