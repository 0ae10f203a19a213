"""A stand-in Key Vault data plane (secrets only) for tests/host/loopback.serve.

Azure cannot be reached here. It enforces what the 7.4 data plane documents for the calls the hosts
make (azure-rest-api-specs, data-plane/Microsoft.KeyVault/stable/7.4/secrets.json):
``api-version`` is required; every request needs ``Authorization: Bearer <token>`` (401 otherwise,
with the ``WWW-Authenticate`` challenge Key Vault sends); names match ``^[0-9a-zA-Z-]+$``;
``GET /secrets/<name>`` returns the current version or 404 ``SecretNotFound``; ``PUT`` requires a
string ``value`` and adds a version that becomes current; the bundle carries ``id``, ``value``,
``contentType``, ``tags`` and ``attributes`` (Unix times).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

NAME = re.compile(r"\A[0-9a-zA-Z-]+\Z")
CHALLENGE = 'Bearer authorization="https://login.microsoftonline.com/tenant", resource="https://vault.azure.net"'


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class FakeVault:
    def __init__(self, bearer: str, *, now: Callable[[], float] = time.time) -> None:
        self.bearer = bearer
        self.now = now
        self.versions: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []
        self.on_get: Callable[[str], None] | None = None
        """Runs before a GET answers (a test's hook to line up concurrent issuers)."""
        self.throttle = 0
        """Answer this many next requests 429 with Retry-After: 1."""

    def current(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.versions[name][-1] if self.versions.get(name) else None

    def put(self, name: str, value: str, **attributes: Any) -> None:
        """What an operator (or Pulumi's placeholder) writes, bypassing the data plane."""
        with self.lock:
            self.versions.setdefault(name, []).append(
                {"id": f"https://vault/secrets/{name}/{uuid.uuid4().hex}", "value": value, "attributes": attributes}
            )

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            self.calls.append((method, path))
        if headers.get("Authorization") != f"Bearer {self.bearer}":
            return (
                401,
                {"WWW-Authenticate": CHALLENGE},
                _error("Unauthorized", "AKV10000: Request is missing a Bearer or PoP token."),
            )
        if query.get("api-version") != ["7.4"]:
            return 400, {}, _error("BadParameter", "The api-version query parameter is missing or not supported")
        if self.throttle:
            self.throttle -= 1
            return 429, {"Retry-After": "1"}, _error("Throttled", "Request was not processed because too many requests")
        parts = path.strip("/").split("/")
        if len(parts) != 2 or parts[0] != "secrets" or not NAME.match(parts[1]):
            return 400, {}, _error("BadParameter", f"{path}: not a secret URL")
        name = parts[1]
        if method == "GET":
            if self.on_get is not None:
                self.on_get(name)
            found = self.current(name)
            if found is None:
                return (
                    404,
                    {},
                    _error("SecretNotFound", f"A secret with (name/id) {name} was not found in this key vault."),
                )
            return 200, {}, found
        if method == "PUT":
            try:
                params = json.loads(body)
            except ValueError:
                return 400, {}, _error("BadParameter", "The request body is not JSON")
            if not isinstance(params, dict) or not isinstance(params.get("value"), str):
                return 400, {}, _error("BadParameter", "Property value is required")
            now = int(self.now())
            attributes = {"enabled": True, **(params.get("attributes") or {}), "created": now, "updated": now}
            bundle = {
                "id": f"https://vault/secrets/{name}/{uuid.uuid4().hex}",
                "value": params["value"],
                "contentType": params.get("contentType"),
                "tags": params.get("tags") or {},
                "attributes": {**attributes, "recoveryLevel": "Recoverable+Purgeable"},
            }
            with self.lock:
                self.versions.setdefault(name, []).append(bundle)
            return 200, {}, bundle
        return 405, {}, _error("BadParameter", f"{method} is not supported here")
