"""Fragments of a secret (issue 30): any 8 characters in a row of a configured secret, as
written or escaped, are blanked wherever a target's or the file's text can reach /metrics,
the status page, the log, the store or the export; a secret shorter than 8 characters is a
configuration error, named by its field and never shown.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml
from aiohttp import web

from e2e import Spectax, free_port, value, write_config
from ops_helpers import Targets
from spectax import logs
from spectax.cli.main import main
from spectax.config import ConfigError, validate

G = "vllm:generation_tokens_total"
ALPHABET = string.ascii_letters + string.digits


def token(length: int) -> str:
    """A random token: no 8 characters of it in a row occur in any other text here."""
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def registered(value: str) -> str:
    logs.register_secret(value)
    return value


# ------------------------------------------------------------ the check itself


def test_every_fragment_of_8_characters_is_blanked_and_nothing_shorter() -> None:
    secret = registered(token(310))
    for fragment in (secret, secret[:-2], secret[2:], secret[:250], secret[100:108]):
        blanked = logs.blank_secrets(f"before {fragment} after")
        assert blanked == "before <secret> after", len(fragment)
        assert logs.holds_secret(fragment)
    seven = secret[50:57]
    assert logs.blank_secrets(f"x {seven} y") == f"x {seven} y"
    assert not logs.holds_secret(seven)
    # Two fragments apart are two secrets; the text between them stays.
    assert logs.blank_secrets(f"{secret[:9]} and {secret[-9:]}") == "<secret> and <secret>"


def test_escaped_forms_of_a_secret_are_blanked() -> None:
    secret = registered(f'pa\\ss"{token(12)}<&>\n{token(6)}')
    fragment = secret[1:-1]
    for written in (
        repr(fragment),  # a ParseError quotes the page's line this way
        json.dumps(fragment),  # a JSON log line
        fragment.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"),  # a label
    ):
        assert "<secret>" in logs.blank_secrets(written), written
        assert secret[4:12] not in logs.blank_secrets(written)


class CountedWindows(frozenset[str]):
    """The registered windows, counting the look-ups made in them."""

    lookups = 0

    def __contains__(self, item: object) -> bool:
        CountedWindows.lookups += 1
        return super().__contains__(item)


def test_blanking_is_linear_in_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs on every log line and each new label value: one set look-up per character,
    whatever the number and length of the secrets, counted (a timing of it failed under
    load: the machine is shared)."""
    secrets_held = [registered(token(300)) for _ in range(50)]
    counted = CountedWindows(logs._registered.windows)
    monkeypatch.setattr(logs._registered, "windows", counted)
    n = logs.MIN_SECRET_LENGTH
    for text in ("a" * 2_000, "a" * 20_000, ("a" * 90 + secrets_held[7]) * 60):
        CountedWindows.lookups = 0
        logs.blank_secrets(text)
        assert CountedWindows.lookups == len(text) - n + 1, (len(text), CountedWindows.lookups)
    # and what it blanks is still what the windows say
    assert logs.blank_secrets(f"a {secrets_held[3][5:40]} b") == "a <secret> b"


# ------------------------------------------------------------ too short a secret


