"""SQLAlchemy models. Money is stored as integer nano-dollars: exact sums on every backend."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.schema import UniqueConstraint

from spectax.units import NANO, utc


class Money(TypeDecorator[Decimal]):
    """A Decimal amount of USD kept as an integer count of nano-dollars.

    SQLite has no decimal type; integers are exact everywhere, so sums done
    by the database are exact too.
    """

    impl = BigInteger
    cache_ok = True

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> int | None:
        if value is None:
            return None
        return int(value.quantize(NANO).scaleb(9))

    def process_result_value(self, value: Any, dialect: Dialect) -> Decimal | None:
        if value is None:
            return None
        return Decimal(int(value)).scaleb(-9)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: store UTC with tzinfo")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return utc(value)


class Base(DeclarativeBase):
    pass


class Sums:
    """Columns that add up: a window's counter deltas and money, or a rollup's sums of them.

    Ratios are never stored here; they are recomputed from these sums.
    """

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    start: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    end: Mapped[datetime] = mapped_column(UtcDateTime)
    seconds: Mapped[float] = mapped_column(Float)
    busy_seconds: Mapped[float] = mapped_column(Float)
    restarts: Mapped[int] = mapped_column(Integer)
    # Of those restarts, the seconds no scrape could see the old process (0011): from its
    # last scrape to the new process's start; NULL on rows written before, "not recorded".
    unobserved_seconds: Mapped[float | None] = mapped_column(Float)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    requests_finished: Mapped[int] = mapped_column(BigInteger)
    drafts: Mapped[int | None] = mapped_column(BigInteger)
    draft_tokens: Mapped[int | None] = mapped_column(BigInteger)
    accepted_tokens: Mapped[int | None] = mapped_column(BigInteger)
    accepted_per_position: Mapped[str] = mapped_column(Text, default="[]")
    running_seconds: Mapped[float] = mapped_column(Float)
    iteration_tokens_sum: Mapped[float | None] = mapped_column(Float)
    iteration_tokens_count: Mapped[float | None] = mapped_column(Float)
    inter_token_latency_sum: Mapped[float | None] = mapped_column(Float)
    inter_token_latency_count: Mapped[float | None] = mapped_column(Float)
    time_per_output_token_sum: Mapped[float | None] = mapped_column(Float)
    time_per_output_token_count: Mapped[float | None] = mapped_column(Float)
    time_to_first_token_sum: Mapped[float | None] = mapped_column(Float)
    time_to_first_token_count: Mapped[float | None] = mapped_column(Float)
    e2e_request_latency_sum: Mapped[float | None] = mapped_column(Float)
    e2e_request_latency_count: Mapped[float | None] = mapped_column(Float)
    # Each histogram's bucket deltas, JSON [[le, count], ...] (store.rows); NULL or [] when
    # unknown. Summed by the rollups, so a quantile stays computable per hour and day.
    iteration_tokens_buckets: Mapped[str | None] = mapped_column(Text)
    inter_token_latency_buckets: Mapped[str | None] = mapped_column(Text)
    time_per_output_token_buckets: Mapped[str | None] = mapped_column(Text)
    time_to_first_token_buckets: Mapped[str | None] = mapped_column(Text)
    e2e_request_latency_buckets: Mapped[str | None] = mapped_column(Text)
    # vLLM's estimates per GPU (--enable-mfu-metrics; 0 without): floats, they pass 2**53.
    estimated_flops: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    estimated_read_bytes: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # The KV cache (0008): preemptions counted, waiting requests and usage integrated over
    # time like running_seconds, the engine's blocks, block size and bytes as of the end.
    preemptions: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    waiting_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    kv_usage_seconds: Mapped[float | None] = mapped_column(Float)
    kv_cache_blocks: Mapped[float | None] = mapped_column(Float)
    kv_block_size: Mapped[float | None] = mapped_column(Float)
    kv_cache_bytes: Mapped[float | None] = mapped_column(Float)
    spend_usd: Mapped[Decimal | None] = mapped_column(Money)
    busy_spend_usd: Mapped[Decimal | None] = mapped_column(Money)
    cold_start_usd: Mapped[Decimal | None] = mapped_column(Money)
    draft_load_usd: Mapped[Decimal | None] = mapped_column(Money)
    speculation_savings_usd: Mapped[float | None] = mapped_column(Float)
    # What the window's assessment concluded, as numerators and denominators that add up
    # (0009): the report sums them rather than judging an hour again with other parameters.
    # plain_busy_seconds is busy_seconds x the speedup in force (the busy time the same
    # output would have taken without speculation), NULL when there was none; and
    # assessed_busy_seconds the busy seconds it divides (busy_seconds, or 0 without a
    # speedup), never NULL once recorded: NULL on all four says "written before 0009".
    plain_busy_seconds: Mapped[float | None] = mapped_column(Float)
    assessed_busy_seconds: Mapped[float | None] = mapped_column(Float)
    draft_compute_usd: Mapped[float | None] = mapped_column(Float)
    rejected_usd: Mapped[float | None] = mapped_column(Float)
    draft_cost_ratio: Mapped[float | None] = mapped_column(Float)
    ridge_batch_requests: Mapped[float] = mapped_column(Float)


class WindowRow(Sums, Base):
    """One closed (or, after a graceful stop, partial) window of one endpoint and model.

    Keyed by (endpoint, model, start): writing the same window again replaces
    it, so retries and restarts never count it twice. Window-level figures
    (seconds, busy_seconds, restarts) repeat on each model's row; money is
    split between models by output tokens. Spend includes serverless
    cold-start cost, which cold_start_usd also shows on its own.
    """

    __tablename__ = "windows"
    __table_args__ = (
        UniqueConstraint("endpoint", "model", "start", name="uq_window"),
        # a restart's choice of each endpoint's latest windows, and their rows (0013)
        Index("ix_windows_endpoint_start", "endpoint", "start"),
    )

    # The assessment of this window, as computed when it was written.
    concurrency_requests: Mapped[float] = mapped_column(Float)
    acceptance_ratio: Mapped[float | None] = mapped_column(Float)
    breakeven_acceptance_ratio: Mapped[float | None] = mapped_column(Float)
    speedup_ratio: Mapped[float | None] = mapped_column(Float)
    ridge_batch_source: Mapped[str] = mapped_column(String(16), default="configured")
    verdict: Mapped[str] = mapped_column(String(16))
    # How the verdict was reached (ECONOMICS.md §3b): the speedup's band, the step overhead
    # in force, and the basis (measured, calibrated, profile or default). NULL before 0004.
    speedup_low_ratio: Mapped[float | None] = mapped_column(Float)
    speedup_high_ratio: Mapped[float | None] = mapped_column(Float)
    step_overhead_ratio: Mapped[float | None] = mapped_column(Float)
    verdict_basis: Mapped[str | None] = mapped_column(String(16))


class VerdictCounts:
    """How a rollup's windows were judged: the daemon's verdicts and their bases, counted.

    Counts add up, so an hour's are its windows' and a day's its hours'; a month's report
    beyond the windows' retention reads them instead of recomputing a verdict from sums
    (which would have neither the band nor the basis the daemon used). The source, band
    and step overhead are the latest window's (what was in force at the period's end).
    All NULL on rows rolled up before migration 0005: not recorded.
    """

    windows_pays: Mapped[int | None] = mapped_column(Integer)
    windows_tax: Mapped[int | None] = mapped_column(Integer)
    windows_uncertain: Mapped[int | None] = mapped_column(Integer)
    windows_basis_measured: Mapped[int | None] = mapped_column(Integer)
    windows_basis_calibrated: Mapped[int | None] = mapped_column(Integer)
    windows_basis_profile: Mapped[int | None] = mapped_column(Integer)
    windows_basis_default: Mapped[int | None] = mapped_column(Integer)
    ridge_batch_source: Mapped[str | None] = mapped_column(String(16))
    speedup_low_ratio: Mapped[float | None] = mapped_column(Float)
    speedup_high_ratio: Mapped[float | None] = mapped_column(Float)
    step_overhead_ratio: Mapped[float | None] = mapped_column(Float)


class HourlyRow(Sums, VerdictCounts, Base):
    """Windows summed per endpoint, model and hour. `windows` counts the windows summed;
    draft_cost_ratio and ridge_batch_requests are the last window's (parameters, not sums)."""

    __tablename__ = "rollup_hourly"
    __table_args__ = (UniqueConstraint("endpoint", "model", "start", name="uq_rollup_hourly"),)

    windows: Mapped[int] = mapped_column(Integer)


