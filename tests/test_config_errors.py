"""Configuration errors (issue 30): a key given twice is refused with its line, and every
planted error of a file is reported in one check-config run, none hidden behind another
error of the same endpoint, source or billing entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from e2e import free_port
from spectax.cli.main import main
from spectax.config import ConfigError, load_config

DUPLICATED = """\
listen: 127.0.0.1:{port}
window: 5m
state_directory: {tmp}/state
endpoints:
  - name: chat
    url: http://127.0.0.1:8000/metrics
    gpus: 2
    gpus: 4
window: 10m
web_config_file: {tmp}/web.yml
"""


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out + err


def test_a_key_given_twice_is_refused_by_check_config_and_run_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "web.yml").write_text("basic_auth_users: {}\nbasic_auth_users: {}\n")
    path = tmp_path / "spectax.yml"
    path.write_text(DUPLICATED.format(port=free_port(), tmp=tmp_path))
    assert yaml.safe_load(path.read_text())["window"] == "10m"  # what YAML alone would keep
    for command in (["check-config", str(path)], ["run", "--config", str(path)]):
        code, said = run_cli(capsys, *command)
        assert code == 2, (command, said)
        assert "line 8: key 'gpus' is given twice in one mapping (first on line 7)" in said
        assert "line 9: key 'window' is given twice in one mapping (first on line 2)" in said
    code, said = run_cli(capsys, "check-config", str(path))
    assert "line 2: key 'basic_auth_users' is given twice" in said  # the web config too
    assert not (tmp_path / "state").exists()


def test_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    """`<<: *base` then a key of its own overrides on purpose."""
    path = tmp_path / "spectax.yml"
    path.write_text(
        "endpoints:\n"
        "  - &base {name: a, url: 'http://127.0.0.1:1', gpus: 2}\n"
        "  - <<: *base\n"
        "    name: b\n"
    )
    settings = load_config(path)
    assert [(e.name, e.gpus) for e in settings.config.endpoints] == [("a", 2), ("b", 2)]


def test_duplicates_are_reported_with_the_other_problems(tmp_path: Path) -> None:
    path = tmp_path / "spectax.yml"
    path.write_text("window: 5m\nwindow: 1s\nlisten: nope\n")
    with pytest.raises(ConfigError) as error:
        load_config(path)
    problems = error.value.problems
    assert problems[0].startswith("line 2: key 'window' is given twice")
    assert any(p.startswith("listen:") and "must be HOST:PORT" in p for p in problems)
    assert any(p.startswith("window: must hold at least two scrape intervals") for p in problems)


PLANTED = """\
listen: nope
scrape_interval: 10s
scrape_timeout: 20s
max_body_bytes: 0
store_queue_max_rows: 0
retention: {{windows: forever}}
scrape_intervall: 5s
storage_url_file: {tmp}/no-db-url
price_table: {tmp}/no-prices.csv
endpoints:
  - name: a
    url: http://127.0.0.1:1
    gpus: 0
    bearer_token_file: {tmp}/no-token
    engine: nope
  - name: b
    url: ftp://x
    basic_auth: {{username: u, password: pass123}}
    acceptance_threshold: 2
    control: nobody
  - name: c
    url: http://127.0.0.1:3
    speculation: {{method: draft_model}}
    tls: {{cert_file: {tmp}/x.pem}}
  - name: c
    url: http://127.0.0.1:4
    step_overhead_ratio: 100
    price: {{provider: only}}
    bearer_token: ${{SPECTAX_SURELY_UNSET}}
  - name: d
    url: http://127.0.0.1:5
    gpu_memory_bytes: -1
    speculation: {{method: ngram}}
    step_overhead_ratio: 0.0
    tls: {{ca_file: {tmp}/no-ca.pem}}
  - name: e
    url: http://127.0.0.1:6
    speculation: {{method: bogus}}
    price: {{usd_per_hour: 1, provider: x}}
    basic_auth: {{username: "a:b", password: Zx9-basic-4e7b1a}}
  - name: f
    url: http://127.0.0.1:7
    gpu: [not, a, name]
    price: {{provider: runpod, product: pods secure}}
