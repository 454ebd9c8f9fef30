"""End to end on real monitoring: spectax → Prometheus → Alertmanager → webhook.

A real `spectax run` process watches the simulated vLLM servers (code-assistant pays,
chat-creative is a tax, chat-control has no speculation). A real Prometheus (Debian
package) scrapes it every second and evaluates the shipped rule files; a real
Alertmanager routes with the shipped example tree to a webhook receiver in this test.

The rule files are used as shipped, except that the tax page's and the acceptance
warning's `for:` is shortened to 2 s (production: 10 m, see alerts/runbook.md), so the
whole chain fits in well under a minute. The time from spectax's start to the page on the webhook is
printed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml

from e2e import Spectax, write_config
from promstack import (
    ALERTS,
    PENDING_METRICS,
    RULE_FILES,
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    alertmanager_config,
    binary,
    concrete,
    dashboard_jsons,
    free_port,
    panel_queries,
    rules,
    run_tool,
    wait_until,
)
from spectax.exposition import FAMILIES
from spectax.simulate import DEMO_PROFILES, SimulatedFleet, start_simulated_servers
from spectax.simulate.demo_fleet import demo_endpoints
from spectax.simulate.focus_export import write_focus_export

pytestmark = pytest.mark.e2e
in_module_loop = pytest.mark.asyncio(loop_scope="module")  # the stack lives for the module

# The alerts whose `for:` the test shortens, and to what.
E2E_FOR = {
    "SpeculationIsATax": "2s",
    "SpecDecodeAcceptanceBelowThreshold": "2s",
    "SpeculationHurtsTailLatency": "2s",
}
PAGE_RECEIVER = "pager"  # the example Alertmanager config's receiver for severity=page
TAX, PAYS, CONTROL = "chat-creative", "code-assistant", "chat-control"
# The demo servers, except that the control's engine reloads in 2 s instead of 30 s when
# the panel test restarts it (a cold start for the cold-start panels to show), and without
# office-chat, whose 8-minute load cycle makes it a tax (its alerts firing) at its peak and
# not at its trough: these tests tell the tax endpoint from the others at any moment.
SWINGING = "office-chat"
PROFILES = {
    **{name: p for name, p in DEMO_PROFILES.items() if name != SWINGING},
    CONTROL: replace(DEMO_PROFILES[CONTROL], cold_start_s=2.0),
}
TIMEOUT = 45.0
# Every endpoint's objective: p99 TPOT at most 10 ms, which every simulated server breaks
# (20-300 ms); only chat-creative's speculation makes it worse (measured against its
# control), so only chat-creative's breach is speculation's doing.
LATENCY_SLO = {"metric": "tpot", "quantile": 0.99, "seconds": 0.01}


def e2e_rule_files(workdir: Path) -> list[Path]:
    """The shipped rule files, with only the E2E_FOR alerts' `for:` shortened."""
    out = []
    for path in RULE_FILES:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for group in data["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") in E2E_FOR:
                    rule["for"] = E2E_FOR[rule["alert"]]
        copy = workdir / path.name
        copy.write_text(yaml.safe_dump(data, sort_keys=False))
        out.append(copy)
    return out


def prometheus_config(rule_files: list[Path], spectax_port: int, am_port: int) -> dict[str, Any]:
    """alerts/prometheus.example.yml, pointed at this test's processes, every second."""
    config = yaml.safe_load((ALERTS / "prometheus.example.yml").read_text(encoding="utf-8"))
    config["global"] = {
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "evaluation_interval": "1s",
    }
    config["rule_files"] = [str(path) for path in rule_files]
    config["alerting"]["alertmanagers"][0]["static_configs"] = [
        {"targets": [f"127.0.0.1:{am_port}"]}
    ]
    (job,) = config["scrape_configs"]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{spectax_port}"]}]
    return config


