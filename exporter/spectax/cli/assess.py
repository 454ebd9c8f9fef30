"""`spectax assess BEFORE AFTER`: the economics between two saved `/metrics` pages.

For someone who just ran curl twice against their server. Only two
snapshots are seen, so the whole span counts as busy (ECONOMICS.md §4) and
concurrency is the span's mean running requests as the daemon counts them (the engine's
running time over the span, where it keeps one), or without a span the mean of the two
pages' running gauges; floored at 1.
Two more pages from a control (the same model without speculation) give the
measured speedup: the control's time per output token over ours.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from spectax import economics, settle
from spectax.billing.prices import PriceTable, PriceTableError
from spectax.cli.assess_curve import (
    CurveSection,
    curve_lines,
    curve_object,
    curve_sections,
    schedule_lines,
    schedule_object,
)
from spectax.cli.assess_notes import (
    FIGURES,
    JSON_KEYS,
    Note,
    finished_requests,
    json_object,
    notes_for,
)
from spectax.cli.files import read_text
from spectax.economics.draft_schedule import DEFAULT_MAX_NUM_SEQS
from spectax.economics.k_schedule import schedule_problem
from spectax.engines import ENGINES, detect, get_parser, not_exposed
from spectax.engines.base import EngineSample, ParseError
from spectax.health import ScrapeError
from spectax.pipeline.intervals import interval_between
from spectax.pipeline.windows import Window, sum_intervals
from spectax.scrape import fetch, metrics_url, scrape_session

PROVISIONED_NOTE = (
    "savings: on provisioned (always-on) GPUs this is capacity freed, money only if replicas"
    " are scaled down; on serverless GPUs it is invoice money"
)


class AssessError(ValueError):
    """Inputs that cannot be assessed; the message is one line for the user."""


@dataclass(frozen=True)
class Assessed:
    assessment: economics.Assessment
    notes: tuple[Note, ...]
    capacity: economics.Capacity | None = None


@dataclass(frozen=True)
class AssessOptions:
    seconds: float | None = None
    usd_per_hour: float | None = None
    gpus: int = 1
    method: str | None = None
    draft_cost_ratio: float | None = None
    ridge_batch: float = economics.DEFAULT_RIDGE_BATCH
    step_overhead_ratio: float = economics.DEFAULT_STEP_OVERHEAD_RATIO
    concurrency: float | None = None
    no_seconds_reason: str = "pass --seconds S, the time between the two pages"
    #: The K schedule the server runs (vLLM's num_speculative_tokens_per_batch_size, as
    #: `speculation.schedule`): each window is assessed at the K in force for its load.
    schedule: tuple[tuple[int, int, int], ...] | None = None
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS  # the largest batch the K schedule covers


#: The span a window is given when the time between the pages is unknown: concurrency is
#: then the pages' mean running requests, and nothing is priced (no money without a span).
NOMINAL_SECONDS = 1.0
#: Files whose modification times are closer than this were not written by two curls
#: seconds apart but copied together (seen: 82 µs): their mtimes are no span to price.
MIN_MTIME_SPAN_SECONDS = 1.0
#: The first way to settle an uncertain verdict from two pages, before the daemon's.
CONTROL_PAGES_STEP = (
    "a control's pages: --control CBEFORE CAFTER, the same model served without speculation"
    " over the same span (a measured verdict)"
)


def assess_pages(
    before_text: str,
    after_text: str,
    options: AssessOptions,
    control: tuple[str, str] | None = None,
    engine: str | None = None,
) -> list[Assessed]:
    """Assess per model, as the daemon assesses a window (`economics.assess_window`: the same
    figures, latency and KV-cache capacity included); `control` is a (before, after) pair
    from the same model served without speculation, over the same span, for the measured
    speedup. `engine` None: the one whose metric prefix the AFTER page carries (vLLM when
    none does)."""
    engine = engine or detect(after_text) or "vllm"
    return _results(_judge(before_text, after_text, options, control, engine), options)


@dataclass(frozen=True)
class Series:
    """A series of pages assessed: the first page to the last (the headline, as two pages
    are), and per model each two consecutive pages' window binned by load with the K
    schedule that follows (`assess_curve`)."""

    results: list[Assessed]
    curves: dict[str, CurveSection]


def assess_series(
    texts: Sequence[str],
    options: AssessOptions,
    spans: Sequence[float] | None = None,
    control: tuple[str, str] | None = None,
    engine: str | None = None,
) -> Series:
    """The headline from the first page to the last, and each consecutive pair's window,
    assessed as two pages are (`spans`: the seconds between each two, None: unknown). With
    two pages the one window is the headline's; with more, `control` (two pages over the
    whole span) measures the headline only and the pairs' speedups are modelled."""
    if len(texts) < 2:
        raise AssessError("give at least two pages")
    engine = engine or detect(texts[-1]) or "vllm"
    headline = _judge(texts[0], texts[-1], options, control, engine)
    pairs = [headline.assessed]
    if len(texts) > 2:
        pairs, start = [], 0.0
        for i, (before, after) in enumerate(itertools.pairwise(texts)):
            seconds = spans[i] if spans is not None else None
            try:
                judged = _judge(
                    before, after, replace(options, seconds=seconds), None, engine, start
                )
            except AssessError as exc:
                raise AssessError(f"pages {i + 1} and {i + 2}: {exc}") from exc
            pairs.append(judged.assessed)
            start += seconds if seconds is not None else NOMINAL_SECONDS
    curves = curve_sections(
        pairs,
        engine=engine,
        method=options.method,
        max_num_seqs=options.max_num_seqs,
        schedule=options.schedule,
        priced=options.seconds is not None and options.usd_per_hour is not None,
    )
    results = _results(headline, options)
    if len(texts) > 2:
        results = [_restart_noted(r, curves) for r in results]
    return Series(results, curves)


