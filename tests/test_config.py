"""Configuration: strict, every problem at once with its path, prices resolved."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from spectax.cli.main import main
from spectax.config import ConfigError, load_config

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
    from spectax.simulate.fleet import DEMO_DEFAULTS

    assert validate(DEMO_DEFAULTS).config.scrape_interval == 5  # the demo's defaults are valid