@dataclass
class Stack:
    fleet: SimulatedFleet
    spectax: Spectax
    prometheus: Prometheus
    alertmanager: Alertmanager
    receiver: WebhookReceiver
    spectax_started_at: float  # time.monotonic()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    for name in ("prometheus", "alertmanager", "promtool"):
        binary(name)  # skip (or fail in CI) before starting anything
    workdir = tmp_path_factory.mktemp("promstack")
    fleet = await start_simulated_servers(PROFILES)
    receiver = WebhookReceiver()
    (workdir / "spectax").mkdir()
    port = free_port()
    bill = write_focus_export(workdir / "spectax" / "focus", CONTROL, Decimal("2.5"))
    endpoints = demo_endpoints(dict(fleet.urls), PROFILES)
    for endpoint in endpoints:
        endpoint["latency_slo"] = LATENCY_SLO
    # The load curves binned every 3 s, at this stack's pace (1 s scrapes, 6 s windows), as
    # the default 5 minutes is at a 15 s scrape's: their panels have data within the test.
    config = write_config(
        workdir / "spectax",
        port,
        endpoints,
        window="6s",
        billing=[bill],
        load_curve={"refresh_interval": "3s"},
    )
    spectax = Spectax(config, port)
    alertmanager: Alertmanager | None = None
    prometheus: Prometheus | None = None
    try:
        await receiver.start()
        alertmanager = Alertmanager(workdir / "alertmanager", alertmanager_config(receiver))
        rule_files = e2e_rule_files(workdir)
        prometheus = Prometheus(
            workdir / "prometheus",
            prometheus_config(rule_files, spectax.port, alertmanager.port),
        )
        await asyncio.gather(alertmanager.start(), prometheus.start())
        await asyncio.gather(alertmanager.wait_ready(), prometheus.wait_ready())

        # Prometheus is up and knows its target (down until spectax listens): from now
        # on, the time to the page is spectax's and the rules', not Prometheus' start-up.
        async def target_known() -> bool:
            assert prometheus is not None
            return bool(await prometheus.active_targets())

        await wait_until(target_known, 15, "Prometheus to load its scrape target", [prometheus])
        started = time.monotonic()
        await spectax.start()
        yield Stack(fleet, spectax, prometheus, alertmanager, receiver, started)
    finally:
        code = await spectax.stop()
        for server in (prometheus, alertmanager):
            if server is not None:
                await server.stop()
        await receiver.stop()
        await fleet.close()
    assert code in (0, None), f"spectax exited with {code}:\n{spectax.log[-3000:]}"
    assert "Traceback" not in spectax.log


def firing(alerts: list[dict[str, Any]], name: str) -> dict[str, dict[str, Any]]:
    return {
        a["labels"]["endpoint"]: a
        for a in alerts
        if a["labels"]["alertname"] == name and a["state"] == "firing"
    }


