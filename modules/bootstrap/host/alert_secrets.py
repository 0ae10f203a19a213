"""Copies the Alertmanager receivers' secrets (a PagerDuty routing key, a Teams workflow URL, an SMTP
password, a webhook token) from the cluster's Key Vault into the files alertmanager.yml names (stdlib
only; Python 3.10; runs as ``agk-alert-secrets.service`` from its timer).

The stack file names each secret, never its value (modules/bootstrap/alerting_config.py). The cluster
stack creates one vault secret per Prometheus host and receiver secret, holding ``PLACEHOLDER`` and
readable by that host alone (Key Vault Secrets User on the secret); the operator sets the value with
``az keyvault secret set`` (docs/oncall.md "Receivers and their secrets"), and Pulumi never writes it
again (``ignore_changes``). Alertmanager reads a ``*_file`` secret at every notification, so a new value
needs no reload.

A secret still holding the placeholder is left out (the receiver's notifications fail and Alertmanager's
``alertmanager_notifications_failed_total`` counts them) and said in the journal with the command that
sets it. Exit 1 only when the vault could not be read.

Settings (``/etc/agk/alert-secrets.json``, a deploy-time fact): ``{"dir": ..., "secrets": {name: vault
secret}}``. usage: python3 /opt/agk/lib/alert_secrets.py [--config FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

if __package__:  # the toolkit imports this as modules.bootstrap.host.alert_secrets
    from . import boot, files, imds, vault
else:  # a host runs it from /opt/agk/lib
    import boot  # type: ignore[import-not-found, no-redef]
    import files  # type: ignore[import-not-found, no-redef]
    import imds  # type: ignore[import-not-found, no-redef]
    import vault  # type: ignore[import-not-found, no-redef]

CONFIG = "/etc/agk/alert-secrets.json"
PLACEHOLDER = "not-set-yet: set this secret to the receiver's value (docs/oncall.md)"
"""What the cluster stack creates each secret with: never a routing key, URL or password."""
OWNER = "root:prometheus"
"""Alertmanager runs as prometheus: it reads the files, only root writes them."""
DEADLINE_S = 120.0


@dataclass(frozen=True)
class Settings:
    dir: str
    secrets: Mapping[str, str]
    """Receiver secret name (the file's name) -> the host's vault secret."""

    def to_json(self) -> str:
        return json.dumps({"dir": self.dir, "secrets": dict(self.secrets)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Settings:
        data = json.loads(text)
        return cls(dir=str(data["dir"]), secrets={str(k): str(v) for k, v in data["secrets"].items()})


def refresh(
    vault_url: str,
    client_id: str,
    settings: Settings,
    *,
    root: str = "/",
    imds_endpoint: str = imds.ENDPOINT,
    deadline_s: float = DEADLINE_S,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, str]:
    """name -> "written", "unchanged" or "not set"; raises ``vault.VaultError``."""
    outcome = {}
    for name, secret in sorted(settings.secrets.items()):
        value = vault.get_secret(
            vault_url, secret, client_id, deadline_s=deadline_s, imds_endpoint=imds_endpoint, sleep=sleep, log=log
        ).strip()
        if value == PLACEHOLDER or not value:
            outcome[name] = "not set"
            vault_name = vault_url.split("//", 1)[-1].split(".", 1)[0]
            log(
                f"{name}: secret {secret} is not set yet, its receiver cannot notify: "
                f"az keyvault secret set --vault-name {vault_name} --name {secret} --value <the {name} value>"
            )
            continue
        path = root.rstrip("/") + f"{settings.dir}/{name}"
        data = value.encode()
        if files.read(path).data == data:
            outcome[name] = "unchanged"
            continue
        files.write(path, data, 0o640, OWNER)
        outcome[name] = "written"
        log(f"{name}: wrote {settings.dir}/{name} from {secret}")  # never the value
    return outcome


def main(argv: Sequence[str], *, imds_endpoint: str = imds.ENDPOINT, root: str = "/") -> int:
    parser = argparse.ArgumentParser(description="Alertmanager receiver secrets from Key Vault")
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--host-config", default=boot.HOST_CONFIG)
    parser.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds to retry the vault")
    args = parser.parse_args(argv)
    host = boot.HostConfig.load(args.host_config)
    with open(args.config) as f:
        settings = Settings.from_json(f.read())
    try:
        outcome = refresh(
            host.vault,
            host.client_id,
            settings,
            root=root,
            imds_endpoint=imds_endpoint,
            deadline_s=args.deadline,
            log=print,
        )
    except vault.VaultError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(", ".join(f"{k}: {v}" for k, v in outcome.items()) or "no receiver secrets")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