class DailyRow(Sums, VerdictCounts, Base):
    """Hourly rows summed per endpoint, model and UTC day."""

    __tablename__ = "rollup_daily"
    __table_args__ = (UniqueConstraint("endpoint", "model", "start", name="uq_rollup_daily"),)

    windows: Mapped[int] = mapped_column(Integer)


class LoadBinRow(Base):
    """One hour of one endpoint and model's windows, binned by their mean running requests
    (`load_curve.bin_edge`) and split by verdict basis and whether drafted tokens were
    counted: the sums the load curve adds up (`store.load_history.load_bin_rows`).

    An hourly row sums the hour at its mean load, which blurs an hour that ran at 4 and 64
    requests into one point at 34; these keep each window in its own bin for as long as the
    hourly rows are kept (`retention.hourly`), past the windows' 14 days. Written with the
    hour's hourly rows, from the same windows (store.rollup). `edge` is the bin's lower edge;
    the sums are those of the hour's windows, the band's as busy time times each end (with
    how many assessed windows had no end), the per-position counts summed, B* and c the
    newest window's (parameters, not sums). Model "" (a page that served none) has none.
    """

    __tablename__ = "rollup_load_bins"
    __table_args__ = (Index("ix_rollup_load_bins_endpoint_start", "endpoint", "start"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(256))
    start: Mapped[datetime] = mapped_column(UtcDateTime, index=True)  # the hour
    edge: Mapped[int] = mapped_column(Integer)
    verdict_basis: Mapped[str | None] = mapped_column(String(16))
    drafted: Mapped[bool] = mapped_column(Boolean)
    windows: Mapped[int] = mapped_column(Integer)
    end: Mapped[datetime] = mapped_column(UtcDateTime)  # the newest window's end
    seconds: Mapped[float] = mapped_column(Float)
    running_seconds: Mapped[float] = mapped_column(Float)  # mean running requests x seconds
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    drafts: Mapped[int | None] = mapped_column(BigInteger)
    draft_tokens: Mapped[int | None] = mapped_column(BigInteger)
    accepted_tokens: Mapped[int | None] = mapped_column(BigInteger)
    accepted_per_position: Mapped[str] = mapped_column(Text, default="[]")
    plain_busy_seconds: Mapped[float | None] = mapped_column(Float)
    assessed_busy_seconds: Mapped[float | None] = mapped_column(Float)
    low_busy_seconds: Mapped[float | None] = mapped_column(Float)
    high_busy_seconds: Mapped[float | None] = mapped_column(Float)
    low_missing: Mapped[int] = mapped_column(Integer)
    high_missing: Mapped[int] = mapped_column(Integer)
    savings_usd: Mapped[float | None] = mapped_column(Float)
    busy_usd: Mapped[Decimal | None] = mapped_column(Money)
    ridge_batch_requests: Mapped[float] = mapped_column(Float)
    draft_cost_ratio: Mapped[float | None] = mapped_column(Float)


Granularity = Literal["window", "hour", "day"]
#: The table that holds each granularity of history.
TABLES: dict[str, type[Sums]] = {"window": WindowRow, "hour": HourlyRow, "day": DailyRow}


class RollupDue(Base):
    """A period whose rollup must be (re)computed: marked in the same transaction as the
    rows that changed it. `version` grows with every mark, so a rollup that read an older
    version does not clear a mark made while it ran."""

    __tablename__ = "rollup_due"

    granularity: Mapped[str] = mapped_column(String(8), primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(64), primary_key=True)
    start: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=1)


