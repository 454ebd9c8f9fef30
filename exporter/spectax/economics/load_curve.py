"""The endpoint's own load curve: its speedup, acceptance and money against running requests.

Speculation pays at low load and taxes a saturated GPU (docs/economics.md, "Break-even,
crossover and the draft length"); one endpoint is both as its traffic moves. The curve bins
one endpoint and model's assessed windows by their mean running requests and sums, per bin,
what the assessments concluded: the speedup as the report sums it (busy time without
speculation over busy time, never a mean of ratios), acceptance and per-position acceptance
(summed counts), the share of the time spent there and the savings. The crossover is the bin
from which it stops paying; `economics.draft_schedule` turns the curve into a K per batch.

Pure: windows in, values out, no clock and no I/O (issue 34).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from spectax.economics.assessment import AssessedWindow
from spectax.economics.formulas import acceptance_ratio, position_acceptance
from spectax.economics.step_model import BASES, Basis, verdict_of_band

#: The bins' lower edges in running requests; a bin holds [edge, next edge), the last one
#: [256, inf). Powers of two because the speedup moves with r = B*/B, a ratio: each bin spans
#: the same factor 2 of r at every load, and an edge is a batch size a vLLM schedule can
#: start a range at. Below 1 (an idle endpoint) counts in bin 1: the model takes B as at
#: least 1 (`relative_batch`), so an idle window is priced as one request's.
BIN_EDGES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)

#: Fewer windows than this in a bin and it is `thin`: 3 windows are 15 minutes at the
#: default 5-minute window, and less is one burst of traffic, not a load the endpoint sits
#: at. Its figures are shown with the count, never hidden nor passed off as a level.
MIN_BIN_WINDOWS = 3

#: A bin stalls when its output rate per running request is under this share of both
#: neighbours': a sound engine's rate per request never rises with load (the step only
#: lengthens as the batch grows), so a bin 30% under the load twice as high is not the
#: curve's slope but a collapse, as at vLLM issue 49548's schedule boundary (232 tok/s at 8
#: requests fell to 24-157, 32-68% under).
STALL_SHARE = 0.7

#: The strength of each basis, weakest first: a bin that mixes bases is as strong as its
#: weakest window (a measured bin uses only its measured windows: it is never mixed).
_BASIS_ORDER: tuple[Basis, ...] = BASES[::-1]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadSample:
    """One window (or one stored row of several windows) of one endpoint and model: the
    sums the curve adds up. `plain_busy_seconds` is the busy time times the speedup in force
    and `assessed_busy_seconds` the busy time it divides (store.rows.assessed_sums);
    `low_busy_seconds` and `high_busy_seconds` are the same busy time times the ends of the
    speedup's band."""

    end: float  # when the window ended: the newest sample's B* and c are the ones in force
    seconds: float
    concurrency: float  # mean running requests
    windows: int = 1
    output_tokens: float = 0.0
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_position: tuple[float, ...] = ()
    plain_busy_seconds: float | None = None
    assessed_busy_seconds: float = 0.0
    low_busy_seconds: float | None = None
    high_busy_seconds: float | None = None
    basis: Basis | None = None
    savings_usd: float | None = None
    busy_usd: float | None = None
    ridge_batch: float = 0.0
    draft_cost_ratio: float = 0.0


def sample_of(assessed: AssessedWindow, model: str) -> LoadSample | None:
    """The curve's view of one model of one assessed window; None when the window did not
    serve the model."""
    window, assessment = assessed.window, assessed.assessments.get(model)
    counts = window.models.get(model)
    if counts is None or assessment is None:
        return None
    speedup = assessment.speedup_in_force
    busy = window.busy_seconds if speedup is not None else 0.0
    low, high = assessment.speedup_low_ratio, assessment.speedup_high_ratio
    spend = assessed.spend.get(model)
    return LoadSample(
        end=window.end,
        seconds=window.seconds,
        concurrency=window.concurrency(model),
        output_tokens=counts.generation_tokens,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        accepted_per_position=counts.accepted_per_position,
        plain_busy_seconds=busy * speedup if speedup is not None else None,
        assessed_busy_seconds=busy,
        low_busy_seconds=busy * low if low is not None and speedup is not None else None,
        high_busy_seconds=busy * high if high is not None and speedup is not None else None,
        basis=assessment.verdict_basis if speedup is not None else None,
        savings_usd=assessment.speculation_savings_usd,
        busy_usd=float(spend.busy_usd) if spend is not None else None,
        ridge_batch=assessed.step_model.ridge_batch,
        draft_cost_ratio=assessed.draft_cost_ratio or 0.0,
    )