def _restart_noted(result: Assessed, curves: Mapping[str, CurveSection]) -> Assessed:
    """A series whose server restarted between its first and last page: the headline (the
    first page to the last, as two pages are read) counts only the new process, while the
    curve's windows count every span; say so."""
    if not result.assessment.restarted or result.assessment.model not in curves:
        return result
    note = Note(
        ("restarted",),
        "the server restarted between the first and the last page: these figures count"
        " only what the new process served; the load curve's windows count every two pages",
    )
    return replace(result, notes=(*result.notes, note))


@dataclass(frozen=True)
class _Judged:
    """One window between two pages and what was concluded about it, as the daemon keeps
    it (`AssessedWindow`: what the load curve bins), with what the notes need."""

    assessed: economics.AssessedWindow
    given: dict[str, float]  # each model's mean running requests, before the floor at 1
    control: Window | None
    engine: str
    params: economics.Parameters


def _judge(
    before_text: str,
    after_text: str,
    options: AssessOptions,
    control: tuple[str, str] | None,
    engine: str,
    start: float = 0.0,
) -> _Judged:
    """The window from `before_text` to `after_text` (`start` and `options.seconds` apart),
    assessed per model as the daemon assesses a window."""
    parse = get_parser(engine)
    before, after = parse(before_text), parse(after_text)
    _refuse_swapped(before, after)
    if not after.has_engine_metrics:
        raise AssessError("the AFTER page has no engine metrics (vLLM --disable-log-stats?)")
    seconds = options.seconds if options.seconds is not None else NOMINAL_SECONDS
    interval = interval_between(before, after, start, start + seconds)
    if not interval.models:
        raise AssessError("the pages share no model: were they taken from the same server?")
    # The user's B, or the span's mean running requests (the daemon's: pipeline.intervals);
    # without a span, the running time has nothing to be divided by: the two pages' running
    # gauges, as read. Either floored at 1 request (a step serves at least one; a note says
    # so), as the formulas take it.
    given = {m: c.running_seconds / seconds for m, c in interval.models.items()}
    if options.seconds is None:
        given = {m: _mean_running(before, after, m) for m in given}
    if options.concurrency is not None:
        given = dict.fromkeys(given, options.concurrency)
    models = {
        m: replace(c, running_seconds=max(given[m], 1.0) * seconds)
        for m, c in interval.models.items()
    }
    interval = replace(interval, models=models)
    price = options.usd_per_hour
    tariff = economics.Tariff(
        usd_per_hour=Decimal(repr(price)) if price is not None else None,
        gpus=options.gpus,
        billing_mode="provisioned",  # the whole span is busy when anything ran: all of it is priced
    )
    if options.seconds is not None:
        interval = economics.price_interval(interval, tariff)
    window = sum_intervals([interval])
    control_window = None
    if control is not None:
        control_before, control_after = parse(control[0]), parse(control[1])
        control_window = sum_intervals(
            [interval_between(control_before, control_after, start, start + seconds)]
        )
        if not control_window.models:
            raise AssessError("the control pages have no engine metrics in common")
    params = _parameters(options, engine, after, window)
    spend = economics.spend_by_model(window, tariff) if options.seconds is not None else {}
    assessments = economics.assess_window(window, params, spend, control_window)
    assessed = economics.AssessedWindow(
        window, assessments, spend, params.step_model, params.draft_cost_ratio
    )
    return _Judged(assessed, given, control_window, engine, params)


