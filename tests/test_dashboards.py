"""The Grafana dashboards: generated from grafanalib, valid against Grafana's schema.

The JSON Schema is generated from the npm package @grafana/schema and committed
(dashboards/schema/README.md), so no npm is needed here.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from promstack import (
    DASHBOARDS,
    PENDING_METRICS,
    dashboard_jsons,
    panel_queries,
    panels,
    rules,
)
from spectax.engines import ENGINES
from spectax.exposition import FAMILIES

SCHEMA = DASHBOARDS / "schema" / "dashboard.schema.json"
UIDS = {
    "spectax-paying.json": "spectax-paying",
    "spectax-cost.json": "spectax-cost",
    "spectax-health.json": "spectax-health",
}
TITLES = {
    "spectax-paying.json": "Speculative decoding: is it paying?",
    "spectax-cost.json": "Inference cost review",
    "spectax-health.json": "spectax health",
}
# What issue 6 asks each dashboard to show, as words its panel titles must contain.
PANELS = {
    "spectax-paying.json": [
        "is it paying",
        "acceptance against break-even and the warning threshold",
        "speedup: modelled and measured, with the band",
        "counterfactual source",
        "step overhead h",
        "concurrency against crossover",
        "load curve: speedup against running requests",
        "load curve crossover",
        "cost per million output tokens: actual against no speculation",
        "draft overhead by kind",
        "per-position acceptance",
        "recommended draft length",
    ],
    "spectax-cost.json": [
        "spend by endpoint",
        "cost per million output tokens",
        "savings (or tax) over the range",
        "estimate against billed",
        "cold starts",
        "cold-start cost",
    ],
    "spectax-health.json": [
        "endpoints up",
        "scrape duration",
        "billing sources up",
        "windows waiting for the store",
        "store write errors",
    ],
}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RUNBOOK = DASHBOARDS.parent / "alerts" / "runbook.md"
RUNBOOK_URL = "http://localhost:9837/runbook"  # alerts/install.py's default
SELECTOR = re.compile(r"\b([a-z_]+:spectax_[a-z_]+:[a-z0-9_]+|spectax_[a-z_]+|up)\b(\{[^}]*\})?")


def generate_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboards_generate", DASHBOARDS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validators.validator_for(loaded).check_schema(loaded)
    return loaded


def test_committed_json_is_what_the_sources_generate() -> None:
    generate = generate_module()
    sources = generate.sources()
    assert {generate.json_path(s).name for s in sources} == set(UIDS)
    for source in sources:
        committed = generate.json_path(source).read_text(encoding="utf-8")
        assert generate.render(source) == committed, (
            f"{source.name} changed: run python dashboards/generate.py and commit the JSON"
        )


@pytest.mark.parametrize("name", sorted(UIDS))
def test_dashboard_validates_against_grafana_schema(name: str, schema: dict[str, Any]) -> None:
    dashboard = dashboard_jsons()[name]
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in validator.iter_errors(dashboard)
    ]
    assert errors == []


def test_schema_rejects_what_grafana_would_not_know() -> None:
    """The schema is strict enough to matter: an unknown panel field fails."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    dashboard = dashboard_jsons()["spectax-paying.json"]
    dashboard["panels"][1]["span"] = 6  # grafanalib's legacy field, dropped on generation
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(dashboard, schema)


def test_uids_are_fixed_and_unique() -> None:
    dashboards = dashboard_jsons()
    assert {name: d["uid"] for name, d in dashboards.items()} == UIDS
    assert {name: d["title"] for name, d in dashboards.items()} == TITLES
    assert len(set(UIDS.values())) == len(UIDS)


