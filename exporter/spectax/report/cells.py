"""The text of one table cell: money, counts, ratios, changes, with a dash for what is undefined.

Markdown and HTML show the same cells (`spectax.report.tables` lays them out).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from spectax.engines import ENGINES, not_exposed
from spectax.report.build import EndpointReport
from spectax.report.figures import Figures
from spectax.report.recommend import Recommendation

DASH = "—"


def usd(value: Decimal | float | None, places: int = 2) -> str:
    if value is None:
        return DASH
    v = float(value)
    if round(v, places) == 0:
        v = 0.0
    sign = "-" if v < 0 else ""
    return f"{sign}${abs(v):,.{places}f}"


def usd_signed(value: float | None) -> str:
    if value is None:
        return DASH
    return ("+" if round(value, 2) > 0 else "") + usd(value)


def per_million(value: float | None) -> str:
    if value is None:
        return DASH
    return usd(value, 3 if abs(value) < 10 else 2)


def count(value: int | None) -> str:
    return DASH if value is None else f"{value:,}"


def cold_starts_cell(f: Figures) -> str:
    """The restarts counted and, when some went unseen, how long no scrape saw the old
    process across them (the review's "N hours unobserved"; its traffic then is lost)."""
    seconds = f.unobserved_seconds
    if seconds <= 0:
        return count(f.cold_starts)
    span = f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds:,.0f} s"
    return f"{count(f.cold_starts)} ({span} unobserved)"


def ratio(value: float | None, places: int = 3) -> str:
    return DASH if value is None else f"{value:.{places}f}"


def acceptance_cell(f: Figures, engine: str) -> str:
    """The acceptance ratio, or why there is none: SGLang and TGI count no drafted tokens."""
    if f.acceptance is None and f.speculating and "draft_tokens" in not_exposed(engine):
        return f"not exposed by {engine}"
    return ratio(f.acceptance)


def acceptance_length_cell(f: Figures, engine: str) -> str:
    """Tokens per verify step, marked where the engine's drafts are derived, not counted."""
    text = ratio(f.acceptance_length, 2)
    capability = (
        ENGINES[engine].capabilities.get("acceptance_length") if engine in ENGINES else None
    )
    if f.acceptance_length is not None and capability and capability.support == "derived":
        return f"{text} (derived)"
    return text


def percent(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}%"


def hours_share(hours: int, share: float | None) -> str:
    return f"{hours:,} ({percent(share)})" if share is not None else DASH


def band_text(band: tuple[float, float] | None) -> str:
    if band is None:
        return DASH
    low, high = band
    return f"{low:.3f}" if low == high else f"{low:.3f} to {high:.3f}"


def savings_text(value: float, semantics: str) -> str:
    """Net savings with their meaning: capacity freed (provisioned) or invoice money."""
    amount = usd_signed(value)
    if semantics == "capacity":
        return f"{amount} capacity freed" if value >= 0 else f"{amount} capacity lost (tax)"
    if semantics == "invoice":
        return f"{amount} saved on the invoice" if value >= 0 else f"{amount} tax on the invoice"
    return f"{amount} of GPU time (billing mode unknown)"


# A total over endpoints of two kinds shows no savings figure: the rows per kind do.
BY_KIND = f"{DASH} (two kinds, never added: see the totals per kind)"
KIND_LABELS = {
    "invoice": "serverless: invoice money",
    "capacity": "provisioned: capacity freed",
    "unknown": "billing mode unknown",
}


def kind_total_name(kind: str) -> str:
    return f"**Total, {KIND_LABELS[kind]}**"


def net_cell(f: Figures, semantics: str | None = None) -> str:
    """The net-savings cell of one endpoint, or of a total (one kind, else `BY_KIND`)."""
    if not f.speculating:
        return f"{DASH} (no speculation)"
    if not f.priced:
        return f"{DASH} (no price)"
    if f.mixed:
        return BY_KIND
    if f.savings is None and f.drafts > 0 and f.draft_tokens == 0:  # SGLang, TGI
        return f"{DASH} (no drafted-token count: a control would measure it)"
    if f.savings is None:
        return f"{DASH} (no drafts)"
    text = savings_text(f.savings, semantics or next(iter(f.kinds), "unknown"))
    # The savings are the windows' point estimates; when most of those windows were judged
    # uncertain the cell says so, so that it never reads as "paid" beside 0 windows paid.
    if f.verdict == "uncertain":
        text += f", uncertain ({percent(f.share_uncertain)} of windows)"
    elif f.single_endpoint and f.verdict == "mixed":
        text += f", mixed ({percent(f.share_paid)} of windows paid, {percent(f.share_tax)} tax)"
    return text


def unless_mixed(f: Figures, text: str) -> str:
    """A total's figure of one kind of money, or `BY_KIND` when the total spans two."""
    return BY_KIND if f.mixed else text


def change(before: float | None, after: float | None, fmt: str = "usd") -> str:
    """`before → after (+x.x%)`."""
    render: dict[str, Callable[[float | None], str]] = {
        "usd": usd,
        "pm": per_million,
        "ratio": ratio,
        "pct": percent,
        "count": lambda v: count(None if v is None else round(v)),
    }
    if before is None and after is None:
        return DASH
    text = f"{render[fmt](before)} → {render[fmt](after)}"
    if before is not None and after is not None and before != 0 and fmt in ("usd", "pm", "count"):
        text += f" ({100 * (after - before) / abs(before):+.1f}%)"
    elif before is not None and after is not None and fmt in ("ratio", "pct"):
        points = 100 * (after - before) if fmt == "pct" else after - before
        text += f" ({points:+.1f} pts)" if fmt == "pct" else f" ({points:+.3f})"
    return text


def billing_label(e: EndpointReport) -> str:
    if not e.info.configured:
        return "not configured"
    return e.info.billing_mode or DASH


def stake_phrase(r: Recommendation) -> str:
    """The dollars at stake in words, for a heading."""
    if r.usd_at_stake is None:
        return "dollars unknown: no price configured"
    return f"{stake_text(r)} this month"


def stake_text(r: Recommendation) -> str:
    if r.usd_at_stake is None:
        return f"{DASH} (no price)"
    amount = usd(r.usd_at_stake)
    if r.semantics == "capacity":
        return f"{amount} of GPU capacity"
    if r.semantics == "invoice":
        return f"{amount} on the invoice"
    return f"{amount} of GPU time"