def _results(judged: _Judged, options: AssessOptions) -> list[Assessed]:
    """Each model's assessment with the notes that say why a figure is "-" or adjusted, and
    its KV-cache capacity."""
    window, control_window = judged.assessed.window, judged.control
    capacities = economics.window_capacities(window, control_window)
    results = []
    for model, a in sorted(judged.assessed.assessments.items()):
        notes = notes_for(
            a,
            options.seconds is not None,
            options.usd_per_hour is not None,
            options.no_seconds_reason,
            judged.given[model],
            finished_requests(window, control_window, model),
            (judged.engine, ENGINES[judged.engine].capabilities),
            judged.params.step_model,
        )
        results.append(Assessed(a, notes, capacities.get(model)))
    return results


def _parameters(
    options: AssessOptions, engine: str, after: EngineSample, window: Window
) -> economics.Parameters:
    """The draft cost and the counterfactual the pages are judged under: two pages give no
    plain curve and no stored profile, so it is the one configured here (source
    "configured", basis "default"), with the method's floor under h."""
    # c prices drafted tokens: moot where none are counted; measured where the engine times
    # its drafter (TensorRT-LLM), which beats a given one, as in the daemon.
    overheads = [m.draft_overhead for m in after.models.values()]
    c = economics.draft_cost_in_force(None, overheads, window)
    if c is None:
        priceable = _speculates(after) and "draft_tokens" not in not_exposed(engine)
        c = _draft_cost_ratio(options, priceable)
    step = economics.StepModel(
        ridge_batch=options.ridge_batch,
        step_overhead_ratio=options.step_overhead_ratio,
        step_overhead_floor=economics.MIN_STEP_OVERHEAD_RATIO,
    )
    return economics.Parameters(draft_cost_ratio=c, step_model=step, schedule=options.schedule)


def _refuse_swapped(before: EngineSample, after: EngineSample) -> None:
    """Pages given the wrong way round read as an engine restart with no traffic. One
    process (the same start time on both) never counts down: say so, and what to do."""
    start = before.process_start_time_seconds
    if start is None or start != after.process_start_time_seconds:
        return
    for model, theirs in after.models.items():
        ours = before.models.get(model)
        if ours is not None and theirs.generation_tokens < ours.generation_tokens:
            raise AssessError(
                f"AFTER holds fewer output tokens than BEFORE ({theirs.generation_tokens:g}"
                f" against {ours.generation_tokens:g}) from the same process (both started at"
                f" {start:.0f}): swapped? give the earlier page first"
            )


def _speculates(sample: EngineSample) -> bool:
    return any(m.speculating for m in sample.models.values())