def settings_with(**fields: Any) -> dict[str, Any]:
    endpoint = {"name": "e", "url": "http://127.0.0.1:1/metrics", **fields}
    return {"endpoints": [endpoint]}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (settings_with(bearer_token="abc"), "endpoints[0].bearer_token"),
        (
            settings_with(basic_auth={"username": "u", "password": "pass123"}),
            "endpoints[0].basic_auth.password",
        ),
        (
            {**settings_with(), "storage_url": "postgresql+asyncpg://u:Xq7pw@127.0.0.1:5432/x"},
            "storage_url",
        ),
        (
            {
                **settings_with(),
                "billing": [{"type": "runpod", "name": "rp", "api_key": "k3y"}],
            },
            "billing[0].api_key",
        ),
    ],
)
def test_a_secret_shorter_than_8_characters_is_a_config_error(
    config: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate(config)
    said = [p for p in error.value.problems if "shorter than 8 characters" in p]
    assert said and said[0].startswith(f"{field}:"), error.value.problems
    for short in ("abc", "pass123", "Xq7pw", "k3y"):
        assert short not in str(error.value)


def test_check_config_and_run_refuse_a_3_character_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spectax.yml"
    config = settings_with(bearer_token="Zq9")
    path.write_text(yaml.safe_dump({**config, "state_directory": str(tmp_path / "state")}))
    for command in (["check-config", str(path)], ["run", "--config", str(path)]):
        assert main(command) == 2, command
        out, err = capsys.readouterr()
        assert "endpoints[0].bearer_token: the secret is shorter than 8 characters" in err
        assert "Zq9" not in out + err
    assert not (tmp_path / "state").exists()


def test_a_name_in_the_file_holding_a_fragment_of_its_secret_is_a_config_error() -> None:
    """Names of the file become labels, rows and lines of the status page too."""
    secret = token(24)
    config = {
        "endpoints": [
            {"name": f"chat-{secret[3:12]}", "url": "http://127.0.0.1:1", "bearer_token": secret},
            {"name": "b", "url": "http://127.0.0.1:2", "gpu": f"H100 {secret[-8:]}"},
        ]
    }
    with pytest.raises(ConfigError) as error:
        validate(config)
    said = [p for p in error.value.problems if "characters in a row of a configured secret" in p]
    assert [p.split(":")[0] for p in said] == ["endpoints[0].name", "endpoints[1].gpu"]
    assert secret[3:12] not in str(error.value) and secret[-8:] not in str(error.value)
    # Against this file's secrets only: one an earlier configuration had (still blanked
    # from the log) refuses no name.
    earlier = registered(token(24))
    config["endpoints"] = [{"name": f"chat-{earlier[:9]}", "url": "http://127.0.0.1:1"}]
    assert validate(config).config.endpoints[0].name == f"chat-{earlier[:9]}"


# ------------------------------------------------------------ end to end


def echoing(field: Callable[[web.Request], str], malformed: bool = False) -> Any:
    async def handler(request: web.Request) -> web.Response:
        echoed = field(request)
        if malformed:  # a ParseError quotes the line, repr-escaped
            return web.Response(text=f'{G}{{model_name="m"}} {echoed}\n')
        return web.Response(text=f'{G}{{model_name="{echoed}"}} 5\n')

    return handler


async def store_text(database_url: str, state: Path) -> str:
    """Every row of every table, as text."""
    if database_url.startswith("sqlite"):
        uri = f"file:{database_url.split(':///', 1)[1]}?mode=ro"
        with sqlite3.connect(uri, uri=True) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            return "\n".join(
                repr(row) for table in tables for row in db.execute(f'SELECT * FROM "{table}"')
            )
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        tables = await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
        rows = [await connection.fetch(f'SELECT t::text FROM "{t["tablename"]}" t') for t in tables]
        return "\n".join(r[0] for table in rows for r in table)
    finally:
        await connection.close()


@pytest.mark.e2e
async def test_fragments_of_a_secret_reach_nothing(
    tmp_path: Path, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target echoes the token minus 2 characters, the first 250 of a 310-character token,
    and (in a malformed line) a basic-auth password holding a backslash."""
    short, long_ = token(40), token(310)
    password = f"pa\\ss-{token(16)}"
    targets = Targets()
    targets.add_pages("good")
    targets.add("minus2", echoing(lambda r: r.headers["Authorization"].split()[1][:-2]))
    targets.add("first250", echoing(lambda r: r.headers["Authorization"].split()[1][:250]))
    targets.add("backslash", echoing(lambda r: password, malformed=True))
    await targets.start()
    port = free_port()
    endpoints = [
        {"name": "good", "url": targets.url("good")},
        {"name": "minus2", "url": targets.url("minus2"), "bearer_token": short},
        {"name": "first250", "url": targets.url("first250"), "bearer_token": long_},
        {
            "name": "backslash",
            "url": targets.url("backslash"),
            "basic_auth": {"username": "u", "password": password},
        },
    ]
    config = write_config(tmp_path, port, endpoints, window="2s", storage_url=database_url)
    state = tmp_path / "state"
    spectax = Spectax(config, port, global_args=("--log-format", "json"))
    await spectax.start()
    outputs: dict[str, str] = {}
    try:
        bad = ("minus2", "first250", "backslash")
        await spectax.wait_for(
            lambda m: (
                all(
                    value(m, "spectax_scrape_failures_total", endpoint=n, reason="parse")
                    for n in bad
                )
                and value(m, "spectax_endpoint_up", endpoint="good") == 1
            )
        )
        await asyncio.sleep(3)  # a window of the good endpoint closes and is stored
        _, outputs["/metrics"] = await spectax.get("/metrics")
        _, outputs["status page"] = await spectax.get("/")
        assert "holds a credential" in outputs["status page"]
    finally:
        assert await spectax.stop() == 0
        await targets.stop()
    outputs["log"] = spectax.log
    outputs["store"] = await store_text(database_url, state)
    assert "good" in outputs["store"]
    assert (
        await asyncio.to_thread(main, ["export", "--config", str(config), "--format", "json"]) == 0
    )
    outputs["export"] = capsys.readouterr().out
    assert '"good"' in outputs["export"]
    for where, text in outputs.items():
        for secret in (short, long_, password):
            for fragment in (secret[i : i + 8] for i in range(0, len(secret) - 7, 3)):
                assert fragment not in text, f"a fragment of a secret reached the {where}"
        for backslashes in (1, 2, 4):  # as written, repr-escaped, then JSON-escaped too
            assert "pa" + "\\" * backslashes + "ss" not in text, f"escaped, in the {where}"


def test_a_fleet_sources_tenant_header_is_a_name_and_its_gateway_key_a_secret() -> None:
    """Every header value was registered: `X-Scope-OrgID: production-1` then blanked
    "producti" in every message and refused names that hold it. A credential header (an
    API gateway's key) is blanked as any secret."""
    key = token(32)
    config = {
        "state_directory": "/tmp/spectax-never-written",
        "sources": [
            {
                "type": "prometheus",
                "url": "http://127.0.0.1:9/",
                "selector": 'job="vllm"',
                "endpoint_labels": ["model_name"],
                "headers": {"X-Scope-OrgID": "production-tenant-1", "X-Api-Key": key},
            }
        ],
    }
    validate(config)
    line = f"tenant production-tenant-1 key {key}"
    assert logs.blank_secrets(line) == "tenant production-tenant-1 key <secret>"
