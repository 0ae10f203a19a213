"""Read one secret from the cluster's Key Vault with the host's managed identity (the data plane).

``GET https://<vault>.vault.azure.net/secrets/<name>?api-version=7.4`` with ``Authorization: Bearer
<token>``, the token from IMDS for resource ``https://vault.azure.net`` (Key Vault REST API, "Get
Secret": without a version the current one is returned, as JSON ``{"value": ..., "id": ...}``). The
vault accepts only its private endpoint; ``<vault>.vault.azure.net`` resolves to it through the
hub's privatelink.vaultcore.azure.net zone, whose certificate is the public one.

What a just-booted host meets and retries until its deadline:
- 403 while its role assignment propagates (Azure RBAC: "it can sometimes take up to 30 minutes for
  changes to take effect"), 401 while its token is not yet accepted;
- a name that does not resolve yet (the zone group's record or the VNet link is still being made);
- 429 (Key Vault throttling guidance: back off exponentially; Retry-After says how long) and 5xx.
A 404 is retried too: the secret is written before the VM exists, but a host should not give up on
a vault that is still replicating.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

if __package__:  # the toolkit imports this as modules.bootstrap.host.vault
    from . import imds
else:  # a host runs it from /opt/agk/lib
    import imds  # type: ignore[import-not-found, no-redef]

API_VERSION = "7.4"
SECRET_LIMIT = 25_000
"""Bytes a secret value may hold ("a maximum size of 25 KB each": About Azure Key Vault secrets)."""
RETRIED = (401, 403, 404, 408, 429, 500, 502, 503, 504)
MAX_WAIT_S = 30.0


class VaultError(Exception):
    """No secret before the deadline; the message names the vault, the secret and the last answer."""


def secret_url(vault: str, name: str) -> str:
    return f"{vault.rstrip('/')}/secrets/{urllib.parse.quote(name)}?api-version={API_VERSION}"


def get_secret(
    vault: str,
    name: str,
    client_id: str,
    *,
    deadline_s: float,
    imds_endpoint: str = imds.ENDPOINT,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = lambda line: None,
) -> str:
    """The current value of secret ``name``, retried for up to ``deadline_s`` seconds."""
    url = secret_url(vault, name)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the private endpoint, never a proxy
    end = clock() + deadline_s
    attempt, last = 0, ""
    while True:
        wait = min(2.0**attempt, MAX_WAIT_S)
        try:
            token = imds.token(imds.VAULT, client_id, endpoint=imds_endpoint, sleep=sleep)
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with opener.open(request, timeout=30) as response:
                return str(json.loads(response.read())["value"])
        except urllib.error.HTTPError as err:
            attempt += 1
            last = f"HTTP {err.code} {_reason(err)}"
            if err.code not in RETRIED:
                break
            after = err.headers.get("Retry-After") if err.headers else None
            if after and after.isdigit():
                wait = max(wait, float(after))
        except imds.TokenError as err:
            attempt += 1
            last = str(err)
        except (OSError, ValueError, KeyError) as err:
            attempt += 1
            last = f"{type(err).__name__}: {err}"
        if clock() + wait > end:
            break
        log(f"secret {name}: {last}; retrying in {wait:.0f}s")
        sleep(wait)
    raise VaultError(f"secret {name} of {vault}: {last} (gave up after {attempt} tries)")


def _reason(err: urllib.error.HTTPError) -> str:
    """Key Vault's own error message when the body has one (``{"error": {"code", "message"}}``)."""
    try:
        body = json.loads(err.read() or b"{}")
        return f"{body['error']['code']}: {body['error']['message']}"
    except (ValueError, KeyError, TypeError, OSError):
        return str(err.reason)