def to_json(results: Sequence[Assessed], curves: Mapping[str, CurveSection] | None = None) -> str:
    """One object per model; `load_curve` and `k_schedule` are null for a model without a
    curve (it did not speculate)."""
    curves = curves or {}
    objects = [
        {
            **json_object(r.assessment),
            **_verdict_advice(r.assessment),
            "latency": _latency_object(r.assessment.latency),
            "capacity": _capacity_object(r.capacity),
            "notes": [n.text for n in r.notes],
            **_curve_objects(curves.get(r.assessment.model)),
        }
        for r in results
    ]
    return json.dumps(objects, indent=2)


def _curve_objects(section: CurveSection | None) -> dict[str, Any]:
    if section is None:
        return {"load_curve": None, "k_schedule": None}
    return {"load_curve": curve_object(section), "k_schedule": schedule_object(section)}


def to_text(results: Sequence[Assessed], curves: Mapping[str, CurveSection] | None = None) -> str:
    """Every "-" and every adjusted figure points at the numbered note that says why; the
    load curve and the K schedule follow each speculating model's notes."""
    curves = curves or {}
    lines = []
    width = max(len(k) for k in JSON_KEYS)
    for result in results:
        a, data = result.assessment, json_object(result.assessment)
        lines.append(f"verdict: {a.verdict.upper()}{_how(a)}   model: {a.model}")
        advice = _verdict_advice(a)
        if advice["turns_on"]:
            lines.append(f"  it turns on: {advice['turns_on']}")
            lines.extend(f"  to settle it: {step}" for step in advice["settle"])
        for key in FIGURES:
            marks = [f"[{i}]" for i, n in enumerate(result.notes, 1) if key in n.keys]
            lines.append(f"  {key:<{width}}  {' '.join([_show(data[key]), *marks])}")
        lines.extend(_latency_lines(a.latency, width))
        capacity = _capacity_object(result.capacity)
        lines.extend(f"  {k:<{width}}  {_show(v)}" for k, v in capacity.items())
        lines.extend(f"  [{i}] {n.text}" for i, n in enumerate(result.notes, 1))
        section = curves.get(a.model)
        if section is not None:
            lines.extend(curve_lines(section))
            lines.extend(schedule_lines(section))
        lines.append("")
    if results:
        lines.append(PROVISIONED_NOTE)
    return "\n".join(lines)


def _verdict_advice(a: economics.Assessment) -> dict[str, Any]:
    """What an uncertain verdict turns on and what would settle it (spectax.settle, as the
    status page and the report say it)."""
    target = settle.Target(name="ENDPOINT", model=a.model, has_control=False)
    steps = list(settle.settle_steps(target, a))
    if steps and a.speedup_measured_ratio is None:
        steps.insert(0, CONTROL_PAGES_STEP)
    return {"turns_on": settle.turns_on(a), "settle": steps}


def _latency_object(latency: economics.Latency | None) -> dict[str, Any]:
    """The quantiles per latency metric, and speculation's effect on them (> 1: slower)."""
    if latency is None:
        return {}
    return {
        "quantiles_seconds": {m: q.by_label() for m, q in sorted(latency.quantiles.items())},
        "ratios": {f"{m} {label}": v for (m, label), v in sorted(latency.ratios.items())},
        "basis": latency.basis,
    }


def _latency_lines(latency: economics.Latency | None, width: int) -> list[str]:
    if latency is None:
        return []
    lines = []
    for metric, q in sorted(latency.quantiles.items()):
        shown = ", ".join(f"{k} {_show(v)}" for k, v in q.by_label().items())
        lines.append(f"  {metric + ' (s)':<{width}}  {shown}")
    for (metric, label), ratio in sorted(latency.ratios.items()):
        key = f"{metric} {label} ratio"
        lines.append(f"  {key:<{width}}  {ratio:.3f} (with / without speculation, {latency.basis})")
    return lines


