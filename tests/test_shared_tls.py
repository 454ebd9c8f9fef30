"""Endpoints with the same `tls:` block share one TLS context (issue 31): a context with the
system's CAs is ~0.8 MiB, and 2,000 endpoints that each made their own held 1.7 GiB and took
two minutes of CPU to load."""

from __future__ import annotations

from pathlib import Path

import pytest

from spectax.config import ConfigError, validate


def endpoint(name: str, **tls: object) -> dict[str, object]:
    return {"name": name, "url": f"https://{name}.example:8000", "tls": tls}


def test_endpoints_with_equal_tls_blocks_share_one_context_and_others_have_their_own() -> None:
    settings = validate(
        {
            "endpoints": [
                endpoint("a", insecure_skip_verify=True),
                endpoint("b", insecure_skip_verify=True),
                endpoint("c"),
                {"name": "d", "url": "http://d.example:8000"},
            ]
        }
    )
    auth = settings.target_auth
    assert auth["a"].ssl is not None and auth["a"].ssl is auth["b"].ssl
    assert auth["c"].ssl is not None and auth["c"].ssl is not auth["a"].ssl
    assert auth["a"].ssl.verify_mode.name == "CERT_NONE"
    assert auth["c"].ssl.verify_mode.name == "CERT_REQUIRED"
    assert auth["d"].ssl is None


def test_a_shared_tls_block_that_fails_is_reported_for_every_endpoint_that_gives_it(
    tmp_path: Path,
) -> None:
    missing = str(tmp_path / "no-ca.pem")
    with pytest.raises(ConfigError) as raised:
        validate({"endpoints": [endpoint("a", ca_file=missing), endpoint("b", ca_file=missing)]})
    said = [p for p in raised.value.problems if ".tls.ca_file: cannot load" in p]
    assert [p.split(".tls")[0] for p in said] == ["endpoints[0]", "endpoints[1]"]