class Cursor(Base):
    """The last engine sample whose deltas are in the store, per endpoint.

    Written in the same transaction as the windows it closes, so after a crash
    the next scrape's delta from here covers exactly what is missing.
    """

    __tablename__ = "cursors"

    endpoint: Mapped[str] = mapped_column(String(64), primary_key=True)
    observed_at: Mapped[float] = mapped_column(Float)
    sample: Mapped[str] = mapped_column(Text)


class BillingLineRow(Base):
    """One line of a bill (see spectax.billing.types.BillingLine), of a configured endpoint.

    Keyed by (source, resource, start, end): a revised line replaces its earlier value,
    so it is never counted twice. `amount` is exact (nano-units of `currency`, signed:
    credits are negative).
    """

    __tablename__ = "billing_lines"
    __table_args__ = (
        UniqueConstraint("source", "resource", "start", "end", name="uq_billing_line"),
        Index("ix_billing_lines_endpoint_start", "endpoint", "start"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(64))
    resource: Mapped[str] = mapped_column(String(512))
    endpoint: Mapped[str | None] = mapped_column(String(64))
    start: Mapped[datetime] = mapped_column(UtcDateTime)
    end: Mapped[datetime] = mapped_column(UtcDateTime)
    amount: Mapped[Decimal] = mapped_column(Money)
    currency: Mapped[str] = mapped_column(String(8))
    final: Mapped[bool] = mapped_column(Boolean)
    fetched_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BillingPeriodRow(Base):
    """A span a billing source answered for completely, for one endpoint it bills: no line
    in it means nothing was billed. `final` once the provider says the span is final."""

    __tablename__ = "billing_periods"

    source: Mapped[str] = mapped_column(String(64), primary_key=True)
    endpoint: Mapped[str] = mapped_column(String(64), primary_key=True)
    start: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    end: Mapped[datetime] = mapped_column(UtcDateTime, primary_key=True)
    final: Mapped[bool] = mapped_column(Boolean)
    fetched_at: Mapped[datetime] = mapped_column(UtcDateTime)


class BillingPollRow(Base):
    """When each billing source was last read, and last read successfully: a restart does
    not read a paid API again before its interval, and the gauges carry on."""

    __tablename__ = "billing_polls"

    source: Mapped[str] = mapped_column(String(64), primary_key=True)
    attempted_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    succeeded_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    ok: Mapped[bool] = mapped_column(Boolean)


class ProfileRow(Base):
    """A named step-time profile (spectax.economics.Profile): learned from an endpoint that
    has a control, or fitted to a benchmark sweep by `spectax model fit --save-profile`."""

    __tablename__ = "model_profiles"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    source: Mapped[str] = mapped_column(String(16))
    learned_from: Mapped[str] = mapped_column(String(512))
    ridge_batch_requests: Mapped[float] = mapped_column(Float)
    step_overhead_ratio: Mapped[float] = mapped_column(Float)
    draft_cost_ratio: Mapped[float | None] = mapped_column(Float)
    plain_fixed_seconds: Mapped[float | None] = mapped_column(Float)
    plain_per_token_seconds: Mapped[float | None] = mapped_column(Float)
    # the plain curve's own spread (10th and 90th percentile of relative residuals): the band
    plain_residual_low: Mapped[float | None] = mapped_column(Float)
    plain_residual_high: Mapped[float | None] = mapped_column(Float)
    points: Mapped[int] = mapped_column(Integer)
    mean_abs_error_ratio: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime)
    # the speculative method it was learned with (0010); NULL: not recorded
    method: Mapped[str | None] = mapped_column(String(32))