@in_module_loop
async def test_speculation_is_a_tax_pages_through_alertmanager(stack: Stack, capsys) -> None:
    def is_tax_page(delivery: Any, alert: dict[str, Any]) -> bool:
        labels = alert["labels"]
        return (
            labels.get("alertname") == "SpeculationIsATax"
            and labels.get("endpoint") == TAX
            and alert["status"] == "firing"
        )

    delivery, alert = await stack.receiver.wait_for(is_tax_page, TIMEOUT)
    latency = delivery.received_at - stack.spectax_started_at

    # Routed by severity to the paging receiver, with the shipped labels and annotations.
    assert delivery.receiver == PAGE_RECEIVER
    assert alert["labels"]["severity"] == "page"
    (shipped,) = [r for r in rules() if r.get("alert") == "SpeculationIsATax"]
    assert alert["annotations"]["runbook_url"] == shipped["annotations"]["runbook_url"]
    assert alert["annotations"]["runbook_url"].endswith("/runbook#speculationisatax")
    assert float(re.search(r"speedup ([0-9.]+)", alert["annotations"]["description"])[1]) < 1

    # chat-creative has a control endpoint: once spectax measures the speedup against it,
    # the alert reads the measured figure, which says tax too.
    async def measured_tax() -> list[dict[str, Any]] | None:
        alerts = await stack.prometheus.alerts()
        tax = firing(alerts, "SpeculationIsATax").get(TAX)
        if tax and tax["annotations"]["description"].startswith(
            f"{TAX} ({tax['labels']['model']}): measured"
        ):
            return alerts
        return None

    alerts = await wait_until(measured_tax, TIMEOUT, f"a measured tax on {TAX}", [stack.prometheus])
    measured_after = time.monotonic() - stack.spectax_started_at
    with capsys.disabled():
        print(
            f"\nSpeculationIsATax for {TAX}: spectax start -> page on the webhook {latency:.1f} s;"
            f" firing on the measured speedup after {measured_after:.1f} s"
            f" (for: {E2E_FOR['SpeculationIsATax']}, 1 s scrape and evaluation intervals)"
        )

    # None for code-assistant, although its speedup has been evaluated all along.
    assert set(firing(alerts, "SpeculationIsATax")) == {TAX}
    paying = await stack.prometheus.series(
        f'endpoint_model:spectax_speedup_ratio:measured_or_modeled{{endpoint="{PAYS}"}}'
    )
    assert paying and float(paying[0]["value"][1]) > 1
    assert not [
        a
        for d in stack.receiver.deliveries
        for a in d.alerts
        if a["labels"].get("alertname") == "SpeculationIsATax"
        and a["labels"].get("endpoint") != TAX
    ]
    # chat-creative's acceptance is under its 50 % threshold, the coder's is not: a
    # warning, not a second page (issue 17), and inhibited while the tax fires.
    assert set(firing(alerts, "SpecDecodeAcceptanceBelowThreshold")) == {TAX}

    async def warning_in_alertmanager() -> list[dict[str, Any]] | None:
        _, found = await stack.alertmanager.get_json("/api/v2/alerts")
        return [
            a
            for a in found
            if a["labels"]["alertname"] == "SpecDecodeAcceptanceBelowThreshold"
            and a["labels"]["endpoint"] == TAX
        ] or None

    (warning,) = await wait_until(
        warning_in_alertmanager,
        TIMEOUT,
        "the acceptance warning in Alertmanager",
        [stack.alertmanager],
    )
    assert warning["labels"]["severity"] == "warning"
    assert warning["status"]["state"] == "suppressed" and warning["status"]["inhibitedBy"]
    paged = {
        a["labels"]["alertname"]
        for d in stack.receiver.deliveries
        if d.receiver == PAGE_RECEIVER
        for a in d.alerts
    }
    assert paged == {"SpeculationIsATax"}