def _capacity_object(capacity: economics.Capacity | None) -> dict[str, Any]:
    """The KV-cache figures the daemon exports, as far as two pages give them."""
    if capacity is None:
        return {}
    figures = {
        "kv_cache_blocks": capacity.kv_cache_blocks,
        "kv_headroom_ratio": capacity.kv_headroom_ratio,
        "concurrency_capacity_requests": capacity.concurrency_capacity_requests,
        "draft_blocks": capacity.draft_blocks,
        "draft_blocks_basis": capacity.draft_blocks_basis,
        "draft_kv_share_ratio": capacity.draft_kv_share_ratio,
        "concurrency_capacity_no_draft_requests": capacity.concurrency_capacity_no_draft_requests,
        "preemptions_per_hour": capacity.preemptions_per_hour,
    }
    return {k: v for k, v in figures.items() if v is not None}


def _how(a: economics.Assessment) -> str:
    """How the verdict was reached, beside it: its basis and the speedup's band."""
    if a.verdict_basis is None:
        return ""
    low, high = a.speedup_low_ratio, a.speedup_high_ratio
    if low is None or high is None:
        return f" ({a.verdict_basis})"
    if low == high:
        return f" ({a.verdict_basis}, speedup {low:.3f})"
    return f" ({a.verdict_basis}, speedup {low:.3f} to {high:.3f})"


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.3f}" for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _mean_running(before: EngineSample, after: EngineSample, model: str) -> float:
    values = [s.models[model].requests_running for s in (before, after) if model in s.models]
    return sum(values) / len(values) if values else 0.0


def _draft_cost_ratio(options: AssessOptions, speculating: bool) -> float:
    if options.draft_cost_ratio is not None:
        return options.draft_cost_ratio
    if options.method is not None:
        c = economics.draft_cost_ratio_for(options.method)
        if c is None:
            raise AssessError(
                f"--method {options.method} needs --draft-cost-ratio (a draft model's cost "
                "relative to the target; roughly their latency ratio)"
            )
        return c
    if speculating:
        raise AssessError(
            "the pages show speculative decoding but not its method: give --method "
            f"({', '.join(economics.SPECULATIVE_METHODS)}) or --draft-cost-ratio"
        )
    return 0.0


# ---------------------------------------------------------------- the command line


def add_parser(commands: Any) -> None:
    assess = commands.add_parser(
        "assess", help="the economics between saved /metrics pages (files or URLs)"
    )
    assess.add_argument("before", help="first page: a file, or a URL")
    assess.add_argument("after", help="second page: a file, or a URL (the same URL: fetched twice)")
    assess.add_argument(
        "more",
        nargs="*",
        metavar="PAGE",
        help="more pages: each two consecutive pages are a window, binned by load into a load"
        " curve and a K schedule (the same URL every time: fetched --seconds apart)",
    )
    assess.add_argument(
        "--seconds",
        type=float,
        help="time between two consecutive pages (default: file mtimes)",
    )
    assess.add_argument("--usd-per-hour", type=float, help="price per GPU-hour")
    assess.add_argument("--gpu", help="GPU name in the price table (with --provider)")
    assess.add_argument("--provider", help="provider in the price table (with --gpu)")
    assess.add_argument("--product", help="product in the price table, when several match")
    assess.add_argument("--gpus", type=int, default=1, help="GPUs the endpoint runs on (default 1)")
    assess.add_argument("--method", help="ngram | eagle | eagle3 | mtp | medusa | draft_model")
    assess.add_argument(
        "--draft-cost-ratio",
        type=float,
        help="c: draft token cost / target token (TensorRT-LLM's measured draft overhead wins)",
    )
    assess.add_argument("--ridge-batch", type=float, default=32.0, help="B* (default 32)")
    assess.add_argument(
        "--step-overhead-ratio",
        type=float,
        default=economics.DEFAULT_STEP_OVERHEAD_RATIO,
        help="h: a speculative step's fixed cost over a plain one's, minus 1 (default %(default)g,"
        " as the daemon's)",
    )
    assess.add_argument("--concurrency", type=float, help="B (default: mean running requests)")
    assess.add_argument(
        "--control",
        nargs=2,
        metavar=("CBEFORE", "CAFTER"),
        help="the same two pages from a control serving the model without speculation (with"
        " more pages: over the whole series, for the headline only)",
    )
    assess.add_argument(
        "--schedule",
        metavar="JSON",
        help="the K schedule the server runs, vLLM's num_speculative_tokens_per_batch_size,"
        " e.g. '[[1,4,3],[5,1024,0]]': each window is assessed at the K in force for its load",
    )
    assess.add_argument(
        "--max-num-seqs",
        type=int,
        default=DEFAULT_MAX_NUM_SEQS,
        metavar="N",
        help="the engine's max_num_seqs: the K schedule advised covers batches 1..N (default"
        f" {DEFAULT_MAX_NUM_SEQS}, vLLM's largest default)",
    )
    assess.add_argument(
        "--engine",
        choices=list(ENGINES),
        help="the engine that rendered the pages (default: told from their metric prefix)",
    )
    assess.add_argument(
        "--format", choices=["text", "json"], default="text", help="output (default text)"
    )
    assess.set_defaults(func=assess_command)


