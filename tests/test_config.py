"""Configuration: strict, every problem at once with its path, prices resolved."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import Spectax, free_port, write_config
from spectax.cli.main import main
from spectax.config import ConfigError, load_config
from spectax.store import Store

GOOD = """
listen: 127.0.0.1:19837
scrape_interval: 10s
window: 5m
storage_url: sqlite+aiosqlite:///{tmp}/h.sqlite
endpoints:
  - name: chat
    url: http://127.0.0.1:8000/metrics
    gpu: H100 SXM
    gpus: 2
    price: {{provider: runpod, product: pods secure}}
    speculation: {{method: eagle3}}
    acceptance_threshold: 0.6
    control: plain
  - name: plain
    url: http://127.0.0.1:8001
    price: {{usd_per_hour: 1.25}}
    billing_mode: serverless
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spectax.yml"
    path.write_text(text)
    return path


def test_good_config_resolves_prices_and_defaults(tmp_path: Path) -> None:
    settings = load_config(write(tmp_path, GOOD.format(tmp=tmp_path)))
    config = settings.config
    assert config.scrape_interval == 10 and config.window == 300 and config.scrape_timeout == 10
    assert config.listen_port == 19837
    chat = config.endpoint("chat")
    assert chat.speculation is not None and chat.speculation.cost_ratio == 0.05
    assert settings.usd_per_hour == {"chat": Decimal("3.99"), "plain": Decimal("1.25")}
    assert config.endpoint("plain").ridge_batch == 32


def test_replicas_that_say_the_same_price_and_speculation_share_them(tmp_path: Path) -> None:
    """A fleet's replicas repeat one price and one speculation block: equal blocks (by
    value) are one object (memory at 2,000 endpoints), and each endpoint's is still worth
    what it said."""
    replica = "{{name: r{i}, url: 'http://h:{port}', price: {{usd_per_hour: 3.99}}, "
    replica += "speculation: {{method: draft_model, draft_cost_ratio: 0.1}}}}"
    lines = [replica.format(i=i, port=8000 + i) for i in range(3)]
    lines.append(
        "{name: odd, url: 'http://h:9', price: {usd_per_hour: 2}, speculation: {method: ngram}}"
    )
    text = "endpoints:\n" + "".join(f"  - {line}\n" for line in lines)
    config = load_config(write(tmp_path, text)).config
    r0, r1, r2, odd = config.endpoints
    assert r0.price is r1.price is r2.price and r0.speculation is r2.speculation
    assert r0.price is not None and r0.price.usd_per_hour == Decimal("3.99")
    assert odd.price is not None and odd.price.usd_per_hour == Decimal(2)
    assert odd.speculation is not None and odd.speculation.method == "ngram"
    assert [e.name for e in config.endpoints] == ["r0", "r1", "r2", "odd"]


def test_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    config = load_config(None).config
    assert config.listen == "127.0.0.1:9837"
    assert config.scrape_interval == 15 and config.window == 300
    assert config.database_url == "sqlite+aiosqlite:///spectax-state/spectax.sqlite"
    assert config.max_body_bytes == 10 * 1024 * 1024


def test_state_directory_from_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/spectax")
    assert load_config(None).config.database_url.endswith("/var/lib/spectax/spectax.sqlite")


BAD = """
listen: nowhere
scrape_intervall: 15s
window: 10 minutes
endpoints:
  - name: a
    url: ftp://x
    speculation: {method: draft_model}
    price: {provider: runpod, product: pods secure, gpu: TPU}
  - name: a
    url: http://127.0.0.1:1/metrics
    billing_mode: reserved
  - name: b
    url: http://127.0.0.1:2/metrics
    control: nope
    gpus: 0
"""


def test_every_problem_is_reported_at_once_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, BAD))
    problems = "\n".join(caught.value.problems)
    for expected in (
        "listen: Value error, must be HOST:PORT",
        "scrape_intervall: unknown key",
        "window: Value error, '10 minutes' is not a duration",
        "endpoints[0].url: Value error, must be an http:// or https:// URL",
        "endpoints[1].billing_mode: Input should be 'provisioned' or 'serverless'",
        "endpoints[2].gpus: Input should be greater than or equal to 1",
    ):
        assert expected in problems