@in_module_loop
async def test_speculation_hurts_tail_latency_fires_for_the_tax_endpoint_only(stack: Stack) -> None:
    # The description names the basis of the window at each evaluation: measured against
    # the control, or modelled in a 6-s window where a side finished fewer than 10 requests
    # (economics.latency.MIN_REQUESTS; seen in about one evaluation in six here).
    async def tail_alert() -> list[dict[str, Any]] | None:
        alerts = await stack.prometheus.alerts()
        alert = firing(alerts, "SpeculationHurtsTailLatency").get(TAX)
        return alerts if alert and "basis measured" in alert["annotations"]["description"] else None

    alerts = await wait_until(tail_alert, TIMEOUT, f"the tail alert on {TAX}", [stack.prometheus])
    assert set(firing(alerts, "SpeculationHurtsTailLatency")) == {TAX}
    alert = firing(alerts, "SpeculationHurtsTailLatency")[TAX]
    assert (alert["labels"]["metric"], alert["labels"]["percentile"]) == ("tpot", "p99")
    assert "basis measured" in alert["annotations"]["description"]

    # The others break the same SLO too, so the alert is about speculation, not the SLO:
    # the coder's speculation makes its tail faster (modelled), the control does not speculate.
    p99 = await stack.prometheus.series('spectax_latency_seconds{metric="tpot",percentile="p99"}')
    assert {s["metric"]["endpoint"] for s in p99 if float(s["value"][1]) > 0.01} == {
        TAX,
        PAYS,
        CONTROL,
    }

    async def measured_ratios() -> dict[str, dict[str, Any]] | None:
        ratios = await stack.prometheus.series(
            'spectax_latency_speculation_ratio{metric="tpot",percentile="p99"}'
        )
        by_endpoint = {s["metric"]["endpoint"]: s for s in ratios}
        measured = by_endpoint.get(TAX, {}).get("metric", {}).get("basis") == "measured"
        return by_endpoint if measured else None

    by_endpoint = await wait_until(
        measured_ratios, TIMEOUT, f"{TAX}'s measured ratio", [stack.prometheus]
    )
    assert set(by_endpoint) == {TAX, PAYS}
    assert by_endpoint[TAX]["metric"]["basis"] == "measured"
    assert float(by_endpoint[TAX]["value"][1]) > 1.05
    assert by_endpoint[PAYS]["metric"]["basis"] == "modeled"
    assert float(by_endpoint[PAYS]["value"][1]) < 1

    # Through Alertmanager to the on-call channel (a warning), and for no other endpoint.
    def is_tail_warning(delivery: Any, alert: dict[str, Any]) -> bool:
        return alert["labels"].get("alertname") == "SpeculationHurtsTailLatency"

    delivery, delivered = await stack.receiver.wait_for(is_tail_warning, TIMEOUT)
    assert delivery.receiver == "oncall-chat"
    assert delivered["labels"]["endpoint"] == TAX
    assert {
        a["labels"]["endpoint"]
        for d in stack.receiver.deliveries
        for a in d.alerts
        if a["labels"].get("alertname") == "SpeculationHurtsTailLatency"
    } == {TAX}


@in_module_loop
async def test_every_rule_evaluates_without_error(stack: Stack) -> None:
    async def all_evaluated() -> list[dict[str, Any]] | None:
        groups = await stack.prometheus.rule_groups()
        found = [rule for group in groups for rule in group["rules"]]
        never = "0001-01-01T00:00:00Z"  # Go's zero time: not evaluated yet
        return None if any(rule["lastEvaluation"] == never for rule in found) else found

    evaluated = await wait_until(all_evaluated, TIMEOUT, "every rule to be evaluated once")
    shipped = {rule.get("record") or rule.get("alert") for rule in rules()}
    assert {rule["name"] for rule in evaluated} == shipped
    errors = {rule["name"]: rule.get("lastError") for rule in evaluated if rule["health"] != "ok"}
    assert not errors


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(spectax_[a-z_]+|[a-z_]+:spectax_[a-z_]+:[a-z0-9_]+)\b", expr))


def recording_dependencies() -> dict[str, set[str]]:
    """Recording rule -> every metric it reads, transitively."""
    direct = {r["record"]: metric_names(r["expr"]) for r in rules() if "record" in r}

    def expand(name: str) -> set[str]:
        found = set()
        for dep in direct.get(name, set()):
            found |= {dep} | expand(dep)
        return found

    return {name: expand(name) for name in direct}


CROSSOVER = "spectax_load_crossover_running_requests"


def pending(expr: str) -> bool:
    """The query reads a metric in PENDING_METRICS (directly or through a recording rule)."""
    deps = recording_dependencies()
    names = metric_names(expr)
    for name in list(names):
        names |= deps.get(name, set())
    return bool(names & PENDING_METRICS)