def assess_command(args: argparse.Namespace) -> int:
    try:
        floor = economics.MIN_STEP_OVERHEAD_RATIO
        if not floor <= args.step_overhead_ratio < math.inf:
            raise AssessError(
                f"--step-overhead-ratio {args.step_overhead_ratio:g}: give h >= {floor:g}, the "
                "least a speculative step costs beyond a plain one (the proposer and the "
                "rejection sampler run on every step: docs/economics.md, the floor under h)"
            )
        if args.seconds is not None and not 0 < args.seconds < math.inf:
            raise AssessError(
                f"--seconds {args.seconds:g}: give the time between the two pages, more than 0"
                " (0 s would price the span at a false $0)"
            )
        if args.max_num_seqs < 1:
            raise AssessError(f"--max-num-seqs {args.max_num_seqs}: give 1 or more")
        schedule = parse_schedule(args.schedule) if args.schedule is not None else None
        paths = [args.before, args.after, *args.more]
        texts, spans = read_series(paths, args.seconds)
        seconds = sum(spans) if spans is not None else None
        options = AssessOptions(
            seconds=seconds,
            no_seconds_reason=_no_seconds_reason(paths),
            usd_per_hour=_usd_per_hour(args),
            gpus=args.gpus,
            method=args.method,
            draft_cost_ratio=args.draft_cost_ratio,
            ridge_batch=args.ridge_batch,
            step_overhead_ratio=args.step_overhead_ratio,
            concurrency=args.concurrency,
            schedule=schedule,
            max_num_seqs=args.max_num_seqs,
        )
        control = None
        if args.control:
            control_before, control_after, _ = read_pages(args.control[0], args.control[1], seconds)
            control = (control_before, control_after)
        series = assess_series(texts, options, spans, control, args.engine)
    except (AssessError, PriceTableError, ScrapeError) as exc:
        print(f"spectax assess: {exc}", file=sys.stderr)
        return 1
    except ParseError as exc:
        print(f"spectax assess: malformed /metrics page: {exc}", file=sys.stderr)
        return 1
    results, curves = series.results, series.curves
    print(to_json(results, curves) if args.format == "json" else to_text(results, curves))
    return 0


