"""Stand-ins for Azure's data planes, served on loopback (tests/host/loopback.py), enforcing what the
real services enforce for the calls the host programs make. Azure itself cannot be reached here.

- ``FakeVault``: Key Vault's Get Secret (``GET /secrets/<name>?api-version=7.4``, a Bearer token,
  ``{"value": ...}``), with Azure RBAC per secret: a token of an identity without a grant on the
  secret gets 403 ``Forbidden`` as Key Vault answers it; a missing secret 404 ``SecretNotFound``.
- ``Imds``: the managed-identity token endpoint (tests/host/test_imds.py's ``FakeImds``), whose tokens
  name the resource and the identity: ``tok:<resource>:<client id>``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from modules.bootstrap.host import imds
from tests.host.loopback import serve
from tests.host.test_imds import FakeImds as Imds


def token_of(client_id: str) -> str:
    return f"tok:{imds.VAULT}:{client_id}"


@dataclass
class FakeVault:
    secrets: dict[str, str] = field(default_factory=dict)
    readers: dict[str, set[str]] = field(default_factory=dict)
    """Secret name -> client ids granted Key Vault Secrets User on it."""
    fail: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """Answers to give first, in order, whatever the request (status, headers)."""
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, name: str, value: str, *readers: str) -> None:
        with self.lock:
            self.secrets[name] = value
            self.readers.setdefault(name, set()).update(readers)

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> Any:
        with self.lock:
            self.requests.append(path)
            if self.fail:
                status, extra = self.fail.pop(0)
                return (
                    status,
                    extra,
                    {"error": {"code": "Throttled" if status == 429 else "Unavailable", "message": "x"}},
                )
            auth = headers.get("Authorization", "")
            if method != "GET" or query.get("api-version") != ["7.4"]:
                return 400, {}, {"error": {"code": "BadParameter", "message": "api-version 7.4 and GET only"}}
            if not auth.startswith("Bearer tok:"):
                return 401, {"WWW-Authenticate": 'Bearer authorization="https://login.microsoftonline.com/t"'}, None
            name = path.removeprefix("/secrets/")
            client = auth.removeprefix(f"Bearer tok:{imds.VAULT}:")
            if name not in self.secrets:
                return (
                    404,
                    {},
                    {"error": {"code": "SecretNotFound", "message": f"A secret with (name/id) {name} was not found"}},
                )
            if client not in self.readers.get(name, set()):
                return (
                    403,
                    {},
                    {
                        "error": {
                            "code": "Forbidden",
                            "message": f"Caller is not authorized to perform action on resource. Action: "
                            f"'Microsoft.KeyVault/vaults/secrets/getSecret/action' secret {name}",
                        }
                    },
                )
            return (
                200,
                {"Content-Type": "application/json"},
                {"value": self.secrets[name], "id": f"https://v/secrets/{name}/1"},
            )


@contextmanager
def azure(vault: FakeVault, identity: Imds | None = None) -> Iterator[tuple[str, str]]:
    """(vault URL, IMDS URL) of a loopback Key Vault and IMDS."""
    with serve(vault) as vault_url, serve(identity or Imds()) as imds_url:
        yield vault_url + "/", imds_url