@pytest.mark.parametrize("name", sorted(UIDS))
def test_variables_datasource_job_endpoint_model(name: str) -> None:
    dashboard = dashboard_jsons()[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "endpoint", "model", "runbook_url"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for var in ("job", "endpoint", "model"):
        assert variables[var]["type"] == "query"
        assert variables[var]["datasource"] == DATASOURCE
        assert variables[var]["includeAll"] and variables[var]["allValue"] == ".*"
    assert '$job"' in variables["endpoint"]["query"]
    assert '$endpoint"' in variables["model"]["query"]
    # A hidden setting, not a selector: the base of every panel's runbook link.
    runbook = variables["runbook_url"]
    assert (runbook["type"], runbook["hide"], runbook["query"]) == ("constant", 2, RUNBOOK_URL)


@pytest.mark.parametrize("name", sorted(UIDS))
def test_panels_and_queries(name: str) -> None:
    dashboard = dashboard_jsons()[name]
    titles = [p["title"].lower() for p in panels(dashboard) if p["type"] != "row"]
    for wanted in PANELS[name]:
        assert any(wanted in title for title in titles), f"{name}: no panel for {wanted!r}"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE
        assert panel["description"]
        assert panel["targets"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE
            assert target["refId"]


def labels_of(metric: str, recording_labels: dict[str, set[str]]) -> set[str]:
    if metric == "up":
        return {"job"}
    if metric in recording_labels:
        return recording_labels[metric]
    family = FAMILIES.get(metric)
    return set(family.labels) if family else {"endpoint"}  # pending: per endpoint or source


@pytest.mark.parametrize("name", sorted(UIDS))
def test_every_selector_honours_the_variables(name: str) -> None:
    """Each metric a panel reads is filtered by $job, and by $endpoint and $model where the
    metric has those labels; only known metrics are read."""
    recording_labels = {
        r["record"]: {"job", *r["record"].split(":")[0].split("_")}
        for r in rules()
        if "record" in r
    }
    known = set(FAMILIES) | set(recording_labels) | set(PENDING_METRICS) | {"up"}
    for title, expr in panel_queries(dashboard_jsons()[name]):
        for metric, selector in SELECTOR.findall(expr):
            assert metric in known, f"{title}: unknown metric {metric}"
            assert selector, f"{title}: {metric} without a selector"
            labels = labels_of(metric, recording_labels) & {"endpoint", "model"}
            if metric in PENDING_METRICS and metric.startswith("spectax_billing_"):
                labels = set()  # per billing source
            assert 'job=~"$job"' in selector, f"{title}: {metric}{selector}"
            for label in labels:
                assert f'{label}=~"${label}"' in selector, f"{title}: {metric}{selector}"


def test_grafana_provisioning() -> None:
    provider = yaml.safe_load((DASHBOARDS / "provisioning" / "dashboards.yml").read_text())
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"]
    datasource = yaml.safe_load(
        (DASHBOARDS / "provisioning" / "datasource.example.yml").read_text()
    )
    assert datasource["datasources"][0]["type"] == "prometheus"


def test_generate_check_mode(capsys: pytest.CaptureFixture[str]) -> None:
    assert generate_module().main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_dashboards_directory_has_only_known_json() -> None:
    assert sorted(p.name for p in DASHBOARDS.glob("*.json")) == sorted(UIDS)
    assert Path(SCHEMA).is_file()


def runbook_links(panel: dict[str, Any]) -> list[str]:
    """The runbook anchors a panel links to."""
    prefix = "${runbook_url}#"
    return [
        link["url"].removeprefix(prefix)
        for link in panel.get("links", [])
        if link["url"].startswith(prefix)
    ]


def test_panels_link_to_the_runbook_sections_of_their_alerts() -> None:
    """Every alert's section is linked from a panel, every link lands on a section, and
    every panel the runbook tells the on-call engineer to look at links back to it."""
    text = RUNBOOK.read_text(encoding="utf-8")
    sections = {title.lower() for title in re.findall(r"^## `?(\w+)`?$", text, re.M)}
    alerts = {rule["alert"].lower() for rule in rules() if "alert" in rule}
    all_panels = [p for d in dashboard_jsons().values() for p in panels(d) if p["type"] != "row"]
    linked = {anchor for p in all_panels for anchor in runbook_links(p)}
    assert linked == alerts
    assert linked <= sections
    named = set()
    for confirm in re.findall(r"\*\*Confirm\.\*\*(.*?)\*\*What to do", text, re.S):
        for phrase in re.findall(r"\*([^*]+)\*", confirm.replace("\\*", "")):
            named.add(" ".join(phrase.split()).lower())
    shown = [p for p in all_panels if any(p["title"].lower().startswith(n) for n in named)]
    assert len(shown) >= 15
    assert [p["title"] for p in shown if not runbook_links(p)] == []


def verdict_table() -> dict[str, Any]:
    (verdict,) = [
        p
        for p in panels(dashboard_jsons()["spectax-paying.json"])
        if p["title"].startswith("Is it paying?")
    ]
    return verdict


def column_mappings(table: dict[str, Any], column: str) -> list[dict[str, Any]]:
    (override,) = [
        o for o in table["fieldConfig"]["overrides"] if o["matcher"]["options"] == column
    ]
    return [m for prop in override["properties"] if prop["id"] == "mappings" for m in prop["value"]]


def test_the_verdict_of_an_endpoint_without_speculation_is_explained() -> None:
    """An empty verdict cell reads "no verdict: ...", and the panel says why."""
    verdict = verdict_table()
    special = [m["options"] for m in column_mappings(verdict, "Verdict") if m["type"] == "special"]
    text = "no verdict: no speculation configured, or no traffic"
    assert special == [{"match": "null+nan", "result": {"index": 3, "text": text}}]
    assert "no speculation configured" in verdict["description"]


@pytest.mark.parametrize(
    ("column", "label", "shown"),
    [
        ("Verdict", "verdict", {"tax": "TAX", "uncertain": "uncertain", "pays": "pays"}),
        (
            "Basis",
            "basis",
            {
                "measured": "measured",
                "calibrated": "calibrated",
                "profile": "profile",
                "default": "default (a guess)",
            },
        ),
    ],
)
def test_the_verdict_table_shows_each_verdict_and_basis_as_words(
    column: str, label: str, shown: dict[str, str]
) -> None:
    """The table codes spectax_verdict_info's label as a number (instant tables merge on
    shared labels only) and maps each code back to its word: every value spectax exports
    has one, and "no_drafts" is gone."""
    verdict = verdict_table()
    ref = {"Verdict": "A", "Basis": "B"}[column]
    (expr,) = [t["expr"] for t in verdict["targets"] if t["refId"] == ref]
    codes = dict(re.findall(rf'{label}="([a-z_]+)"\}} \* (\d)\)', expr))
    (values,) = [m["options"] for m in column_mappings(verdict, column) if m["type"] == "value"]
    assert {value: values[code]["text"] for value, code in codes.items()} == shown
    assert "no_drafts" not in json.dumps(dashboard_jsons())


def test_the_verdict_table_names_each_endpoints_engine() -> None:
    """A mixed fleet: the on-call sees which engine each row is (an engine without a drafted
    count has no acceptance), named as spectax_endpoint_info names it, for every engine."""
    verdict = verdict_table()
    columns = verdict["transformations"][1]["options"]["renameByName"]
    ref = next(key for key, name in columns.items() if name == "Engine").removeprefix("Value #")
    (expr,) = [t["expr"] for t in verdict["targets"] if t["refId"] == ref]
    codes = dict(re.findall(r'engine="([a-z]+)"\} \* (\d)\)', expr))
    assert set(codes) >= set(ENGINES)
    (values,) = [m["options"] for m in column_mappings(verdict, "Engine") if m["type"] == "value"]
    assert {engine: values[code]["text"] for engine, code in codes.items()} == {
        engine: engine for engine in codes
    }


def test_an_acceptance_the_engine_does_not_expose_says_so() -> None:
    """SGLang and TGI speculate without a drafted count: their row's acceptance cell reads
    "not exposed by the engine" (an acceptance length exists, an acceptance ratio does
    not), never a blank that reads like "no speculation" nor a 0 that looks real."""
    verdict = verdict_table()
    (expr,) = [t["expr"] for t in verdict["targets"] if t["refId"] == "C"]
    assert "spectax_acceptance_length_tokens" in expr and expr.endswith("* 0 + -1)")
    (values,) = [
        m["options"] for m in column_mappings(verdict, "Acceptance") if m["type"] == "value"
    ]
    assert values["-1"]["text"] == "not exposed by the engine"
    columns = verdict["transformations"][1]["options"]["renameByName"]
    assert "Acceptance length" in columns.values()


def test_no_panel_plots_a_break_even_acceptance_above_1() -> None:
    """Above 1 a break-even acceptance is no acceptance at all (issue 29): every query of it
    keeps it at 1 or below, and where none would pay the table's cell says so in words."""
    queries = [
        (title, expr)
        for dashboard in dashboard_jsons().values()
        for title, expr in panel_queries(dashboard)
        if "spectax_breakeven_acceptance_ratio" in expr
    ]
    assert queries
    for title, expr in queries:
        assert re.search(r"spectax_breakeven_acceptance_ratio\{[^}]*\} <= 1\)", expr), title
    verdict = verdict_table()
    (expr,) = [t["expr"] for t in verdict["targets"] if t["refId"] == "D"]
    assert "spectax_no_acceptance_pays" in expr and expr.endswith("* 0 + -1)")
    (values,) = [
        m["options"] for m in column_mappings(verdict, "Break-even") if m["type"] == "value"
    ]
    assert values["-1"]["text"] == "no acceptance pays here"


def test_the_paying_dashboard_shows_what_an_uncertain_verdict_turns_on() -> None:
    """The break-even h and B* beside the h and B* in force, in the row that says how the
    verdict was reached, each panel linked to the runbook section that says how to settle
    it."""
    paying = dashboard_jsons()["spectax-paying.json"]
    wanted = {
        "spectax_breakeven_step_overhead_ratio": "spectax_step_overhead_ratio",
        "spectax_breakeven_ridge_batch_requests": "spectax_ridge_batch_requests",
    }
    for breakeven, in_force in wanted.items():
        (panel,) = [
            p
            for p in panels(paying)
            if any(breakeven in t.get("expr", "") for t in p.get("targets", []))
        ]
        exprs = " ".join(t["expr"] for t in panel["targets"])
        assert re.search(rf"\b{in_force}\{{", exprs), panel["title"]
        links = json.dumps(panel.get("links", []))
        assert "speculationmaybeatax" in links, panel["title"]


def test_generate_sets_the_runbook_url_once_for_every_panel(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = "https://wiki.example.com/oncall/spectax-runbook"
    assert generate_module().main(["--runbook-url", base, "--out", str(tmp_path)]) == 0
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    for name, committed in dashboard_jsons().items():
        written = json.loads((tmp_path / name).read_text(encoding="utf-8"))
        jsonschema.validate(written, schema)
        (variable,) = [v for v in written["templating"]["list"] if v["name"] == "runbook_url"]
        assert variable["query"] == variable["current"]["value"] == base
        # Only the variable differs: the links read it.
        variable["query"], variable["current"] = (
            RUNBOOK_URL,
            {
                "selected": True,
                "text": RUNBOOK_URL,
                "value": RUNBOOK_URL,
            },
        )
        assert written == committed
    with pytest.raises(SystemExit):
        generate_module().main(["--runbook-url", base])  # would rewrite the committed JSON
    assert "--runbook-url needs --out" in capsys.readouterr().err
