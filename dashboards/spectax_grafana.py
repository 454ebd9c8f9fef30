"""Building blocks shared by the spectax dashboards (grafanalib 0.7.1).

grafanalib still emits some Grafana 6-era fields (``rows``, ``style``, panel ``span``,
``null`` for every unset option, ...). :class:`SpectaxDashboard` drops exactly those
(listed below) so the JSON validates against the committed JSON Schema generated from
``@grafana/schema`` (see ``schema/README.md``); everything else is grafanalib's output.
:class:`Table`, :class:`BarGauge`, :class:`Row` and :class:`PromTarget` are written here
because grafanalib's versions emit pre-Grafana-8 options.

Every query filters on the template variables ``$job``, ``$endpoint`` and ``$model`` with
``=~`` (their "All" value is ``.*``) and every panel reads the ``$datasource`` variable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import attr
from grafanalib import core
from grafanalib._gen import DashboardEncoder

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39  # Grafana 10.4+; the JSON below uses that version's panel options
TAGS = ["spectax"]
# Where panels' runbook links point until the operator sets the `runbook_url` variable
# (generate.py --runbook-url): the runbook spectax serves at /runbook, as the committed
# alerts do, so a panel and the alert it explains open the same section.
RUNBOOK_URL = "http://localhost:9837/runbook"

# Fields grafanalib emits that current Grafana no longer has (schema: additionalProperties
# false). Dropped by SpectaxDashboard; nothing else is rewritten.
LEGACY_DASHBOARD_KEYS = ("__inputs", "hideControls", "rows", "sharedCrosshair", "style")
LEGACY_TIMEPICKER_KEYS = ("time_options",)
LEGACY_PANEL_KEYS = ("editable", "error", "height", "minSpan", "span")
LEGACY_VARIABLE_KEYS = ("useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min", "auto_count")

SEL_JOB = 'job=~"$job"'
SEL_ENDPOINT = 'job=~"$job", endpoint=~"$endpoint"'
SEL_MODEL = 'job=~"$job", endpoint=~"$endpoint", model=~"$model"'


def _no_nulls(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _modern_panel(panel: dict[str, Any]) -> dict[str, Any]:
    panel = _no_nulls({k: v for k, v in panel.items() if k not in LEGACY_PANEL_KEYS})
    field_config = panel.get("fieldConfig")
    if field_config:
        defaults = _no_nulls(field_config.get("defaults", {}))
        if "custom" in defaults:
            defaults["custom"] = _no_nulls(defaults["custom"])
        field_config["defaults"] = defaults
    if "panels" in panel:
        panel["panels"] = [_modern_panel(p) for p in panel["panels"]]
    return panel


def _modern_variable(variable: dict[str, Any]) -> dict[str, Any]:
    variable = _no_nulls({k: v for k, v in variable.items() if k not in LEGACY_VARIABLE_KEYS})
    current = variable.get("current")
    if current is not None and current.get("value") is None:
        del variable["current"]  # no saved selection: Grafana picks the default
    elif current is not None:
        current.pop("tags", None)
    return variable


def modernize(data: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's dashboard JSON without the legacy fields listed above."""
    data = _no_nulls({k: v for k, v in data.items() if k not in LEGACY_DASHBOARD_KEYS})
    data["timepicker"] = _no_nulls(
        {k: v for k, v in data["timepicker"].items() if k not in LEGACY_TIMEPICKER_KEYS}
    )
    data["panels"] = [_modern_panel(p) for p in data["panels"]]
    data["templating"]["list"] = [_modern_variable(v) for v in data["templating"]["list"]]
    return data


@attr.s
class SpectaxDashboard(core.Dashboard):  # type: ignore[misc]
    """A grafanalib Dashboard whose JSON is the modern subset (see :func:`modernize`)."""

    def to_json_data(self) -> dict[str, Any]:
        raw = json.loads(json.dumps(super().to_json_data(), cls=DashboardEncoder))
        return modernize(raw)


def runbook_link(alert: str) -> dict[str, Any]:
    """A panel link to the alert's section of the runbook, under the `runbook_url` variable
    (the anchors are the alerts' names in lower case, as the rules' runbook_url)."""
    return {
        "asDropdown": False,
        "icon": "doc",
        "includeVars": False,
        "keepTime": False,
        "tags": [],
        "targetBlank": True,
        "title": f"Runbook: {alert}",
        "tooltip": "What it means and what to do (alerts/runbook.md)",
        "type": "link",
        "url": f"${{runbook_url}}#{alert.lower()}",
    }


def with_runbook_links(panels: list[Any], runbook: Mapping[str, str]) -> list[Any]:
    """Panels whose title is in `runbook` (title -> alert name) link to its runbook section."""
    unknown = set(runbook) - {p.title for p in panels if not isinstance(p, Row)}
    assert not unknown, f"runbook links for panels that do not exist: {unknown}"
    return [
        p
        if isinstance(p, Row) or p.title not in runbook
        else attr.evolve(p, links=[runbook_link(runbook[p.title])])
        for p in panels
    ]


