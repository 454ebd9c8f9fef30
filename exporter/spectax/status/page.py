"""The status page: per endpoint, is speculation paying, on what basis, and what it costs.

Rendered on the server from the snapshots `/metrics` reads and the in-memory history,
so the handler does no I/O. Every value that comes from a target (model names, error
text) is hostile input and is escaped; error text is blanked of registered secrets.
Inline CSS and SVG only, no script, nothing fetched: it works offline, behind the same
web-config auth as `/metrics`, at 800 px wide and in dark mode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from spectax import __version__, economics, logs, settle
from spectax.economics import Assessment, Capacity
from spectax.economics.draft_schedule import DraftSchedule
from spectax.economics.load_curve import LoadCurve
from spectax.endpoint import EndpointSnapshot
from spectax.endpoint_config import EndpointConfig
from spectax.engines import not_exposed
from spectax.load_curve_text import ranges_text
from spectax.settle import Target, settle_steps, turns_on
from spectax.status.chart import chart
from spectax.status.docs import ECONOMICS_PATH, RUNBOOK_PATH
from spectax.status.history import StatusHistory, main_assessment

#: A model's load curve on its card: (model, curve, the K schedule it implies or None).
Curved = tuple[str, LoadCurve, DraftSchedule | None]

# The runbook and the economics, served by spectax itself (`spectax.status.docs`): a
# `file://` link does not open from an http page.
RUNBOOK_URL = RUNBOOK_PATH
# A person glances at the page; the window it summarises is minutes long (5 min by
# default), so a reload every 30 s is fresh enough and costs one request per open tab.
REFRESH_SECONDS = 30
# "What is this?" beside an uncertain verdict: the section of the economics that says what
# a band straddling 1 means, as spectax serves it.
DOCS_URL = f"{ECONOMICS_PATH}#{settle.DOCS.split('#', 1)[1]}"
# 100 cards are ~4 screens already; past that /metrics (or Grafana) is the tool, and the
# page stays quick to render at 2,000 endpoints. The worst come first, so none is hidden.
MAX_ENDPOINTS = 100
# A 3 h chart costs ~2.4 ms to draw (measured, 180 points, a loaded 2-core machine) on the
# event loop that also scrapes: charts for the first 20 cards keep the page near 50 ms.
MAX_CHARTS = 20

VERDICT_TEXT = {
    "pays": "pays",
    "tax": "tax",
    "uncertain": "uncertain",
    "no_traffic": "no traffic",
    "no_speculation": "no speculation configured",
}
# The order cards are shown in: what needs a person first.
RANK = {
    "down": 0,
    "tax": 1,
    "uncertain": 2,
    "no_traffic": 3,
    "waiting": 4,
    "pays": 5,
    "no_speculation": 6,
}
BADGE = {**VERDICT_TEXT, "down": "down", "waiting": "not scraped yet"}

STYLE = """
:root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--card:#f6f8fa;--muted:#59636e;
--line:#d1d9e0;--pays:#1a7f37;--tax:#cf222e;--idle:#9a6700;--unsure:#8250df}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--card:#161b22;
--muted:#9198a1;--line:#3d444d;--pays:#3fb950;--tax:#f85149;--idle:#d29922;--unsure:#a371f7}}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);
background:var(--bg);max-width:60rem;margin:0 auto;padding:1rem}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.15rem;margin:0}
h3{font-size:1rem;margin:.8rem 0 .3rem;overflow-wrap:anywhere}
a{color:inherit}code{font-size:.9em;overflow-wrap:anywhere}
.muted,.meta,.legend{color:var(--muted);font-size:.85rem;margin:.2rem 0}
section{background:var(--card);border:1px solid var(--line);border-left:6px solid var(--muted);
border-radius:6px;padding:.7rem 1rem;margin:1rem 0}
section.pays{border-left-color:var(--pays)}
section.tax,section.down{border-left-color:var(--tax)}
section.uncertain{border-left-color:var(--unsure)}
section.no_traffic{border-left-color:var(--idle)}
.badge{font-size:.8rem;font-weight:700;padding:.1rem .45rem;border-radius:4px;
border:1px solid currentColor;margin-left:.4rem;text-transform:uppercase}
.pays .badge,.v-pays{color:var(--pays)}
.tax .badge,.down .badge,.v-tax,.error{color:var(--tax)}
.uncertain .badge,.v-uncertain{color:var(--unsure)}
.v-no_traffic{color:var(--idle)}
dl{display:grid;grid-template-columns:repeat(auto-fit,minmax(14rem,1fr));gap:.3rem 1rem;margin:0}
dt{color:var(--muted);font-size:.8rem}dd{margin:0 0 .2rem}
.lead dd{font-size:1.15rem;font-weight:600}
svg.chart{width:100%;height:110px;display:block;margin-top:.4rem}
svg text{font-size:10px;fill:var(--muted)}svg title{display:none}
.grid{stroke:var(--line);stroke-width:1}
path{fill:none;stroke-width:2;vector-effect:non-scaling-stroke}
path.acceptance{stroke:var(--fg)}path.breakeven{stroke:var(--tax);stroke-dasharray:5 4}
.key{display:inline-block;width:1.4rem;border-top:2px solid var(--fg);vertical-align:middle}
.key.breakeven{border-top:2px dashed var(--tax);margin-left:.8rem}
.settle{border-top:1px solid var(--line);margin-top:.5rem;padding-top:.3rem}
.settle p{margin:.2rem 0}.settle ol{margin:.2rem 0;padding-left:1.4rem}
.settle li{margin:.15rem 0;overflow-wrap:anywhere}
table.curve{border-collapse:collapse;font-size:.85rem;margin:.4rem 0;width:100%}
table.curve caption{text-align:left;color:var(--muted);font-size:.8rem;caption-side:top}
table.curve th,table.curve td{padding:.1rem .5rem;text-align:right;
border-bottom:1px solid var(--line)}
table.curve th{color:var(--muted);font-weight:400}
tr.stalled td{color:var(--tax);font-weight:600}
"""


def report_command(config_path: Path | None) -> str:
    """The monthly review's command for this daemon: with its own configuration file, or,
    for `spectax demo` (none), the demo's month of simulated history."""
    if config_path is None:
        return "spectax demo --history 30d, then: spectax report --format html --out report.html"
    return f"spectax report --config {config_path} --format html --out report.html"


