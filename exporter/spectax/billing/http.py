"""One JSON GET against a billing API, with errors classified for the retry loop.

429 and 503 (with their Retry-After), other 5xx, timeouts, dropped connections,
truncated bodies and malformed JSON are worth retrying; 4xx answers (a wrong
key, a wrong URL) are not. Messages name the URL without its query string and
never a header, so an API key cannot reach a log line, an error or a metric.
"""

from __future__ import annotations

import asyncio
import json
import ssl as ssl_module
from collections.abc import Mapping
from typing import Any

import aiohttp

from spectax.billing.retry import parse_retry_after
from spectax.billing.types import BillingError
from spectax.scrape import redact

MAX_BODY_BYTES = 64 * 1024 * 1024


async def get_json(
    session: aiohttp.ClientSession,
    url: str,
    params: Mapping[str, str] | list[tuple[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    max_bytes: int = MAX_BODY_BYTES,
    ssl: ssl_module.SSLContext | bool = True,
) -> Any:
    """The decoded JSON body of a 200 answer, or BillingError."""
    where = redact(url)
    try:
        async with asyncio.timeout(timeout):
            async with session.get(
                url, params=params, headers=dict(headers or {}), ssl=ssl
            ) as response:
                if response.status != 200:
                    retry_after = parse_retry_after(response.headers.get("Retry-After"))
                    retryable = response.status in (408, 425, 429) or response.status >= 500
                    raise BillingError(
                        f"HTTP {response.status} from {where}",
                        retryable=retryable,
                        retry_after=retry_after if retryable else None,
                    )
                if response.content_length is not None and response.content_length > max_bytes:
                    raise BillingError(f"{where}: answer larger than {max_bytes} bytes")
                body = bytearray()
                async for chunk in response.content.iter_chunked(64 * 1024):
                    body += chunk
                    if len(body) > max_bytes:
                        raise BillingError(f"{where}: answer larger than {max_bytes} bytes")
    except TimeoutError:
        raise BillingError(
            f"no complete answer from {where} within {timeout:g} s", retryable=True
        ) from None
    except aiohttp.ClientPayloadError:
        raise BillingError(f"{where}: the answer was cut short", retryable=True) from None
    except aiohttp.ClientConnectorDNSError as exc:
        raise BillingError(
            f"{where}: cannot resolve the host {exc.host} (DNS)", retryable=True
        ) from None
    except aiohttp.ClientConnectorError as exc:
        raise BillingError(
            f"{where}: cannot connect to {exc.host}:{exc.port}"
            f" ({exc.strerror or type(exc).__name__})",
            retryable=True,
        ) from None
    except aiohttp.ClientError as exc:
        raise BillingError(f"{where}: {type(exc).__name__}", retryable=True) from None
    except OSError as exc:
        raise BillingError(
            f"{where}: {exc.strerror or type(exc).__name__}", retryable=True
        ) from None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        position = getattr(exc, "pos", getattr(exc, "start", 0))
        raise BillingError(
            f"{where}: the answer is not valid JSON (at byte {position})", retryable=True
        ) from None