@in_module_loop
async def test_every_panel_query_returns_data(stack: Stack) -> None:
    # A cold start on the serverless control endpoint, once spectax has seen it running,
    # so the cold-start panels show a real one (count, duration, cost).
    async def control_scraped() -> list[dict[str, Any]]:
        return await stack.prometheus.series(f'spectax_endpoint_up{{endpoint="{CONTROL}"}} == 1')

    await wait_until(control_scraped, TIMEOUT, f"a scrape of {CONTROL}", [stack.prometheus])
    stack.fleet.restart(CONTROL)

    queries = [
        (file, title, concrete(expr))
        for file, dashboard in dashboard_jsons().items()
        for title, expr in panel_queries(dashboard)
    ]
    assert len(queries) > 30

    async def no_crossover(expr: str) -> bool:
        """A crossover panel (finite crossovers only) is empty while no curve has one: an
        endpoint's load must swing across it (the live demo's office-chat takes minutes),
        longer than this stack runs. Then every curve exports +Inf, which is checked."""
        if metric_names(expr) != {CROSSOVER} or "< +Inf" not in expr:
            return False
        status, body = await stack.prometheus.query(f"{CROSSOVER} == +Inf")
        return status == 200 and bool(body["data"]["result"])

    async def run_all() -> dict[str, list[str]]:
        result: dict[str, list[str]] = {"bad": [], "empty": [], "pending_empty": []}
        for file, title, expr in queries:
            status, body = await stack.prometheus.query(expr)
            where = f"{file} / {title}: {expr}"
            if status != 200 or body.get("status") != "success":
                result["bad"].append(f"{where} -> {status} {body.get('error')}")
            elif not body["data"]["result"] and not await no_crossover(expr):
                result["pending_empty" if pending(expr) else "empty"].append(where)
        return result

    async def all_data() -> dict[str, list[str]] | None:
        stack.spectax.check_alive()
        result = await run_all()
        assert not result["bad"], "\n".join(result["bad"])
        return None if result["empty"] else result

    try:
        result = await wait_until(all_data, TIMEOUT, "every panel query to return data")
    except AssertionError:
        still_empty = (await run_all())["empty"]
        raise AssertionError("panel queries with no data:\n" + "\n".join(still_empty)) from None
    # Only panels of pending metrics may be empty, and each pending metric has a panel.
    for where in result["pending_empty"]:
        assert pending(where.split(": ", 1)[1]), where
    used = set().union(*(metric_names(expr) for _, _, expr in queries))
    assert not PENDING_METRICS - used - set().union(*recording_dependencies().values())


@in_module_loop
async def test_dashboard_variables_list_the_endpoints(stack: Stack) -> None:
    async def values(label: str, match: str) -> list[str]:
        status, body = await stack.prometheus.get_json(
            f"/api/v1/label/{label}/values", **{"match[]": match}
        )
        assert status == 200, body
        return list(body["data"])

    for dashboard in dashboard_jsons().values():
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"])
            assert match, variable["query"]
            selector, label = concrete(match[1]), match[2]

            async def listed(selector: str = selector, label: str = label) -> list[str]:
                return await values(label, selector)

            found = await wait_until(listed, TIMEOUT, f"values of {variable['name']}")
            if variable["name"] == "endpoint":
                assert {TAX, PAYS, CONTROL} <= set(found)


@in_module_loop
async def test_promtool_check_metrics_passes_on_spectax(stack: Stack) -> None:
    async def page() -> str | None:
        stack.spectax.check_alive()
        try:
            status, text = await stack.spectax.get()
        except aiohttp.ClientError:
            return None
        assert status == 200
        return text if "spectax_speedup_ratio{" in text else None

    text = await wait_until(page, TIMEOUT, "spectax to serve its assessments")
    result = run_tool("promtool", "check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not result.stdout.strip() and not result.stderr.strip()


def test_pending_metrics_are_still_pending() -> None:
    """Once spectax exports one of them, drop it from PENDING_METRICS: its panels must then
    return data like every other."""
    exported = {re.sub(r"_total$", "", name) for name in FAMILIES}
    assert not {re.sub(r"_total$", "", name) for name in PENDING_METRICS} & exported