def render_status_page(
    snapshots: Mapping[str, EndpointSnapshot],
    history: StatusHistory,
    now: float,
    config_path: Path | None = None,
    curves: Mapping[tuple[str, str], LoadCurve] | None = None,
    schedules: Mapping[tuple[str, str], DraftSchedule] | None = None,
) -> str:
    """The whole page, as text; the history forgets endpoints no longer configured;
    `config_path` is the daemon's configuration file, for the monthly review's command;
    `curves` the load curves by endpoint and model (`spectax.curve_book`), each a table
    under its endpoint's card, with the K schedule it implies from `schedules`."""
    history.keep_only(snapshots)
    cards = sorted(snapshots.items(), key=lambda item: (RANK[_state(item[1])], item[0]))
    counts: dict[str, int] = {}
    for _, snapshot in cards:
        counts[_state(snapshot)] = counts.get(_state(snapshot), 0) + 1
    summary = ", ".join(
        f"{n} {BADGE[s]}" for s, n in sorted(counts.items(), key=lambda c: RANK[c[0]])
    )
    hidden = len(cards) - MAX_ENDPOINTS
    more = (
        f'<p class="muted">{hidden} more endpoint(s), no worse than the last shown: see '
        '<a href="/metrics">/metrics</a>.</p>'
        if hidden > 0
        else ""
    )
    by_endpoint: dict[str, list[Curved]] = {}  # grouped once, not per card
    for (endpoint, model), curve in sorted((curves or {}).items()):
        schedule = (schedules or {}).get((endpoint, model))
        by_endpoint.setdefault(endpoint, []).append((model, curve, schedule))
    body = "".join(
        _card(name, s, history, charted=i < MAX_CHARTS, curves=by_endpoint.get(name, []))
        for i, (name, s) in enumerate(cards[:MAX_ENDPOINTS])
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<link rel="icon" href="data:,">
<title>spectax status</title><style>{STYLE}</style></head>
<body>
<h1>spectax {escape(__version__)}: is speculative decoding paying?</h1>
<p class="meta">{len(cards)} endpoint(s){": " + escape(summary) if summary else ""}.
As of {_clock(now)} UTC; this page reloads every {REFRESH_SECONDS} s.</p>
<p><a href="/metrics">/metrics</a> · <a href="{RUNBOOK_URL}">runbook</a> ·
<a href="/-/healthy">/-/healthy</a> · <a href="/-/ready">/-/ready</a> ·
monthly review: <code>{escape(report_command(config_path))}</code></p>
{body or '<p class="muted">No endpoint configured.</p>'}{more}
</body></html>
"""


def _state(snapshot: EndpointSnapshot) -> str:
    """The card's verdict: its main model's, "down", or "waiting" for a first scrape."""
    if not snapshot.up:
        return "down" if snapshot.last_error is not None else "waiting"
    main = main_assessment(snapshot)
    if main is not None:
        return main.verdict
    return "no_speculation" if snapshot.config.speculation is None else "no_traffic"


def _card(
    name: str,
    snapshot: EndpointSnapshot,
    history: StatusHistory,
    charted: bool,
    curves: Sequence[Curved],
) -> str:
    state = _state(snapshot)
    config = snapshot.config
    method = config.speculation.method if config.speculation else "none"
    scraped = (
        f"last scrape {_clock(snapshot.last_success_timestamp)} UTC"
        if snapshot.last_success_timestamp is not None
        else "not scraped yet"
    )
    lines = [
        f'<section class="{state}" data-endpoint="{escape(name)}" data-state="{state}">',
        f'<h2>{escape(name)} <span class="badge">{BADGE[state]}</span></h2>',
        f'<p class="meta">{"up" if snapshot.up else "down"} · {escape(config.engine)} · '
        f"speculation: {escape(method)} · {config.gpus} GPU(s), {escape(config.billing_mode)} "
        f"· {scraped}</p>",
    ]
    if snapshot.last_error is not None and not snapshot.up:
        error = logs.blank_secrets(snapshot.last_error)
        lines.append(
            f'<p class="error">last error: {escape(error)} (<a href="{RUNBOOK_URL}'
            '#spectaxendpointdown">runbook</a>)</p>'
        )
    for assessment in sorted(snapshot.assessments.values(), key=lambda a: a.model):
        lines.append(_model(snapshot, assessment))
    if snapshot.up and snapshot.engine_metrics and not snapshot.assessments:
        lines.append('<p class="muted">No window yet: figures follow the second scrape.</p>')
    if snapshot.up and not snapshot.engine_metrics:
        lines.append(
            '<p class="muted">The page has no engine metrics (vLLM with --disable-log-stats?).</p>'
        )
    main = main_assessment(snapshot)
    if main is not None and main.draft_tokens is not None and charted:
        title = f"{escape(name)}: acceptance against break-even, last hours"
        lines.append(chart(history.points(name), history.step_seconds, history.span_seconds, title))
    lines += [_curve(model, c, schedule) for model, c, schedule in curves]
    lines.append("</section>")
    return "\n".join(lines)


def _curve(model: str, curve: LoadCurve, schedule: DraftSchedule | None) -> str:
    """The model's load curve as a small table, a row per load bin: the time spent there,
    the speedup and its basis, acceptance, net savings, output tokens per second per
    request, drafted tokens per step (where a K schedule stops drafting, it falls) and the
    K the curve advises there; a stalled bin in red, the crossover in the caption, and the
    schedule's advice under it, with what it would have saved."""
    advised = schedule.k_by_bin if schedule is not None else {}
    crossover = curve.crossover_requests
    said = (
        f"a tax from {crossover} running requests, {curve.tax_time_share or 0.0:.0%} of the time"
        if crossover is not None
        else "no load at which it turns from paying to a tax"
    )
    stalled = set(curve.stalls)
    rows = []
    for b in curve.bins:
        speedup = f"{_times(b.speedup)} ({b.basis})" if b.basis else _times(b.speedup)
        net = "—" if b.savings_usd is None else _usd(b.savings_usd, False, signed=True)
        rate = "—" if b.output_rate is None else f"{b.output_rate:.1f}"
        per_step = b.draft_tokens_per_step
        drafted = "—" if per_step is None else f"{per_step:.2f}"
        k = advised.get(b.low)
        thin = f" ({b.windows} window(s))" if b.thin else ""
        mark = " stalled" if b.low in stalled else ""
        rows.append(
            f'<tr class="{mark.strip() or "bin"}" data-running="{b.low}"><td>{b.label}{thin}</td>'
            f"<td>{b.time_share:.0%}</td><td>{speedup}</td><td>{_ratio(b.acceptance)}</td>"
            f"<td>{net}</td><td>{rate}{mark}</td><td>{drafted}</td>"
            f"<td>{'—' if k is None else k}</td></tr>"
        )
    return (
        f'<table class="curve" data-model="{escape(model)}"><caption>{escape(model)}: '
        f"load curve of the stored windows ({said})</caption>"
        "<tr><th>running requests</th><th>time</th><th>speedup</th><th>acceptance</th>"
        "<th>net</th><th>tokens/s per request</th><th>drafted per step</th><th>K advised</th>"
        "</tr>" + "".join(rows) + "</table>" + _schedule_line(model, schedule)
    )


def _schedule_line(model: str, schedule: DraftSchedule | None) -> str:
    """Under the curve: the K schedule it implies by batch size, the advice in the engine's
    own terms (vLLM's `num_speculative_tokens_per_batch_size`), and what it would have saved
    over the lookback; nothing without a schedule."""
    if schedule is None:
        return ""
    stake = schedule.at_stake_usd
    worth = "" if stake is None else f"; over the lookback: {_usd(stake, False, signed=True)}"
    return (
        f'<p class="schedule" data-model="{escape(model)}">K by batch size: '
        f"{escape(ranges_text(schedule.ranges))}. {escape(schedule.advice)}{worth}</p>"
    )


def _model(snapshot: EndpointSnapshot, a: Assessment) -> str:
    config = snapshot.config
    verdict = VERDICT_TEXT[a.verdict]
    basis = _basis(config.control, config.profile, a)
    tax_link = (
        f' (<a href="{RUNBOOK_URL}#speculationisatax">runbook</a>)' if a.verdict == "tax" else ""
    )
    unpriced = snapshot.usd_per_hour is None
    kind = "invoice" if config.billing_mode == "serverless" else "capacity"
    running_k = len(a.position_acceptance_ratio)
    k = a.recommended_speculative_tokens
    actual = _usd(a.cost_per_million_output_tokens_usd, unpriced)
    figures = [("$ per million output tokens", actual)]
    if a.draft_tokens is not None or a.drafts is not None:  # the figures of speculation
        figures = [
            ("$ per million output tokens", f"{actual} actual · {_without(a, unpriced)}"),
            (f"savings per hour ({kind})", _savings(a, unpriced)),
            ("acceptance", _acceptance(config.engine, a)),
            ("speedup", _speedup(config.engine, a)),
            ("plain decoding estimated from", _counterfactual(config, a)),
            (
                "recommended K",
                ("0: turn speculation off" if k == 0 else _plain(k))
                + (f" (running {running_k})" if running_k else ""),
            ),
        ]
    figures.insert(1, ("p99 TPOT", _tail(snapshot, a)))
    figures.append(("concurrency", f"{a.concurrency_requests:.1f} requests{_scheduled(a)}"))
    capacity = snapshot.capacities.get(a.model)
    if capacity is not None:
        figures += _capacity(capacity, config.control)
    # The money first, larger: the figure the eye lands on.
    cells = "".join(
        f"<div{' class=lead' * (i == 0)}><dt>{dt}</dt><dd>{dd}</dd></div>"
        for i, (dt, dd) in enumerate(figures)
    )
    return (
        f'<div class="model" data-model="{escape(a.model)}" data-verdict="{a.verdict}" '
        f'data-basis="{a.verdict_basis or ""}">'
        f'<h3>{escape(a.model)}: <span class="v-{a.verdict}">{verdict}</span>{tax_link} '
        f'<span class="muted">{basis}</span></h3><dl>{cells}</dl>{_settle(snapshot, a)}</div>'
    )


def _scheduled(a: Assessment) -> str:
    """Under a K schedule: the K it runs at this load, the one the window is assessed at,
    and whether the window ran two of its K (its figures then mix them)."""
    if a.scheduled_speculative_tokens is None:
        return ""
    two = "; ran two K, its figures mix them" if a.schedule_boundary else ""
    return f" (the schedule's K here: {a.scheduled_speculative_tokens}{two})"


def _without(a: Assessment, unpriced: bool) -> str:
    """The cost without speculation: a range where the speedup is uncertain, since one
    precise dollar figure would claim what the verdict does not know."""
    band = a.cost_per_million_no_speculation_band_usd
    if a.verdict == "uncertain" and band is not None:
        low, high = sorted(band)
        return f"{_usd(low, unpriced)} to {_usd(high, unpriced)} without speculation"
    without = _usd(a.cost_per_million_output_tokens_no_speculation_usd, unpriced)
    return f"{without} without speculation"


def _savings(a: Assessment, unpriced: bool) -> str:
    band = a.speculation_savings_band_usd
    if a.verdict == "uncertain" and band is not None:
        low, high = sorted(a.per_hour(v) or 0.0 for v in band)
        return (
            f"{_usd(low, unpriced, signed=True, unit='/h')} to "
            f"{_usd(high, unpriced, signed=True, unit='/h')}"
        )
    return _usd(a.per_hour(a.speculation_savings_usd), unpriced, signed=True, unit="/h")


def _acceptance(engine: str, a: Assessment) -> str:
    if "draft_tokens" in not_exposed(engine):  # SGLang, TGI: no drafted count
        length = a.acceptance_length_tokens
        derived = "" if length is None else f"; {length:.2f} tokens a step, derived"
        return f"— ({escape(engine)} does not count drafted tokens{derived})"
    # A break-even above 1 is no acceptance at all: the step's overhead alone outweighs it.
    against = (
        "no acceptance pays at this load"
        if a.no_acceptance_pays
        else f"it pays above {_ratio(a.breakeven_acceptance_ratio)}"
    )
    return f"{_ratio(a.acceptance_ratio)} of drafted tokens accepted; {against}"


def _speedup(engine: str, a: Assessment) -> str:
    measured = _times(a.speedup_measured_ratio)
    if "draft_tokens" in not_exposed(engine):
        return f"estimated — ({escape(engine)} does not count drafted tokens) · measured {measured}"
    return f"estimated {_times(a.speedup_ratio)} · measured {measured}"


def _settle(snapshot: EndpointSnapshot, a: Assessment) -> str:
    """For an uncertain verdict, what it turns on and what would settle it for this
    endpoint, cheapest first: settle.py's words, the same `spectax assess` prints, so the
    on-call reads one answer wherever they look; "" for a verdict that is settled."""
    said = turns_on(a)
    if said is None:
        return ""
    config = snapshot.config
    target = Target(
        name=config.name,
        model=a.model,
        url=config.url,
        engine=config.engine,
        method=config.speculation.method if config.speculation else None,
        has_control=config.control is not None,
    )
    steps = "".join(f"<li>{escape(step)}</li>" for step in settle_steps(target, a))
    what = f' (<a href="{escape(DOCS_URL)}">what is this?</a>)'
    return (
        f'<div class="settle" data-settle="{escape(a.model)}">'
        f"<p>Uncertain: it turns on this: {escape(said)}{what}.</p>"
        + (f"<p>What would settle it, cheapest first:</p><ol>{steps}</ol>" if steps else "")
        + "</div>"
    )


def _capacity(c: Capacity, control: str | None) -> list[tuple[str, str]]:
    """The KV cache: its headroom, the queue, and what the draft takes of it (capacity in
    requests, never money), each with where it comes from."""
    headroom = "—" if c.kv_headroom_ratio is None else f"{c.kv_headroom_ratio:.0%}"
    blocks = "" if c.kv_cache_blocks is None else f" of {c.kv_cache_blocks:,.0f} blocks"
    figures = [
        ("KV-cache headroom", f"{headroom}{blocks}"),
        (
            "waiting · preempted",
            f"{c.requests_waiting:.1f} requests · {c.preemptions_per_hour:,.0f}/h",
        ),
    ]
    if c.draft_blocks is not None:
        basis = (
            f"measured against {escape(control or '')}"
            if c.draft_blocks_basis == "measured"
            else "at least, from draft_weight_bytes"
            + (
                f" ({escape(control or '')} has fewer spare blocks than the weights alone"
                " take: not sized like this endpoint, so not a measure of the draft)"
                if c.control_blocks_disagree
                else ""
            )
        )
        share = "" if c.draft_kv_share_ratio is None else f" ({c.draft_kv_share_ratio:.1%})"
        figures.append(("draft takes", f"{c.draft_blocks:,.0f} blocks{share}, {basis}"))
    held, without = c.concurrency_capacity_requests, c.concurrency_capacity_no_draft_requests
    if held is not None:
        # Whole requests: a cache that holds 2,730.5 holds 2,730 (the report floors too).
        more = "" if without is None else f" · {math.floor(without):,} without the draft"
        figures.append(("KV cache holds", f"{math.floor(held):,} requests{more}"))
    return figures


def _tail(snapshot: EndpointSnapshot, a: Assessment) -> str:
    """p99 time per output token beside the verdict, against the SLO, with the latency
    verdict and its basis: the figure the on-call engineer is paged on."""
    latency = a.latency
    p99 = latency.seconds("tpot", "p99") if latency else None
    if p99 is None:
        return "— (no latency histogram buckets in the window)"
    text = f"{p99 * 1000:.1f} ms"
    slo = snapshot.config.latency_slo
    if slo is not None and slo.metric == "tpot" and slo.percentile == "p99":
        text += f" (SLO {slo.seconds * 1000:.1f} ms: {'broken' if p99 > slo.seconds else 'met'})"
    said = economics.latency_verdict(latency)
    return text + (f" · {escape(said)}" if said else "")


def _basis(control: str | None, profile: str | None, a: Assessment) -> str:
    """What the verdict rests on, in words a person reads at a glance, and how sure it is: a
    verdict on defaults alone is a guess, and the reader must see that before acting on it."""
    if a.verdict_basis is None:
        return "nothing to weigh"
    low, high = a.speedup_low_ratio, a.speedup_high_ratio
    if a.verdict_basis == "measured":  # the band is the measured speedup itself
        return f"measured against its control {escape(control or '')}"
    band = (
        ""
        if low is None or high is None
        else f" · speedup somewhere from {_times(low)} to {_times(high)}"
    )
    nothing_yet = (
        f"until its control {escape(control)} is measured (a full window with 10 finished"
        " requests on each side)"
        if control
        else "nothing measured yet (no control, no history before speculation, no profile)"
    )
    said = {
        "calibrated": "estimated from "
        + (
            f"its control {escape(control or '')}'s plain decoding"
            if a.model_source == "control"
            else "its own windows before speculation was on"
        ),
        "profile": f"estimated from the stored profile {escape(profile or '')}"
        + (" (a benchmark sweep)" if a.model_source == "sweep" else ""),
        "default": "a guess, "
        + nothing_yet
        + (
            "; the GPU's datasheet gives its ridge batch, the step overhead is assumed"
            if a.model_source == "roofline"
            else "; the GPU's ridge batch and the step overhead are assumed"
        ),
    }[a.verdict_basis]
    waiting = (
        "; measured once a full window has 10 finished requests on each side"
        if control and a.verdict_basis != "default"
        else ""
    )
    return f"{said}{band}{waiting}"


def _counterfactual(config: EndpointConfig, a: Assessment) -> str:
    """Where the cost of the same output without speculation came from, and the step
    overhead h (a speculative step's fixed cost beyond a plain one's) it used."""
    profile = config.profile
    if a.verdict_basis == "measured":  # the control's own time per token, this window
        h = "" if a.step_overhead_ratio is None else f" · step overhead {a.step_overhead_ratio:.2f}"
        return f"measured on its control {escape(config.control or '')}{h}, as the speedup implies"
    source = {
        "control": "its control's plain decoding",
        "baseline": "its own windows before speculation",
        "profile": f"the profile {escape(profile or '')}",
        "sweep": f"the profile {escape(profile or '')} (a benchmark sweep)",
        "roofline": "the GPU's datasheet (ridge batch)",
        "configured": "spectax's defaults",
    }.get(a.model_source, escape(a.model_source))
    if a.step_overhead_ratio is None:
        return f"{source} · step overhead not priced (no drafted-token count)"
    h = f"{a.step_overhead_ratio:.2f}"
    if a.model_source in ("roofline", "configured"):
        h += ", assumed"  # nothing measured h
    return f"{source} · step overhead {h}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _plain(value: int | None) -> str:
    return "—" if value is None else str(value)


def _usd(value: float | None, unpriced: bool, signed: bool = False, unit: str = "") -> str:
    """Dollars to the tenth of a cent; a savings figure carries its sign (negative: a tax)."""
    if value is None:
        return "— (no price configured)" if unpriced else "—"
    sign = ("+" if value >= 0 else "−") if signed else ("−" if value < 0 else "")
    return f"{sign}${abs(value):,.3f}{unit}"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def endpoint_states(snapshots: Mapping[str, EndpointSnapshot]) -> list[tuple[str, bool, str]]:
    """For the landing page, scraped and fleet endpoints alike; a target that echoes a
    credential into its page is blanked."""
    return [(n, s.up, logs.blank_secrets(s.last_error or "")) for n, s in snapshots.items()]