def parse_schedule(text: str) -> tuple[tuple[int, int, int], ...]:
    """`--schedule`: a JSON list of [first batch, last batch, K] ranges, checked as vLLM
    checks it (`schedule_problem`, as the daemon's `speculation.schedule`)."""
    try:
        ranges = json.loads(text)
    except ValueError as exc:
        raise AssessError(f"--schedule {text!r}: not JSON ({exc})") from exc
    if not isinstance(ranges, list) or not all(
        isinstance(r, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
        for r in ranges
    ):
        raise AssessError(
            f"--schedule {text!r}: give a list of [first batch, last batch, K] whole numbers,"
            " e.g. '[[1,4,3],[5,1024,0]]' (vLLM's num_speculative_tokens_per_batch_size)"
        )
    problem = schedule_problem(ranges)
    if problem is not None:
        raise AssessError(f"--schedule {text!r}: {problem}")
    return tuple((r[0], r[1], r[2]) for r in ranges)


def _usd_per_hour(args: argparse.Namespace) -> float | None:
    """`--usd-per-hour`, or the price table's row for `--gpu` and `--provider`."""
    given: float | None = args.usd_per_hour
    if given is not None or not (args.gpu or args.provider):
        return given
    if not (args.gpu and args.provider):
        raise AssessError("--gpu and --provider go together")
    return float(PriceTable.load().find(args.provider, args.gpu, args.product).usd_per_hour)


def _no_seconds_reason(paths: Sequence[str]) -> str:
    """Why the span is unknown when --seconds is not given, and what to do: of two pages,
    BEFORE and AFTER; of a series, the first two consecutive pages whose times give none."""
    if any(_is_url(p) for p in paths):
        return "pass --seconds S (a page fetched from a URL has no modification time)"
    two = len(paths) == 2
    for i, (before, after) in enumerate(itertools.pairwise(paths)):
        first, second = ("BEFORE", "AFTER") if two else (f"page {i + 1}", f"page {i + 2}")
        try:
            elapsed = os.stat(after).st_mtime - os.stat(before).st_mtime
        except OSError:
            elapsed = 0.0
        if elapsed == 0:
            return (
                f"{first} and {second} have the same modification time (copied or checked out"
                " together?): pass --seconds S, the time between the two curls"
            )
        if 0 < elapsed < MIN_MTIME_SPAN_SECONDS:
            return (
                f"{first} and {second} were written {elapsed * 1e3:.3g} ms apart (copied"
                " together?), no span two curls take: pass --seconds S, the time between the"
                " two curls"
            )
        if elapsed < 0:
            break
    return (
        "AFTER is older than BEFORE: pass --seconds S, the time between the two curls"
        if two
        else (
            "a page is older than the one before it: pass --seconds S, the time between two curls"
        )
    )


def read_pages(before: str, after: str, seconds: float | None) -> tuple[str, str, float | None]:
    """Both pages and the seconds between them, blocking until they are read (a URL given
    twice is fetched twice, `seconds` apart)."""
    texts, spans = read_series([before, after], seconds)
    return texts[0], texts[1], spans[0] if spans is not None else None


def read_series(
    paths: Sequence[str], seconds: float | None
) -> tuple[list[str], list[float] | None]:
    """The pages and the seconds between each two consecutive ones (None: unknown, as soon
    as any two's are), blocking until they are read."""
    return asyncio.run(_gather_pages(paths, seconds))


async def _gather_pages(
    paths: Sequence[str], seconds: float | None
) -> tuple[list[str], list[float] | None]:
    """Files are read as they are; the same URL every time is fetched that many times,
    `--seconds` apart. Without `seconds`, files' modification times give each span, unless
    two were written under `MIN_MTIME_SPAN_SECONDS` apart (copied together) or out of
    order: then no span is known."""
    pairs = len(paths) - 1
    if _is_url(paths[0]) and all(p == paths[0] for p in paths):
        if seconds is None:
            raise AssessError(
                f"give --seconds to fetch the same URL {len(paths)} times, that far apart"
                if pairs > 1
                else "give --seconds to fetch the same URL twice, that far apart"
            )
        pages = [await _fetch(paths[0])]
        for _ in range(pairs):
            await asyncio.sleep(seconds)
            pages.append(await _fetch(paths[0]))
        return pages, [seconds] * pairs
    pages = [
        await _fetch(p) if _is_url(p) else read_text(p, AssessError, "a text /metrics page")
        for p in paths
    ]
    if seconds is not None:
        return pages, [seconds] * pairs
    if any(_is_url(p) for p in paths):
        return pages, None
    times = [os.stat(p).st_mtime for p in paths]
    spans = [after - before for before, after in itertools.pairwise(times)]
    return pages, spans if all(s >= MIN_MTIME_SPAN_SECONDS for s in spans) else None


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


async def _fetch(url: str) -> str:
    async with scrape_session() as session:
        return await fetch(session, metrics_url(url), timeout=10.0, max_bytes=10 * 1024 * 1024)


__all__ = ["JSON_KEYS", "AssessError", "AssessOptions", "Assessed", "assess_pages"]