billing:
  - {{type: runpod, name: rp}}
  - {{type: runpod, name: rp2, interval: x, api_key_file: {tmp}/no-key}}
  - {{type: runpod, name: rp3, api_key: [1]}}
sources:
  - {{url: "ftp://prom", selector: 'job="v"', bearer_token_file: {tmp}/no-src-token}}
"""

# Each planted error, as check-config says it (the start of its line).
EXPECTED = [
    "listen: Value error, must be HOST:PORT",
    "max_body_bytes: Input should be greater than 0",
    "store_queue_max_rows: Input should be greater than or equal to 1",
    "retention.windows: Value error, 'forever' is not a duration",
    "scrape_intervall: unknown key",
    "storage_url_file: cannot read {tmp}/no-db-url",
    "price_table: {tmp}/no-prices.csv: cannot read",
    "scrape_timeout: must not be longer than scrape_interval",
    "endpoints[0].gpus: Input should be greater than or equal to 1",
    "endpoints[0].bearer_token_file: cannot read {tmp}/no-token",
    "endpoints[0].engine: Input should be 'vllm'",
    "endpoints[1].url: Value error, must be an http:// or https:// URL",
    "endpoints[1].basic_auth.password: the secret is shorter than 8 characters",
    "endpoints[1].acceptance_threshold: Input should be less than or equal to 1",
    "endpoints[1].control: no endpoint named 'nobody'",
    "endpoints[2].speculation.draft_cost_ratio: required for method draft_model",
    "endpoints[2].tls: cert_file and key_file go together",
    "endpoints[3].name: 'c' is used by an earlier endpoint",
    "endpoints[3].step_overhead_ratio: Input should be less than or equal to 20",
    "endpoints[3].price: needs usd_per_hour, or provider, product and gpu",
    "endpoints[3].bearer_token: environment variable SPECTAX_SURELY_UNSET is not set",
    "endpoints[4].gpu_memory_bytes: Input should be greater than 0",
    "endpoints[4].step_overhead_ratio: 0 is below 0.01",
    "endpoints[4].tls.ca_file: cannot load",
    "endpoints[5].speculation.method: Input should be 'ngram'",
    "endpoints[5].price: give either usd_per_hour or provider/product/gpu, not both",
    "endpoints[5].basic_auth.username: must not contain ':'",
    "endpoints[6].gpu: Input should be a valid string",
    "billing[0].api_key: required (or api_key_file)",
    "billing[1].runpod.interval: Value error, 'x' is not a duration",
    "billing[1].api_key_file: cannot read {tmp}/no-key",
    "billing[2].runpod.api_key: Input should be a valid string",
    "sources[0].url: Value error, must be an http:// or https:// URL",
    "sources[0].endpoint_labels: Field required",
    "sources[0]: Value error, bearer_token_file: cannot read {tmp}/no-src-token",
]


def test_every_planted_error_is_reported_in_one_check_config_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """35 errors over the top level, 7 endpoints, 3 billing sources and a fleet source,
    several in one entry: a field error beside a credential, a price, a floor or a
    source's own check. Nothing else is said: a field left out for its error raises no
    `required` (billing[2]'s api_key) and no price lookup without its gpu (endpoints[6])."""
    path = tmp_path / "spectax.yml"
    path.write_text(PLANTED.format(tmp=tmp_path))
    code, said = run_cli(capsys, "check-config", str(path))
    assert code == 2
    lines = [line.strip() for line in said.splitlines()[1:] if line.strip()]
    expected = [e.format(tmp=tmp_path) for e in EXPECTED]
    missing = [e for e in expected if not any(line.startswith(e) for line in lines)]
    assert not missing, "\n".join(missing)
    assert f"{len(expected)} problem(s)" in said.splitlines()[0]
    assert len(lines) == len(expected), "\n".join(lines)