@dataclass(frozen=True, slots=True)
class LoadBin:
    """One bin of the curve: [low, high) running requests (high None: no upper edge)."""

    low: int
    high: int | None
    windows: int
    seconds: float
    time_share: float  # of all the curve's time
    concurrency: float  # the bin's own mean running requests
    speedup: float | None  # in force: measured when the bin has measured windows
    speedup_band: tuple[float, float] | None
    basis: Basis | None
    verdict: str | None  # pays | tax | uncertain; None without a speedup
    acceptance: float | None
    position_acceptance: tuple[float, ...]
    savings_usd: float | None  # None when no window of the bin was priced
    busy_usd: float | None
    #: Output tokens per second per running request: every window's output over its
    #: running-request seconds (None: no request ran). What a stall is read from.
    output_rate: float | None = None
    # The bin's summed counts, from which its draft length is chosen (draft_schedule).
    output_tokens: float = 0.0
    accepted_tokens: float = 0.0
    draft_tokens: float = 0.0
    drafts: float = 0.0

    @property
    def thin(self) -> bool:
        """Too few windows to call a load level (`MIN_BIN_WINDOWS`): say so, with the count."""
        return self.windows < MIN_BIN_WINDOWS

    @property
    def draft_tokens_per_step(self) -> float | None:
        """Drafted tokens per request-step, the draft length that ran in the mean: a step
        emits one token no draft gave, so output - accepted counts the steps, and a K
        schedule that shortens or stops drafting at this load shows here (0 where it drafted
        nothing). A draft cut at a request's end has its accepted tokens counted though not
        all emitted (vLLM, and the simulator, count them), so short requests read a little
        above K. None when the bin counted no drafted tokens (SGLang, TGI) or emitted none."""
        steps = self.output_tokens - self.accepted_tokens
        return self.draft_tokens / steps if steps > 0 else None

    @property
    def label(self) -> str:
        return f"{self.low}+" if self.high is None else f"{self.low}-{self.high - 1}"


@dataclass(frozen=True, slots=True)
class LoadCurve:
    """The bins an endpoint and model spent time in, lowest load first, and what follows."""

    bins: tuple[LoadBin, ...]
    seconds: float
    ridge_batch: float  # B* and c of the newest window: the ones in force
    draft_cost_ratio: float
    #: The lowest bin whose speedup band is wholly below 1 above a bin that pays; None when
    #: there is no such pair (it pays, or is a tax, or is uncertain at every load seen).
    crossover: LoadBin | None = None
    #: "A tax N% of the hours, when X or more requests ran: $Y": the time share and the
    #: savings (negative: a tax) of every bin from the crossover up; None without one.
    tax_time_share: float | None = None
    tax_usd: float | None = None
    #: The lower edges of the bins whose output rate per request collapsed (`stalls`).
    stalls: tuple[int, ...] = ()

    @property
    def crossover_requests(self) -> int | None:
        """X: from this many running requests up, speculation was a tax."""
        return self.crossover.low if self.crossover is not None else None


def bin_edge(concurrency: float) -> int:
    """The lower edge of the bin holding a mean of `concurrency` running requests."""
    if not concurrency >= 2.0:  # below 2, idle and NaN included: bin 1
        return 1
    return min(1 << int(math.log2(concurrency)), BIN_EDGES[-1])


def bin_runs(largest: int) -> Iterator[tuple[int, range]]:
    """The batch sizes 1 to `largest` by bin, in order: each bin's lower edge and its batch
    sizes, as `bin_edge` bins each one. A K schedule prices every batch size up to the
    engine's largest (~1,000) for each curve at every refresh: `bin_edge` called at each was
    a tenth of fleet mode's CPU (bench/README)."""
    edges = [edge for edge in BIN_EDGES if edge <= largest]
    if not edges:  # largest < 1: no batch size
        return
    for low, high in zip(edges, [*edges[1:], largest + 1], strict=True):
        yield low, range(low, high)


def load_curve(samples: Iterable[LoadSample]) -> LoadCurve:
    """Bin `samples` (one endpoint and model) by running requests and sum each bin."""
    by_edge: dict[int, list[LoadSample]] = {}
    newest: LoadSample | None = None
    for sample in samples:
        by_edge.setdefault(bin_edge(sample.concurrency), []).append(sample)
        if newest is None or sample.end >= newest.end:
            newest = sample
    total = sum(s.seconds for group in by_edge.values() for s in group)
    bins = tuple(_bin_of(edge, by_edge[edge], total) for edge in sorted(by_edge))
    crossover = _crossover(bins)
    tax_share = tax_usd = None
    if crossover is not None:
        above = [b for b in bins if b.low >= crossover.low]
        tax_share = sum(b.time_share for b in above)
        tax_usd = _sum_known(b.savings_usd for b in above)
    return LoadCurve(
        bins=bins,
        seconds=total,
        ridge_batch=newest.ridge_batch if newest is not None else 0.0,
        draft_cost_ratio=newest.draft_cost_ratio if newest is not None else 0.0,
        crossover=crossover,
        tax_time_share=tax_share,
        tax_usd=tax_usd,
        stalls=stalls(bins),
    )


