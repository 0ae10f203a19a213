"""A Key Vault secret's current version, read and written through the data plane, as the hosts do.

``GET https://<vault>.vault.azure.net/secrets/<name>?api-version=7.4`` returns the current version;
``PUT`` of the same URL with ``{"value", "contentType", "attributes", "tags"}`` adds a new version
(azure-rest-api-specs ``specification/keyvault/data-plane/Microsoft.KeyVault/stable/7.4/secrets.json``:
GetSecret, SetSecret "If the named secret already exists, Azure Key Vault creates a new version";
``attributes.exp`` is a Unix time, common.json ``Attributes``). ``exp`` is informational for secrets:
the service still returns the value after it ("This field is for informational purposes only",
learn.microsoft.com/azure/key-vault/secrets/about-secrets), so a reader compares it itself.

Every call carries ``Authorization: Bearer <token>`` (a managed identity's token for
``https://vault.azure.net``, from ``imds.token``). Key Vault answers 429 when throttled and asks
clients to back off exponentially (learn.microsoft.com/azure/key-vault/general/overview-throttling);
429 and 5xx are retried, honouring ``Retry-After``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

API_VERSION = "7.4"
RETRIED = (429, 500, 502, 503, 504)
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The vault's private endpoint, never a proxy."""


class VaultError(Exception):
    """Key Vault refused or could not be reached; the message names the secret and the answer."""


@dataclass(frozen=True)
class VaultSecret:
    name: str
    value: str
    expires: int | None
    """``attributes.exp`` (Unix seconds), when the writer set one."""
    tags: Mapping[str, str] = field(default_factory=dict)
    id: str = ""
    """The version's URL (``https://<vault>/secrets/<name>/<version>``)."""


def _url(vault_url: str, name: str) -> str:
    query = urllib.parse.urlencode({"api-version": API_VERSION})
    return f"{vault_url.rstrip('/')}/secrets/{urllib.parse.quote(name, safe='')}?{query}"


def _parse(name: str, body: bytes) -> VaultSecret:
    data = json.loads(body)
    attributes = data.get("attributes") or {}
    exp = attributes.get("exp")
    return VaultSecret(
        name=name,
        value=str(data["value"]),
        expires=int(exp) if exp is not None else None,
        tags=dict(data.get("tags") or {}),
        id=str(data.get("id", "")),
    )


def _error(err: urllib.error.HTTPError) -> str:
    try:
        detail = json.loads(err.read()).get("error") or {}
        return f"HTTP {err.code} {detail.get('code', err.reason)}: {detail.get('message', '')}".rstrip(": ")
    except (ValueError, AttributeError, OSError):
        return f"HTTP {err.code} {err.reason}"


def _call(
    request: urllib.request.Request, what: str, *, tries: int, sleep: Callable[[float], None], missing_ok: bool
) -> bytes | None:
    last = ""
    for attempt in range(tries):
        try:
            with _OPENER.open(request, timeout=30) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as err:
            if err.code == 404 and missing_ok:
                return None
            last = _error(err)
            if err.code not in RETRIED or attempt == tries - 1:
                break
            retry_after = err.headers.get("Retry-After", "")
            sleep(float(retry_after) if retry_after.isdigit() else min(2 ** (attempt + 1), 60))
        except OSError as err:
            last = f"{type(err).__name__}: {err}"
            if attempt == tries - 1:
                break
            sleep(min(2 ** (attempt + 1), 60))
    raise VaultError(f"{what}: {last}")


def get_secret(
    vault_url: str, name: str, bearer: str, *, tries: int = 5, sleep: Callable[[float], None] = time.sleep
) -> VaultSecret | None:
    """The current version of secret ``name``, or None when the vault has none."""
    request = urllib.request.Request(_url(vault_url, name), method="GET")
    request.add_header("Authorization", f"Bearer {bearer}")
    body = _call(request, f"GET secret {name}", tries=tries, sleep=sleep, missing_ok=True)
    return None if body is None else _parse(name, body)


def set_secret(
    vault_url: str,
    name: str,
    value: str,
    bearer: str,
    *,
    expires: int | None = None,
    content_type: str = "text/plain",
    tags: Mapping[str, str] | None = None,
    tries: int = 5,
    sleep: Callable[[float], None] = time.sleep,
) -> VaultSecret:
    """Adds a version of secret ``name`` holding ``value`` (the new current version)."""
    payload: dict[str, object] = {"value": value, "contentType": content_type, "tags": dict(tags or {})}
    if expires is not None:
        payload["attributes"] = {"enabled": True, "exp": int(expires)}
    request = urllib.request.Request(_url(vault_url, name), data=json.dumps(payload).encode(), method="PUT")
    request.add_header("Authorization", f"Bearer {bearer}")
    request.add_header("Content-Type", "application/json")
    body = _call(request, f"PUT secret {name}", tries=tries, sleep=sleep, missing_ok=False)
    assert body is not None
    return _parse(name, body)