def dashboard(
    title: str,
    uid: str,
    description: str,
    cells: Sequence[Cell | Row],
    runbook: Mapping[str, str],
    **kw: Any,
) -> Any:
    """A spectax dashboard: fixed uid, the variables, links to its siblings and the runbook."""
    return SpectaxDashboard(
        title=title,
        uid=uid,
        description=description,
        tags=TAGS,
        timezone="utc",
        refresh="30s",
        schemaVersion=SCHEMA_VERSION,
        graphTooltip=core.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        editable=True,
        templating=core.Templating(list=variables()),
        links=[
            core.DashboardLink(
                title="spectax",
                type="dashboards",
                tags=TAGS,
                asDropdown=True,
                includeVars=True,
                keepTime=True,
            )
        ],
        panels=with_runbook_links(layout(cells), runbook),
        **kw,
    ).auto_panel_ids()


def variables() -> list[core.Template]:
    def query(name: str, label: str, q: str) -> core.Template:
        template = core.Template(
            name=name,
            label=label,
            query=q,
            dataSource=DATASOURCE,
            includeAll=True,
            multi=True,
            allValue=".*",
            default="$__all",
            refresh=core.REFRESH_ON_TIME_RANGE_CHANGE,
            sort=core.SORT_ALPHA_IGNORE_CASE_ASC,
        )
        template._current = {"selected": True, "text": ["All"], "value": ["$__all"]}
        return template

    return [
        core.Template(
            name="datasource",
            label="Data source",
            type="datasource",
            query="prometheus",
            default="default",
        ),
        query("job", "Job", "label_values(spectax_build_info, job)"),
        query("endpoint", "Endpoint", 'label_values(spectax_endpoint_info{job=~"$job"}, endpoint)'),
        query(
            "model",
            "Model",
            'label_values(spectax_output_tokens_total{job=~"$job", endpoint=~"$endpoint"}, model)',
        ),
        core.Template(
            name="runbook_url",
            label="Runbook",
            type="constant",
            query=RUNBOOK_URL,
            default=RUNBOOK_URL,
            hide=2,  # a setting, not a selector: set it once (dashboards/README.md)
        ),
    ]


@attr.s
class PromTarget:
    """A Prometheus query as Grafana 10+ saves it."""

    expr: str = attr.ib()
    legendFormat: str = attr.ib(default="")
    refId: str = attr.ib(default="A")
    instant: bool = attr.ib(default=False)
    format: str = attr.ib(default="time_series")

    def to_json_data(self) -> dict[str, Any]:
        return {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "format": self.format,
            "instant": self.instant,
            "legendFormat": self.legendFormat,
            "range": not self.instant,
            "refId": self.refId,
        }


def targets(*queries: tuple[str, str], instant: bool = False, table: bool = False) -> list[Any]:
    """(expr, legend) pairs as targets A, B, C, ..."""
    return [
        PromTarget(
            expr=expr,
            legendFormat=legend,
            refId=chr(ord("A") + i),
            instant=instant,
            format="table" if table else "time_series",
        )
        for i, (expr, legend) in enumerate(queries)
    ]


def steps(*pairs: tuple[str, float | None]) -> list[dict[str, Any]]:
    """Threshold steps: the first one's value is None (from -infinity)."""
    return [{"color": color, "value": value} for color, value in pairs]


def by_name(name: str, **properties: Any) -> dict[str, Any]:
    return {
        "matcher": {"id": "byName", "options": name},
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in properties.items()],
    }


def by_regexp(regexp: str, **properties: Any) -> dict[str, Any]:
    return {
        "matcher": {"id": "byRegexp", "options": regexp},
        "properties": [{"id": k.replace("__", "."), "value": v} for k, v in properties.items()],
    }


DASHED = {"dash": [10, 10], "fill": "dash"}


def timeseries(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    *,
    unit: str = "none",
    width: int = 12,
    height: int = 8,
    min_value: int | None = None,
    max_value: int | None = None,
    threshold_steps: Iterable[tuple[str, float | None]] = (("green", None),),
    threshold_style: str = "off",
    overrides: Sequence[dict[str, Any]] = (),
    stacked: bool = False,
    draw: str = "line",
) -> Cell:
    panel = core.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets(*queries),
        unit=unit,
        valueMin=min_value,
        valueMax=max_value,
        thresholds=steps(*threshold_steps),
        thresholdsStyleMode=threshold_style,
        overrides=list(overrides),
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "mean", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        stacking={"mode": "normal" if stacked else "none", "group": "A"},
        fillOpacity=30 if stacked else 0,
        drawStyle=draw,
        spanNulls=False,
        maxDataPoints=None,
    )
    return Cell(panel, width, height)


