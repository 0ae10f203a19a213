"""Stand-ins for Azure's data planes, served on loopback (tests/bootstrap/host/loopback.py), enforcing what the
real services enforce for the calls the host programs make. Azure itself cannot be reached here.

- ``FakeVault``: Key Vault's secrets data plane, 7.4 (azure-rest-api-specs,
  data-plane/Microsoft.KeyVault/stable/7.4/secrets.json): ``api-version`` is required; every request
  needs ``Authorization: Bearer <token>`` (401 otherwise, with the ``WWW-Authenticate`` challenge Key
  Vault sends); names match ``^[0-9a-zA-Z-]+$``; ``GET /secrets/<name>`` returns the current version
  (``id``, ``value``, ``contentType``, ``tags``, ``attributes`` with Unix times) or 404
  ``SecretNotFound``; ``PUT`` requires a string ``value`` and adds a version that becomes current.
  Azure RBAC per secret: a token of an identity without Key Vault Secrets User (``readers``) or
  Secrets Officer (``writers``, who may also read) on the secret gets 403 ``Forbidden`` as Key Vault
  answers it.
- ``Imds``: the managed-identity token endpoint (tests/bootstrap/host/test_imds.py's ``FakeImds``), whose tokens
  name the resource and the identity: ``tok:<resource>:<client id>``.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from modules.bootstrap.host import imds
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_imds import FakeImds as Imds

NAME = re.compile(r"\A[0-9a-zA-Z-]+\Z")
CHALLENGE = 'Bearer authorization="https://login.microsoftonline.com/tenant", resource="https://vault.azure.net"'


def token_of(client_id: str) -> str:
    return f"tok:{imds.VAULT}:{client_id}"


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


@dataclass
class FakeVault:
    versions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    readers: dict[str, set[str]] = field(default_factory=dict)
    """Secret name -> client ids granted Key Vault Secrets User on it."""
    writers: dict[str, set[str]] = field(default_factory=dict)
    """Secret name -> client ids granted Key Vault Secrets Officer on it."""
    fail: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """Answers to give first, in order, whatever the request (status, headers)."""
    throttle: int = 0
    """Answer this many next authenticated requests 429 with Retry-After: 1."""
    now: Callable[[], float] = time.time
    refuse_expired: bool = False
    """Answer a GET of a version past its ``exp`` 403, inner code SecretExpired (what a user of
    Azure/AzureKeyVault#19 expected); off, as the REST docs say and that user saw, it answers 200."""
    on_get: Callable[[str], None] | None = None
    """Runs once a GET has read the secret, before it answers (a test's hook to line up concurrent issuers)."""
    requests: list[str] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def secrets(self) -> dict[str, str]:
        """Name -> current value."""
        with self.lock:
            return {n: v[-1]["value"] for n, v in self.versions.items() if v}

    def current(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.versions[name][-1] if self.versions.get(name) else None

    def put(
        self, name: str, value: str, *readers: str, tags: Mapping[str, str] | None = None, **attributes: Any
    ) -> None:
        """What Pulumi (through ARM) or an operator writes, bypassing the data plane; ``readers`` get
        Key Vault Secrets User on it."""
        with self.lock:
            version = {
                "id": f"https://vault/secrets/{name}/{uuid.uuid4().hex}",
                "value": value,
                "attributes": attributes,
            }
            if tags is not None:
                version["tags"] = dict(tags)
            self.versions.setdefault(name, []).append(version)
            self.readers.setdefault(name, set()).update(readers)

    def grant_write(self, name: str, *clients: str) -> None:
        with self.lock:
            self.writers.setdefault(name, set()).update(clients)

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.requests.append(path)
            self.calls.append((method, path))
            if self.fail:
                status, extra = self.fail.pop(0)
                return status, extra, _error("Throttled" if status == 429 else "Unavailable", "x")
        auth = headers.get("Authorization", "")
        if not auth.startswith(f"Bearer tok:{imds.VAULT}:"):
            return (
                401,
                {"WWW-Authenticate": CHALLENGE},
                _error("Unauthorized", "AKV10000: Request is missing a Bearer or PoP token."),
            )
        client = auth.removeprefix(f"Bearer tok:{imds.VAULT}:")
        if query.get("api-version") != ["7.4"]:
            return 400, {}, _error("BadParameter", "The api-version query parameter is missing or not supported")
        with self.lock:
            if self.throttle:
                self.throttle -= 1
                return 429, {"Retry-After": "1"}, _error("Throttled", "Request was not processed: too many requests")
        parts = path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "secrets" or not NAME.match(parts[1]):
            return 400, {}, _error("BadParameter", f"{path}: not a secret URL")
        name = parts[1]
        with self.lock:
            may_read = client in self.readers.get(name, set()) | self.writers.get(name, set())
            may_write = client in self.writers.get(name, set())
        if method == "GET":
            found = self.current(name)
            if self.on_get is not None:
                # After the read, so two GETs lined up by the hook have both read before either answers
                # (before the hook, a released GET could read what the other's caller wrote meanwhile).
                self.on_get(name)
            if found is None:
                return (
                    404,
                    {},
                    _error("SecretNotFound", f"A secret with (name/id) {name} was not found in this key vault."),
                )
            if not may_read:
                return 403, {}, _forbidden("getSecret", name)
            exp = (found.get("attributes") or {}).get("exp")
            if self.refuse_expired and exp is not None and exp <= self.now():
                body = _error("Forbidden", "Operation get is not allowed on a expired secret.")
                body["error"]["innererror"] = {"code": "SecretExpired"}
                return 403, {}, body
            return 200, {"Content-Type": "application/json"}, found
        if method == "PUT":
            if not may_write:
                return 403, {}, _forbidden("setSecret", name)
            try:
                params = json.loads(body)
            except ValueError:
                return 400, {}, _error("BadParameter", "The request body is not JSON")
            if not isinstance(params, dict) or not isinstance(params.get("value"), str):
                return 400, {}, _error("BadParameter", "Property value is required")
            now = int(self.now())
            attributes = {"enabled": True, **(params.get("attributes") or {}), "created": now, "updated": now}
            version = {
                "id": f"https://vault/secrets/{name}/{uuid.uuid4().hex}",
                "value": params["value"],
                "contentType": params.get("contentType"),
                "tags": params.get("tags") or {},
                "attributes": {**attributes, "recoveryLevel": "Recoverable+Purgeable"},
            }
            with self.lock:
                self.versions.setdefault(name, []).append(version)
            return 200, {}, version
        return 405, {}, _error("BadParameter", f"{method} is not supported here")


def _forbidden(action: str, name: str) -> dict[str, Any]:
    return _error(
        "Forbidden",
        f"Caller is not authorized to perform action on resource. Action: "
        f"'Microsoft.KeyVault/vaults/secrets/{action}/action' secret {name}",
    )


@contextmanager
def azure(vault: FakeVault, identity: Imds | None = None) -> Iterator[tuple[str, str]]:
    """(vault URL, IMDS URL) of a loopback Key Vault and IMDS."""
    with serve(vault) as vault_url, serve(identity or Imds()) as imds_url:
        yield vault_url + "/", imds_url
