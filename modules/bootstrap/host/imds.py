"""A managed identity's access token from the instance metadata service (IMDS), as the host asks.

``GET http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=<r>&client_id=<id>``
with ``Metadata: true`` and never through a proxy (learn.microsoft.com, "How to use managed
identities for Azure resources on an Azure VM to acquire an access token"; ``client_id`` picks the
host's identity when it has several). IMDS throttles (429) and answers 5xx while the identity is
being attached after boot; both are retried with a growing wait ("Retry guidance" on the same page:
retry 404, 410, 429 and 5xx with exponential back-off).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

ENDPOINT = "http://169.254.169.254"
API_VERSION = "2018-02-01"
RETRIED = (404, 410, 429, 500, 502, 503, 504)
VAULT = "https://vault.azure.net"
"""Key Vault's data plane (its OAuth resource)."""
STORAGE = "https://storage.azure.com/"
"""Blob storage's data plane (its OAuth resource)."""


class TokenError(Exception):
    """IMDS gave no token; the message says for which identity and why."""


def token(
    resource: str,
    client_id: str,
    *,
    endpoint: str = ENDPOINT,
    tries: int = 8,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """The access token of user-assigned identity ``client_id`` for ``resource``."""
    query = urllib.parse.urlencode({"api-version": API_VERSION, "resource": resource, "client_id": client_id})
    request = urllib.request.Request(f"{endpoint.rstrip('/')}/metadata/identity/oauth2/token?{query}")
    request.add_header("Metadata", "true")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # link-local: never proxied
    last = ""
    for attempt in range(tries):
        if attempt:
            sleep(min(2**attempt, 60))
        try:
            with opener.open(request, timeout=30) as response:
                return str(json.loads(response.read())["access_token"])
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code} {err.reason}"
            if err.code not in RETRIED:
                break
        except (OSError, ValueError, KeyError) as err:
            last = f"{type(err).__name__}: {err}"
    raise TokenError(f"IMDS token for {resource} (client_id {client_id}): {last} after {attempt + 1} tries")