def stat(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    *,
    unit: str = "none",
    width: int = 6,
    height: int = 6,
    threshold_steps: Iterable[tuple[str, float | None]] = (("green", None),),
    mappings: Sequence[dict[str, Any]] = (),
    decimals: int | None = None,
) -> Cell:
    panel = core.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets(*queries, instant=True),
        format=unit,
        thresholds=steps(*threshold_steps),
        mappings=list(mappings),
        decimals=decimals,
        colorMode="background",
        graphMode="none",
        reduceCalc="lastNotNull",
        textMode="value_and_name",
        noValue="no data",
        maxDataPoints=None,
    )
    return Cell(panel, width, height)


@attr.s
class Table(core.Panel):  # type: ignore[misc]
    """A Grafana 10+ table: cell options per field, overrides and transformations."""

    unit: str = attr.ib(default="none")
    overrides: list[dict[str, Any]] = attr.ib(factory=list)
    sortBy: list[dict[str, Any]] = attr.ib(factory=list)

    def to_json_data(self) -> dict[str, Any]:
        return self.panel_json(
            {
                "fieldConfig": {
                    "defaults": {
                        "custom": {
                            "align": "auto",
                            "cellOptions": {"type": "auto"},
                            "filterable": True,
                        },
                        "unit": self.unit,
                    },
                    "overrides": self.overrides,
                },
                "options": {
                    "cellHeight": "sm",
                    "footer": {"show": False, "reducer": ["sum"], "fields": ""},
                    "showHeader": True,
                    "sortBy": self.sortBy,
                },
                "type": "table",
            }
        )


@attr.s
class BarGauge(core.Panel):  # type: ignore[misc]
    """A Grafana 10+ bar gauge (grafanalib's emits the Grafana 6 `fieldOptions`)."""

    unit: str = attr.ib(default="none")
    minValue: float | None = attr.ib(default=None)
    maxValue: float | None = attr.ib(default=None)
    colorMode: str = attr.ib(default="thresholds")

    def to_json_data(self) -> dict[str, Any]:
        return self.panel_json(
            {
                "fieldConfig": {
                    "defaults": {
                        "color": {"mode": self.colorMode},
                        "min": self.minValue,
                        "max": self.maxValue,
                        "unit": self.unit,
                    },
                    "overrides": [],
                },
                "options": {
                    "displayMode": "gradient",
                    "minVizHeight": 16,
                    "minVizWidth": 8,
                    "namePlacement": "auto",
                    "orientation": "horizontal",
                    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "showUnfilled": True,
                    "sizing": "auto",
                    "valueMode": "color",
                },
                "type": "bargauge",
            }
        )


@attr.s
class Row:
    """A dashboard row (expanded): title, position and id, as the RowPanel schema allows."""

    title: str = attr.ib()
    id: int | None = attr.ib(default=None)
    gridPos: Any = attr.ib(default=None)

    def _map_panels(self, f: Any) -> Any:
        return f(self)

    def to_json_data(self) -> dict[str, Any]:
        return {
            "collapsed": False,
            "gridPos": self.gridPos,
            "id": self.id,
            "panels": [],
            "title": self.title,
            "type": "row",
        }


def table(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    *,
    transformations: list[dict[str, Any]],
    overrides: Sequence[dict[str, Any]] = (),
    sort_by: str | None = None,
    width: int = 24,
    height: int = 8,
) -> Cell:
    panel = Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets(*queries, instant=True, table=True),
        transformations=transformations,
        overrides=list(overrides),
        thresholds=steps(("green", None)),
        sortBy=[{"displayName": sort_by, "desc": False}] if sort_by else [],
        maxDataPoints=None,
    )
    return Cell(panel, width, height)


def bargauge(
    title: str,
    description: str,
    queries: Sequence[tuple[str, str]],
    *,
    unit: str = "none",
    min_value: float | None = None,
    max_value: float | None = None,
    threshold_steps: Iterable[tuple[str, float | None]] = (("green", None),),
    color_mode: str = "thresholds",
    width: int = 12,
    height: int = 8,
) -> Cell:
    panel = BarGauge(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets(*queries, instant=True),
        unit=unit,
        minValue=min_value,
        maxValue=max_value,
        colorMode=color_mode,
        thresholds=steps(*threshold_steps),
        maxDataPoints=None,
    )
    return Cell(panel, width, height)


def row(title: str) -> Row:
    return Row(title=title)


@dataclass(frozen=True)
class Cell:
    """A panel and its size in grid units (24 columns wide)."""

    panel: Any
    width: int
    height: int


def layout(cells: Sequence[Cell | Row]) -> list[Any]:
    """Place panels left to right, wrapping at 24 columns; a Row starts a new line."""
    x = y = line_height = 0
    placed = []
    for cell in cells:
        if isinstance(cell, Row):
            y += line_height
            placed.append(attr.evolve(cell, gridPos=core.GridPos(h=1, w=24, x=0, y=y)))
            x, y, line_height = 0, y + 1, 0
            continue
        if x + cell.width > 24:
            x, y, line_height = 0, y + line_height, 0
        grid = core.GridPos(h=cell.height, w=cell.width, x=x, y=y)
        placed.append(attr.evolve(cell.panel, gridPos=grid))
        x += cell.width
        line_height = max(line_height, cell.height)
    return placed
