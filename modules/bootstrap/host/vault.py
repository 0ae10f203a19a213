"""The cluster's Key Vault data plane, as the hosts call it: read a secret, and add a version of one.

One client for every host program: boot.py and sync.py read their bundle and a node its bootstrap
token (``get_secret``: retried until a deadline, for a host that has just booted), the API servers'
bootstrap token issuer reads and writes the pools' token secrets (``read`` and ``write``, given a
bearer token it asked IMDS for once per run).

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

``PUT`` of the same URL with ``{"value", "contentType", "attributes", "tags"}`` adds a new version
(azure-rest-api-specs ``specification/keyvault/data-plane/Microsoft.KeyVault/stable/7.4/secrets.json``:
SetSecret "If the named secret already exists, Azure Key Vault creates a new version";
``attributes.exp`` is a Unix time, common.json ``Attributes``). ``exp`` is informational for secrets:
the service still returns the value after it ("This field is for informational purposes only",
learn.microsoft.com/azure/key-vault/secrets/about-secrets), so a reader compares it itself. The
issuer's ``read``/``write`` retry only 429 and 5xx (Key Vault throttling guidance: back off
exponentially, honour Retry-After): it runs every few minutes, so a refusal is reported, not waited out.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message

if __package__:  # the toolkit imports this as modules.bootstrap.host.vault
    from . import imds
else:  # a host runs it from /opt/agk/lib
    import imds  # type: ignore[import-not-found, no-redef]

API_VERSION = "7.4"
SECRET_LIMIT = 25_000
"""Bytes a secret value may hold ("a maximum size of 25 KB each": About Azure Key Vault secrets)."""
RETRIED = (401, 403, 404, 408, 429, 500, 502, 503, 504)
"""What a booting host waits out (``get_secret``)."""
THROTTLED = (429, 500, 502, 503, 504)
"""What the issuer's ``read``/``write`` retry a few times."""
MAX_WAIT_S = 30.0
BASE_WAIT_S = 1.0
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""The vault's private endpoint, never a proxy."""


class VaultError(Exception):
    """Key Vault refused or could not be reached (before the deadline); the message names the secret
    and the last answer."""


class SecretExpired(VaultError):
    """403, inner code SecretExpired: a GET of a version past its exp, if the service refuses one."""


@dataclass(frozen=True)
class VaultSecret:
    name: str
    value: str
    expires: int | None
    """``attributes.exp`` (Unix seconds), when the writer set one."""
    tags: Mapping[str, str] = field(default_factory=dict)
    id: str = ""
    """The version's URL (``https://<vault>/secrets/<name>/<version>``)."""


def backoff(
    attempt: int,
    retry_after: float | None = None,
    *,
    cap: float = MAX_WAIT_S,
    rand: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds before retry ``attempt`` (from 1): full jitter over Retry-After, so hosts refused together
    do not return together (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/;
    https://learn.microsoft.com/azure/key-vault/general/overview-throttling)."""
    if attempt < 1:
        raise ValueError(f"retry attempt {attempt}: counts from 1")
    spread = rand(0.0, min(cap, BASE_WAIT_S * 2.0 ** (attempt - 1)))
    return max(retry_after or 0.0, 0.0) + spread


def retry_after_s(headers: Message | None) -> float | None:
    """Retry-After in seconds; an HTTP-date is ignored (a just-booted host's clock may be wrong)."""
    value = (headers.get("Retry-After") or "").strip() if headers else ""
    return float(value) if value.isdigit() else None


def secret_url(vault: str, name: str) -> str:
    return f"{vault.rstrip('/')}/secrets/{urllib.parse.quote(name, safe='')}?api-version={API_VERSION}"


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
    rand: Callable[[float, float], float] = random.uniform,
) -> str:
    """The current value of secret ``name``, retried for up to ``deadline_s`` seconds."""
    url = secret_url(vault, name)
    end = clock() + deadline_s
    attempt, last = 0, ""
    while True:
        after: float | None = None
        try:
            token = imds.token(imds.VAULT, client_id, endpoint=imds_endpoint, sleep=sleep)
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with _OPENER.open(request, timeout=30) as response:
                return str(json.loads(response.read())["value"])
        except urllib.error.HTTPError as err:
            attempt += 1
            last = f"HTTP {err.code} {_reason(err)}"
            if err.code not in RETRIED:
                break
            after = retry_after_s(err.headers)
        except imds.TokenError as err:
            attempt += 1
            last = str(err)
        except (OSError, ValueError, KeyError) as err:
            attempt += 1
            last = f"{type(err).__name__}: {err}"
        wait = backoff(attempt, after, rand=rand)
        if clock() + wait > end:
            break
        log(f"secret {name}: {last}; retrying in {wait:.1f}s")
        sleep(wait)
    raise VaultError(f"secret {name} of {vault}: {last} (gave up after {attempt} tries)")


def _reason(err: urllib.error.HTTPError) -> str:
    """Key Vault's own error message when the body has one (``{"error": {"code", "message"}}``)."""
    return _error_body(err)[0]


def _error_body(err: urllib.error.HTTPError) -> tuple[str, str]:
    """(``code: message``, inner error code or ""), from ``{"error": {"code", "message", "innererror"}}``."""
    try:
        error = json.loads(err.read() or b"{}")["error"]
        inner = error.get("innererror") or {}
        return f"{error['code']}: {error['message']}", str(inner.get("code", "")) if isinstance(inner, dict) else ""
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return str(err.reason), ""


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


def _call(
    request: urllib.request.Request,
    what: str,
    *,
    tries: int,
    sleep: Callable[[float], None],
    missing_ok: bool,
) -> bytes | None:
    last = ""
    for attempt in range(tries):
        try:
            with _OPENER.open(request, timeout=30) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as err:
            if err.code == 404 and missing_ok:
                return None
            reason, inner = _error_body(err)
            last = f"HTTP {err.code} {reason}"
            if err.code == 403 and inner == "SecretExpired":
                raise SecretExpired(f"{what}: {last}") from None
            if err.code not in THROTTLED or attempt == tries - 1:
                break
            sleep(backoff(attempt + 1, retry_after_s(err.headers), cap=60))
        except OSError as err:
            last = f"{type(err).__name__}: {err}"
            if attempt == tries - 1:
                break
            sleep(backoff(attempt + 1, cap=60))
    raise VaultError(f"{what}: {last}")


def read(
    vault: str, name: str, bearer: str, *, tries: int = 5, sleep: Callable[[float], None] = time.sleep
) -> VaultSecret | None:
    """The current version of secret ``name`` (value, expiry, tags), or None when the vault has none."""
    request = urllib.request.Request(secret_url(vault, name), method="GET")
    request.add_header("Authorization", f"Bearer {bearer}")
    body = _call(request, f"GET secret {name}", tries=tries, sleep=sleep, missing_ok=True)
    return None if body is None else _parse(name, body)


def write(
    vault: str,
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
    request = urllib.request.Request(secret_url(vault, name), data=json.dumps(payload).encode(), method="PUT")
    request.add_header("Authorization", f"Bearer {bearer}")
    request.add_header("Content-Type", "application/json")
    body = _call(request, f"PUT secret {name}", tries=tries, sleep=sleep, missing_ok=False)
    assert body is not None
    return _parse(name, body)