def test_cross_field_problems_are_reported_together(tmp_path: Path) -> None:
    text = BAD.replace("listen: nowhere\n", "").replace("scrape_intervall: 15s\n", "")
    text = text.replace("window: 10 minutes\n", "").replace("ftp://x", "http://127.0.0.1:3")
    text = text.replace("billing_mode: reserved", "billing_mode: serverless")
    text = text.replace("gpus: 0", "gpus: 1")
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    problems = caught.value.problems
    assert any(
        p.startswith("endpoints[0].speculation.draft_cost_ratio: required") for p in problems
    )
    assert any(p.startswith("endpoints[0].price: no price for provider='runpod'") for p in problems)
    assert any("endpoints[1].name: 'a' is used by an earlier endpoint" in p for p in problems)
    assert any("endpoints[2].control: no endpoint named 'nope'" in p for p in problems)
    assert len(problems) == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("endpoints: [\n", "line"),
        ("- 1\n- 2\n", "the top level must be a mapping"),
        ("scrape_interval: 30s\nscrape_timeout: 1m\n", "scrape_timeout: must not be longer"),
        ("scrape_interval: 1m\nwindow: 1m\n", "window: must hold at least two scrape intervals"),
        ("endpoints:\n  - name: 'bad name!'\n    url: http://h:1\n", "endpoints[0].name"),
        (
            "endpoints:\n  - name: x\n    url: http://h:1\n"
            "    price: {usd_per_hour: 1, provider: a}\n",
            "not both",
        ),
        (
            "price_table: /nonexistent/prices.csv\n",
            "price_table: /nonexistent/prices.csv: cannot read",
        ),
        (  # the proposer runs every step: h is never below its floor (docs/economics.md)
            "endpoints:\n  - name: x\n    url: http://h:1\n    step_overhead_ratio: 0\n"
            "    speculation: {method: ngram}\n",
            "endpoints[0].step_overhead_ratio: 0 is below 0.01",
        ),
        (  # each drafting pass reads the drafter's weights: c >= draft_params / target_params
            "endpoints:\n  - name: x\n    url: http://h:1\n    speculation:\n"
            "      {method: draft_model, draft_cost_ratio: 0.05, draft_params: 1e9,"
            " target_params: 8e9}\n",
            "endpoints[0].speculation.draft_cost_ratio: 0.05 is below 0.125",
        ),
    ],
)
def test_bad_files(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert expected in str(caught.value)


def test_price_table_override(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(
        "provider,product,gpu,usd_per_second,usd_per_hour,billing_granularity,as_of,source\n"
        "acme,reserved,H100,,1.10,hourly,2026-11,contract 42\n"
        "runpod,pods secure,H100 SXM,,2.00,per-second,2026-11,negotiated\n"
    )
    text = (
        f"price_table: {prices}\nendpoints:\n"
        "  - {name: a, url: 'http://h:1', gpu: H100, price: {provider: acme, product: reserved}}\n"
        "  - {name: b, url: 'http://h:2', gpu: H100 SXM,"
        " price: {provider: runpod, product: pods secure}}\n"
    )
    settings = load_config(write(tmp_path, text))
    assert settings.usd_per_hour == {"a": Decimal("1.10"), "b": Decimal("2.00")}


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, GOOD.format(tmp=tmp_path)))]) == 0
    out = capsys.readouterr().out
    assert "OK, 2 endpoint(s)" in out and "chat: vllm, eagle3, provisioned, 3.99" in out
    assert main(["check-config", str(write(tmp_path, BAD))]) == 2
    err = capsys.readouterr().err
    assert "scrape_intervall: unknown key" in err and "endpoints[2].gpus" in err


def test_scrape_timeout_defaults_within_a_short_interval(tmp_path: Path) -> None:
    """As in Prometheus: 10 s by default, but never longer than the interval."""
    assert load_config(write(tmp_path, "scrape_interval: 5s\n")).config.scrape_timeout == 5
    assert load_config(write(tmp_path, "scrape_interval: 1m\n")).config.scrape_timeout == 10
    from spectax.config import validate
    from spectax.simulate.demo_fleet import DEMO_DEFAULTS

    assert validate(DEMO_DEFAULTS).config.scrape_interval == 5  # the demo's defaults are valid