def stalls(bins: Sequence[LoadBin]) -> tuple[int, ...]:
    """The bins (lower edges) where throughput collapsed, as at a K schedule's boundary: the
    output rate per running request under `STALL_SHARE` of both neighbouring bins' (the
    next bins seen below and above, none of the three thin), and, where a control measured
    the bin, under the plain rate too (its measured speedup below 1: the rate without
    speculation is the bin's rate over its speedup)."""
    found = []
    for below, here, above in zip(bins, bins[1:], bins[2:], strict=False):
        rate, low, high = here.output_rate, below.output_rate, above.output_rate
        if any(b.thin for b in (below, here, above)) or rate is None or not low or not high:
            continue
        if rate >= STALL_SHARE * min(low, high):
            continue
        if here.basis == "measured" and here.speedup is not None and here.speedup >= 1.0:
            continue  # still faster than the control: slow traffic, not a stall
        found.append(here.low)
    return tuple(found)


def _bin_of(edge: int, samples: Sequence[LoadSample], total_seconds: float) -> LoadBin:
    seconds = sum(s.seconds for s in samples)
    speedup, band, basis = _speedup(samples)
    drafted = [s for s in samples if s.draft_tokens is not None]
    dt = sum(s.draft_tokens or 0.0 for s in drafted)
    a = sum(s.accepted_tokens or 0.0 for s in drafted)
    dr = sum(s.drafts or 0.0 for s in drafted)
    per_position: tuple[float, ...] = ()
    for s in drafted:
        per_position = _add_positions(per_position, s.accepted_per_position)
    following = BIN_EDGES.index(edge) + 1
    running_seconds = sum(s.concurrency * s.seconds for s in samples)
    return LoadBin(
        low=edge,
        high=BIN_EDGES[following] if following < len(BIN_EDGES) else None,
        windows=sum(s.windows for s in samples),
        seconds=seconds,
        time_share=seconds / total_seconds if total_seconds > 0 else 0.0,
        concurrency=running_seconds / seconds if seconds else 0,
        speedup=speedup,
        speedup_band=band,
        basis=basis,
        verdict=verdict_of_band(*band) if band is not None else None,
        acceptance=acceptance_ratio(a, dt) if dt > 0 else None,
        position_acceptance=position_acceptance(per_position, dr) if dr > 0 else (),
        savings_usd=_sum_known(s.savings_usd for s in samples),
        busy_usd=_sum_known(s.busy_usd for s in samples),
        output_rate=(
            sum(s.output_tokens for s in samples) / running_seconds if running_seconds > 0 else None
        ),
        output_tokens=sum(s.output_tokens for s in drafted),
        accepted_tokens=a,
        draft_tokens=dt,
        drafts=dr,
    )


def _speedup(
    samples: Sequence[LoadSample],
) -> tuple[float | None, tuple[float, float] | None, Basis | None]:
    """The bin's speedup, band and basis: its measured windows' when it has any (a control
    measured them: a measurement is its own band), else all its assessed windows', on the
    weakest basis among them. Each is a sum of busy time without speculation over the busy
    time it divides (the report's rule), so a long window weighs what it lasted."""
    assessed = [s for s in samples if s.assessed_busy_seconds > 0 and s.plain_busy_seconds]
    measured = [s for s in assessed if s.basis == "measured"]
    used = measured or assessed
    busy = sum(s.assessed_busy_seconds for s in used)
    if busy <= 0:
        return None, None, None
    speedup = sum(s.plain_busy_seconds or 0.0 for s in used) / busy
    if measured:
        return speedup, (speedup, speedup), "measured"
    basis = min((s.basis for s in used if s.basis), key=_BASIS_ORDER.index, default=None)
    if any(s.low_busy_seconds is None or s.high_busy_seconds is None for s in used):
        return speedup, None, basis
    low = sum(s.low_busy_seconds or 0.0 for s in used) / busy
    high = sum(s.high_busy_seconds or 0.0 for s in used) / busy
    return speedup, (low, high), basis


def _crossover(bins: Sequence[LoadBin]) -> LoadBin | None:
    """The lowest bin whose band is wholly below 1 (verdict tax) above a bin that pays."""
    paid = False
    for b in bins:
        if b.verdict == "pays":
            paid = True
        elif b.verdict == "tax" and paid:
            return b
    return None


def _add_positions(total: tuple[float, ...], more: Sequence[float]) -> tuple[float, ...]:
    """Per-position counts added position by position (a window that drafted fewer
    positions adds nothing to the later ones)."""
    longest = max(len(total), len(more))
    return tuple(
        (total[i] if i < len(total) else 0.0) + (more[i] if i < len(more) else 0.0)
        for i in range(longest)
    )


def _sum_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
