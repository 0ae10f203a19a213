"""A pool node's kubelet bootstrap token: copied from the pool's Key Vault secret into the token file.

The bootstrap kubeconfig names the file (``tokenFile``: client-go reads it whenever it builds a
request, so a renewed token needs no new kubeconfig). The pool's secret starts as ``PLACEHOLDER``
(the cluster stack creates it before any API server runs); an API server's issuer
(bootstrap_tokens.py) replaces it with ``<id>.<secret>`` once the add-ons' RBAC lets it mint one.
So a node that boots before that waits, up to a deadline, for a value that is a token, and the
hourly sync copies the current value again: a rotated token matters only to a node that has not
joined yet (its own certificate, once signed, rotates through the API itself).

The host reads the secret with its own identity (Key Vault Secrets User on that secret alone).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

if __package__:  # the toolkit imports this as modules.bootstrap.host.node_token
    from . import files, imds, vault
else:  # a host runs it from /opt/agk/lib
    import files  # type: ignore[import-not-found, no-redef]
    import imds  # type: ignore[import-not-found, no-redef]
    import vault  # type: ignore[import-not-found, no-redef]

TOKEN_PATTERN = re.compile(r"\A([a-z0-9]{6})\.([a-z0-9]{16})\Z")
"""k8s.io/cluster-bootstrap token/api: BootstrapTokenPattern."""
PLACEHOLDER = "no-token-yet: the API servers' bootstrap token issuer writes the pool's token here"
"""What the cluster stack creates the secret with: not a token (the issuer replaces it)."""
CONFIG = "/etc/agk/bootstrap-token.json"
"""Where a pool node's bundle says which secret holds its token and where the file goes."""
POLL_S = 30.0
"""How often a waiting node reads the secret again while it holds no token."""


class NoTokenYet(Exception):
    """The deadline passed while the secret held no token (the issuer has not run yet)."""


@dataclass(frozen=True)
class TokenConfig:
    secret: str
    """The pool's token secret in the cluster's vault."""
    file: str
    """The kubeconfig's ``tokenFile``."""

    def to_json(self) -> str:
        return json.dumps({"file": self.file, "secret": self.secret}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TokenConfig:
        data = json.loads(text)
        return cls(secret=str(data["secret"]), file=str(data["file"]))


def refresh(
    vault_url: str,
    client_id: str,
    config: TokenConfig,
    *,
    root: str = "/",
    deadline_s: float,
    imds_endpoint: str = imds.ENDPOINT,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = lambda line: None,
) -> str:
    """Write the pool's current token to the token file (0600) when it differs; wait for one, up to
    ``deadline_s``, while the secret holds none. Returns the token id; raises ``NoTokenYet`` or
    ``vault.VaultError``."""
    end = clock() + deadline_s
    while True:
        value = vault.get_secret(
            vault_url,
            config.secret,
            client_id,
            deadline_s=max(end - clock(), 0.0),
            imds_endpoint=imds_endpoint,
            sleep=sleep,
            clock=clock,
            log=log,
        ).strip()
        found = TOKEN_PATTERN.match(value)
        if found:
            path = root.rstrip("/") + config.file
            data = (value + "\n").encode()
            if files.read(path).data != data:
                files.write(path, data, 0o600)
                log(f"wrote {config.file} (token {found.group(1)} from {config.secret})")
            return found.group(1)
        if clock() + POLL_S > end:
            raise NoTokenYet(
                f"secret {config.secret} holds no bootstrap token yet (an API server's issuer writes it once "
                "the add-ons' RBAC exists): the kubelet retries, and the sync copies it when it appears"
            )
        log(f"secret {config.secret} holds no bootstrap token yet; reading again in {POLL_S:.0f}s")
        sleep(POLL_S)