CONFIGS = Path(__file__).parent / "fixtures" / "config"  # one bad file per case
CANARY = "CANARY-pw-7f3a"  # the password in every bad storage_url there


def header(path: Path, key: str) -> list[str]:
    """The `# key: value` lines at the top of a test file (`expect`, `env`)."""
    lines = path.read_text().splitlines()
    return [line.split(": ", 1)[1] for line in lines if line.startswith(f"# {key}: ")]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yml")), ids=lambda p: p.stem)
def test_check_config_lists_each_problem_of_a_bad_file_once_with_its_path_and_no_password(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for assignment in header(path, "env"):
        monkeypatch.setenv(*assignment.split("=", 1))
    expected = header(path, "expect")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = caught.value.problems
    assert [e for e in expected if not any(p.startswith(e) for p in problems)] == [], problems
    assert len(problems) == len(expected), problems  # and nothing made up
    assert main(["check-config", str(path)]) == 2
    shown = capsys.readouterr()
    assert all(e in shown.err for e in expected)
    assert CANARY not in shown.err + shown.out + str(caught.value)


@pytest.mark.parametrize(
    ("written", "taken"),
    [
        (
            f"postgresql://spectax:{CANARY}@db:5432/h?sslmode=require",
            f"postgresql+asyncpg://spectax:{CANARY}@db:5432/h?ssl=require",
        ),
        (
            "postgres://spectax@db/h?sslmode=verify-full",
            "postgresql+asyncpg://spectax@db/h?ssl=verify-full",
        ),
        (
            "postgresql+asyncpg://u:p%40ssword@db/h?ssl=disable",
            "postgresql+asyncpg://u:p%40ssword@db/h?ssl=disable",
        ),
        ("sqlite:///{tmp}/h.sqlite", "sqlite+aiosqlite:///{tmp}/h.sqlite"),
        ("sqlite+aiosqlite:///:memory:", "sqlite+aiosqlite:///:memory:"),  # as written
    ],
)
def test_a_libpq_or_driverless_storage_url_is_taken_in_the_drivers_terms(
    tmp_path: Path, written: str, taken: str
) -> None:
    config = load_config(write(tmp_path, f"storage_url: '{written.format(tmp=tmp_path)}'\n")).config
    assert config.database_url == taken.format(tmp=tmp_path)


async def test_a_libpq_storage_url_with_sslmode_opens_the_postgresql_store(
    pg_server: Any, tmp_path: Path
) -> None:
    """What a provider's console gives (`postgresql://...?sslmode=prefer`) just works."""
    url = pg_server.database().replace("postgresql+asyncpg://", "postgresql://")
    config = load_config(write(tmp_path, f"storage_url: '{url}?sslmode=prefer'\n")).config
    store = await Store.open(config.database_url)
    try:
        assert store.backend == "postgresql"
    finally:
        await store.close()


@pytest.mark.e2e
@pytest.mark.parametrize(
    "name",
    [
        "storage-url-port",
        "storage-url-sslmode-bogus",
        "storage-url-sqlite-host",  # a traceback before
        "storage-url-password-at",  # retried forever before
        "storage-url-no-database",  # the tables went into the `postgres` database before
    ],
)
async def test_run_refuses_a_bad_storage_url_at_start_saying_what_to_write(
    tmp_path: Path, name: str
) -> None:
    """Before the fix `run` died on these with a raw traceback after check-config said OK."""
    path = CONFIGS / f"{name}.yml"
    url = yaml.safe_load(path.read_text())["storage_url"]
    port = free_port()
    endpoints = [{"name": "chat", "url": "http://127.0.0.1:1/metrics"}]
    spectax = Spectax(write_config(tmp_path, port, endpoints, storage_url=url), port)
    await spectax.start()
    assert spectax.process is not None
    assert await asyncio.wait_for(spectax.process.wait(), 60) == 2, spectax.log_tail()
    assert all(e in spectax.log for e in header(path, "expect")), spectax.log_tail()
    assert "Traceback" not in spectax.log and CANARY not in spectax.log


async def run_until_exit(tmp_path: Path, storage_url: str) -> tuple[int | None, str]:
    """`spectax run` on `storage_url` (one unreachable target): its exit code and log."""
    port = free_port()
    endpoints = [{"name": "chat", "url": "http://127.0.0.1:1/metrics"}]
    spectax = Spectax(write_config(tmp_path, port, endpoints, storage_url=storage_url), port)
    await spectax.start()
    assert spectax.process is not None
    try:
        code = await asyncio.wait_for(spectax.process.wait(), 30)
    finally:
        await spectax.kill()
    return code, spectax.log


@pytest.mark.e2e
async def test_a_sqlite_directory_that_cannot_be_made_is_named_by_check_config_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite file under a regular file: `run` died in mkdir with a traceback."""
    (tmp_path / "a-file").write_text("")
    url = f"sqlite+aiosqlite:///{tmp_path}/a-file/sub/h.sqlite"
    said = f"cannot create the directory {tmp_path}/a-file/sub"
    config = write(tmp_path, f"storage_url: '{url}'\n")
    assert main(["check-config", str(config)]) == 2
    assert said in capsys.readouterr().err
    code, log = await run_until_exit(tmp_path, url)
    assert code == 1 and said in log and "Not a directory" in log, log[-3000:]
    assert "Traceback" not in log


@pytest.mark.e2e
async def test_sqlite_in_memory_is_warned_of_by_check_config_and_refused_by_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """History that vanishes at every stop is never what a monitoring daemon is for."""
    url = "sqlite+aiosqlite:///:memory:"
    config = write(tmp_path, f"storage_url: '{url}'\n")
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "warning:" in out and "`spectax run` refuses it: SQLite in memory" in out
    code, log = await run_until_exit(tmp_path, url)
    assert code == 2 and "SQLite in memory keeps no history past a stop" in log, log[-3000:]
    assert "Traceback" not in log


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("user", "database", "said"),
    [
        ("postgres", "spectax_nosuch_db", 'database "spectax_nosuch_db" does not exist'),
        ("spectax_nosuch_role", "postgres", 'role "spectax_nosuch_role" does not exist'),
    ],
)
async def test_a_database_or_role_that_does_not_exist_is_named_by_the_probe_and_ends_run(
    pg_server: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    user: str,
    database: str,
    said: str,
) -> None:
    """`run` retried these forever ("retrying until it answers"); the server's answer will
    not change, so `run` now exits saying what to fix, and `check-config --probe` says it
    first. The password is in neither."""
    url = f"postgresql+asyncpg://{user}:{CANARY}@127.0.0.1:{pg_server.port}/{database}"
    config = write(tmp_path, f"storage_url: '{url}'\n")
    assert await asyncio.to_thread(main, ["check-config", str(config)]) == 0  # no probe
    assert await asyncio.to_thread(main, ["check-config", str(config), "--probe"]) == 1
    out, err = capsys.readouterr()
    assert f"storage_url: FAILED: cannot open the store (postgresql+asyncpg): {said}" in out
    assert CANARY not in out + err
    code, log = await run_until_exit(tmp_path, url)
    assert code == 1 and said in log and "retrying" not in log, log[-3000:]
    assert "Traceback" not in log and CANARY not in log


async def test_the_probe_says_the_postgresql_store_answers(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = pg_server.database()
    config = write(tmp_path, f"storage_url: '{url}'\n")
    assert await asyncio.to_thread(main, ["check-config", str(config), "--probe"]) == 0
    name = url.rsplit("/", 1)[1]
    assert f"storage_url: PostgreSQL database '{name}' answers" in capsys.readouterr().out
    import asyncpg

    connection = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:  # the probe created nothing (opening the store would have made its tables)
        assert (
            await connection.fetchval("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            == 0
        )
    finally:
        await connection.close()


TWO_ENDPOINTS = """
storage_url: sqlite+aiosqlite:///{tmp}/h.sqlite
endpoints:
  - {{name: priced, url: "http://127.0.0.1:8000", price: {{usd_per_hour: 2}}}}
  - {{name: unpriced, url: "http://127.0.0.1:8001"}}
"""


def test_check_config_summary_never_calls_an_unpriced_endpoint_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", str(write(tmp_path, TWO_ENDPOINTS.format(tmp=tmp_path)))]) == 0
    out = capsys.readouterr().out
    assert "unpriced: vllm, no speculation, provisioned, no price" in out
    [estimate] = [line for line in out.splitlines() if "billing price_table" in line]
    assert "all priced" not in estimate
    assert "endpoints: priced;" in estimate and "not priced" in estimate
    assert estimate.endswith("unpriced")


def test_check_config_reports_the_configs_and_the_web_configs_problems_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users: {prometheus: not-a-hash}\n")
    config = write(tmp_path, f"web_config_file: {web}\nscrape_intervall: 5s\n")
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "scrape_intervall: unknown key" in err
    assert "basic_auth_users.prometheus: not a bcrypt hash" in err
    web.write_text("basic_auth_users: {prometheus: not-a-hash}\nbogus: 1\n")
    assert (
        main(["check-config", str(write(tmp_path, "window: 1s\n")), "--web.config.file", str(web)])
        == 2
    )
    err = capsys.readouterr().err
    assert "window" in err and "bogus" in err
    assert "basic_auth_users.prometheus: not a bcrypt hash" in err  # beside the unknown key


async def test_check_config_probe_reports_engine_speculation_and_k_of_each_real_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Loopback targets serving the recorded vLLM 0.32.0 pages; one wants a bearer token."""
    from aiohttp import web

    from loopback import serve
    from recorded_pages import page

    token = "CANARY-probe-token-5d1e"
    pages = {
        "/ngram": page("spec_ngram_3_after.txt"),
        "/plain": page("nospec_3_after.txt"),
        "/nostats": page("spec_ngram_disable_log_stats_3_after.txt"),
    }

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {token}":
            return web.Response(status=401)
        return web.Response(text=pages[request.path], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{name}", handle)
    runner, url = await serve(app)
    try:
        endpoints = [
            {"name": "ngram", "url": f"{url}/ngram", "speculation": {"method": "ngram"}},
            {"name": "plain", "url": f"{url}/plain"},
            {"name": "nostats", "url": f"{url}/nostats", "speculation": {"method": "ngram"}},
            {"name": "mislabelled", "url": f"{url}/ngram"},
        ]
        for endpoint in endpoints:
            endpoint["bearer_token"] = token
        endpoints.append({"name": "no-token", "url": f"{url}/ngram"})
        config = tmp_path / "spectax.yml"
        config.write_text(
            yaml.safe_dump(
                {"storage_url": f"sqlite+aiosqlite:///{tmp_path}/h.sqlite", "endpoints": endpoints}
            )
        )
        code = await asyncio.to_thread(main, ["check-config", str(config), "--probe"])
        out, err = capsys.readouterr()
        report = {
            line.split(":")[0].strip(): line for line in out.split("probe:\n", 1)[1].splitlines()
        }
        assert code == 1  # no-token fails
        assert "vllm detected" in report["ngram"] and "speculation on, K seen 4" in report["ngram"]
        assert "speculation off" in report["plain"]
        assert "no vllm families" in report["nostats"]
        assert "check the endpoint's speculation key" in report["mislabelled"]
        assert "FAILED (http_status)" in report["no-token"] and "401" in report["no-token"]
        assert token not in out + err
        assert await asyncio.to_thread(main, ["check-config", str(config)]) == 0  # no probe
        assert "probe:" not in capsys.readouterr().out
    finally:
        await runner.cleanup()


REPOSITORY = Path(__file__).parent.parent
EXAMPLE = REPOSITORY / "spectax.example.yml"


def _keys_of(model: Any) -> set[str]:
    """Every key a configuration model takes, its nested models' keys included."""
    import typing

    from pydantic import BaseModel

    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(name)
        pending = [field.annotation]
        while pending:
            kind = pending.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                keys |= _keys_of(kind)
            else:
                pending += typing.get_args(kind)
    return keys


def test_the_shipped_example_config_passes_check_config_and_shows_every_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spectax.billing.registry import SOURCES
    from spectax.config import Config

    monkeypatch.chdir(REPOSITORY)  # as the systemd steps (docs/running.md) run it: from the clone
    assert main(["check-config", str(EXAMPLE)]) == 0, capsys.readouterr().err
    assert "OK, 2 endpoint(s)" in capsys.readouterr().out
    text = EXAMPLE.read_text()
    keys = _keys_of(Config) - {"billing"}
    for source in SOURCES.values():
        keys |= _keys_of(source)
    missing = sorted(k for k in keys if not re.search(rf"(^|[\s{{#-]){k}:", text, re.MULTILINE))
    assert missing == [], "keys the example does not show"


def test_the_docs_config_example_passes_check_config_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The configuration reference's example (docs/configuration.md), every key shown."""
    page = (REPOSITORY / "docs" / "configuration.md").read_text()
    section = page.split("# Configuration\n", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "endpoints:" in example and "control: chat-8b-plain" in example
    path = tmp_path / "spectax.yml"
    path.write_text(example)
    assert main(["check-config", str(path)]) == 0, capsys.readouterr().err


def test_the_readme_quick_start_config_passes_check_config_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The on-call quick start's one endpoint, as pasted: the first file an operator writes."""
    readme = (REPOSITORY / "README.md").read_text()
    section = readme.split("## On-call quick start", 1)[1].split("\n## ", 1)[0]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "endpoints:" in example
    path = tmp_path / "spectax.yml"
    path.write_text(example)
    assert main(["check-config", str(path)]) == 0, capsys.readouterr().err
    assert "OK, 1 endpoint(s)" in capsys.readouterr().out


def test_the_docs_systemd_steps_install_the_shipped_example() -> None:
    page = (REPOSITORY / "docs" / "running.md").read_text()
    steps = page.split("## Install as a service (systemd)", 1)[1].split("\n## ", 1)[0]
    assert "install -m 0644 spectax.example.yml /etc/spectax/spectax.yml" in steps


def test_check_config_warns_of_a_credential_sent_over_plain_http(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Basic auth to an http:// target passed check-config without a word: the password
    crosses the network in the clear on every scrape."""
    text = f"""
state_directory: {tmp_path}/state
endpoints:
  - name: clear
    url: http://10.0.0.5:8000/metrics
    basic_auth: {{username: spectax, password: correct-horse-battery}}
  - name: sealed
    url: https://10.0.0.6:8000/metrics
    basic_auth: {{username: spectax, password: correct-horse-battery}}
"""
    assert main(["check-config", str(write(tmp_path, text))]) == 0
    out = capsys.readouterr().out
    warned = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1, out
    assert "endpoint clear: sends its basic auth over plain http" in warned[0]
    assert "https://" in warned[0] and "correct-horse" not in out


def test_the_load_curve_lookback_and_refresh_default_to_a_day_and_a_window(tmp_path: Path) -> None:
    config = load_config(None).config.load_curve
    assert (config.lookback, config.refresh_interval) == (86400.0, 300.0)
    given = write(tmp_path, "load_curve: {lookback: 7d, refresh_interval: 1m}\n")
    config = load_config(given).config.load_curve
    assert (config.lookback, config.refresh_interval) == (7 * 86400.0, 60.0)
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, "load_curve: {look_back: 7d, lookback: 0s}\n"))
    problems = "\n".join(caught.value.problems)
    assert "load_curve.look_back: unknown key" in problems
    assert "load_curve.lookback:" in problems


@pytest.mark.parametrize(
    ("schedule", "said"),
    [
        ("[[2, 8, 3]]", "range 1 starts at batch 2; it must start at 1"),
        ("[[1, 4, 3], [6, 1024, 0]]", "range 2 starts at batch 6; it must start at 5"),
        ("[[1, 4, 3], [5, 3, 0]]", "range 2 is [5, 3, 0]: give last >= first and K >= 0"),
        ("[]", "give at least one [first batch, last batch, K] range"),
    ],
)
def test_a_k_schedule_is_checked_as_vllm_checks_it(
    tmp_path: Path, schedule: str, said: str
) -> None:
    text = (
        "endpoints:\n  - name: a\n    url: http://127.0.0.1:1\n"
        f"    speculation: {{method: mtp, schedule: {schedule}}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert any(
        p.startswith("endpoints[0].speculation.schedule:") and said in p
        for p in caught.value.problems
    ), caught.value.problems
    good = text.replace(schedule, "[[1, 4, 3], [5, 1024, 0]]")
    speculation = load_config(write(tmp_path, good)).config.endpoints[0].speculation
    assert speculation is not None and speculation.schedule == ((1, 4, 3), (5, 1024, 0))
