"""docs/economics.md's worked example, computed with spectax.economics.

The page explains the model in prose; this test keeps its numbers honest: every figure
of the example's table is recomputed by the package and must round to what is printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spectax import economics
from spectax.economics import Assessment

DOC = Path(__file__).resolve().parent.parent / "docs" / "economics.md"
README = DOC.parent.parent / "README.md"
SECONDS, USD_PER_GPU_HOUR = 300.0, 2.5
# The table's rows -> how each is read from an assessment.
FIGURES = {
    "acceptance alpha": lambda a: a.acceptance_ratio,
    "acceptance length tau": lambda a: a.acceptance_length_tokens,
    "break-even alpha*": lambda a: a.breakeven_acceptance_ratio,
    "modelled speedup S": lambda a: a.speedup_ratio,
    "crossover concurrency B_x": lambda a: a.crossover_concurrency_requests,
    "recommended draft length K": lambda a: a.recommended_speculative_tokens,
    "draft compute share": lambda a: a.draft_compute_share_ratio,
    "rejected tokens share": lambda a: a.rejected_share_ratio,
    "$ per M output tokens": lambda a: a.cost_per_million_output_tokens_usd,
    "$ per M output tokens without speculation": lambda a: (
        a.cost_per_million_output_tokens_no_speculation_usd
    ),
    "savings $/h": lambda a: a.per_hour(a.speculation_savings_usd),
    "verdict": lambda a: a.verdict,
}


def example(concurrency: float) -> Assessment:
    """The example's window: EAGLE (c = 0.05), B* = 32 and h = 0.1 known (a sweep profile of
    this method that fits exactly: its band is its point), one GPU at $2.50/h, busy 5 min."""
    traffic = economics.Traffic(
        output_tokens=2800,
        prompt_tokens=0,
        concurrency=concurrency,
        drafts=1000,
        draft_tokens=3000,
        accepted_tokens=1800,
        accepted_per_position=(800, 600, 400),
    )
    spend = economics.spend_estimate_usd(USD_PER_GPU_HOUR, 1, SECONDS)
    money = economics.Money(seconds=SECONDS, spend_usd=spend, busy_spend_usd=spend)
    known = economics.StepModel(
        ridge_batch=32,
        step_overhead_ratio=0.1,
        source="sweep",
        relative_error=0.0,
        overhead_known=True,
    )
    params = economics.Parameters(draft_cost_ratio=0.05, step_model=known)
    return economics.assess_model("m", traffic, params, money)


def table() -> dict[str, tuple[str, str]]:
    """The worked example's table: figure -> (printed at B = 8, printed at B = 48)."""
    text = DOC.read_text(encoding="utf-8").split("## Worked example", 1)[1]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \|$", text, re.M)
    return {name: (low, high) for name, low, high in rows if name != "figure"}


def test_the_worked_example_lists_every_figure() -> None:
    assert set(table()) == set(FIGURES)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_the_worked_examples_figures_are_what_spectax_computes(name: str) -> None:
    for concurrency, printed in zip((8.0, 48.0), table()[name], strict=True):
        value = FIGURES[name](example(concurrency))
        if isinstance(value, str):
            assert printed == value, (name, concurrency)
            continue
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        assert value is not None, (name, concurrency)
        assert round(float(value), decimals) == float(printed), (name, concurrency, value)


def test_the_readme_links_the_economics_inside_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    assert "../shared/" not in text
    assert "(docs/economics.md)" in text


def test_the_docs_pages_link_the_economics_as_a_page_of_the_site() -> None:
    """The pages cut from the README link it as `economics.md` (a link MkDocs checks), never
    as `docs/economics.md` (which is no page of the site) nor `../shared/`."""
    pages = [p for p in DOC.parent.glob("*.md") if p != DOC and not p.is_symlink()]
    assert len(pages) > 10
    linking = {p.name for p in pages if "](economics.md" in p.read_text(encoding="utf-8")}
    assert {"computes.md", "configuration.md", "architecture.md", "model.md"} <= linking
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "../shared/" not in text, page.name
        assert "](docs/economics.md" not in text, page.name
