"""Alertmanager on the Prometheus hosts: its configuration, the peers it gossips with, and where its
receivers' secrets live (pure).

Every Prometheus host runs an Alertmanager; with two or more hosts they form one gossip cluster
(``--cluster.peer`` for every other host), which shares silences and notification logs so a group is
notified once, not once per replica (Alertmanager README, "High Availability"). Every Prometheus sends
to every Alertmanager (the ``alerting:`` block of prometheus.yml) with its ``replica`` label dropped,
so the two Prometheus replicas' copies of an alert are one alert there.

Routing is by severity (``monitoring.ALERTS`` gives each shipped rule one); the island alert inhibits
the per-node alerts of its island (``INHIBITIONS``), so a broken InfiniBand island pages once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from modules.bootstrap.alerting_config import SEVERITIES, AlertingConfig, Severity
from modules.bootstrap.monitoring import ISLAND_ALERT, ISLAND_LABEL, NODE_ALERTS

Kind = Literal["webhook", "email", "msteams", "pagerduty"]

CONFIG_DIR = "/etc/alertmanager"
CONFIG_FILE = f"{CONFIG_DIR}/alertmanager.yml"
SECRETS_DIR = f"{CONFIG_DIR}/secrets"
DATA_DIR = "/var/lib/prometheus/alertmanager"
TEMPLATE_KEY = "alerting"
"""Prefix of the Key Vault secrets a receiver names (``alerting-<secret>-<digest>``)."""
NULL_RECEIVER = "null"
"""Receives what no severity route takes (info alerts when no one wants them): notifies nobody."""
GROUP_BY = ("alertname", "cluster", ISLAND_LABEL)
# Alertmanager's msteamsv2 integration (Teams Workflows webhooks) came with v0.28.0; Microsoft retires
# the Office 365 connectors the older msteams integration posts to (Microsoft 365 Developer Blog,
# "Retirement of Office 365 connectors within Microsoft Teams").
TEAMS_KEY = "msteamsv2_configs"


@dataclass(frozen=True)
class Integration:
    kind: Kind
    settings: tuple[tuple[str, Any], ...]
    """Alertmanager's keys for this integration (no secret among them)."""
    secret: tuple[str, str] | None = None
    """(Alertmanager's ``*_file`` key, Key Vault secret name): a file under SECRETS_DIR the host fills."""


@dataclass(frozen=True)
class Receiver:
    name: str
    integrations: tuple[Integration, ...]


@dataclass(frozen=True)
class Alerting:
    """Where alerts go (from the stack's ``alerting`` section)."""

    receivers: tuple[Receiver, ...]
    routes: tuple[tuple[Severity, tuple[str, ...]], ...]
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"
    runbook_base_url: str = ""

    @property
    def secrets(self) -> tuple[str, ...]:
        """Key Vault secrets the hosts read, each once."""
        found = [i.secret[1] for r in self.receivers for i in r.integrations if i.secret]
        return tuple(dict.fromkeys(found))


UNCONFIGURED = Alerting(receivers=(), routes=())
"""A stack without an ``alerting`` section: Alertmanager runs and keeps alerts (its UI, amtool), but tells
no one; ``agk plan`` says so (warnings) and docs/oncall.md says how to add a receiver."""


ALERT_FACT = "fact:alert-secrets"
"""The host's receiver secrets (/etc/agk/alert-secrets.json): receiver secret -> this host's vault secret."""
SECRETS_UNIT = "agk-alert-secrets.service"
SECRETS_TIMER = "agk-alert-secrets.timer"
DIGEST_STANDIN = "0" * 8
"""Offline stand-in for the 8 hex digits keyvault.secret_name appends (same length)."""


def vault_key(host: str, secret: str) -> str:
    """The key the cluster stack names host ``host``'s copy of ``secret`` after (``<key>-<digest>``; at
    most 9 + 45 + 1 + 60 + 9 = 124 of Key Vault's 127 characters)."""
    return f"{TEMPLATE_KEY}-{host}-{secret}"


def settings_json(vault_names: dict[str, str]) -> str:
    """/etc/agk/alert-secrets.json: where the files go and which vault secret fills each."""
    return (
        json.dumps({"dir": SECRETS_DIR, "secrets": dict(sorted(vault_names.items()))}, indent=2, sort_keys=True) + "\n"
    )


def standin_fact(secrets: tuple[str, ...], host: str) -> str:
    return settings_json({s: f"{vault_key(host, s)}-{DIGEST_STANDIN}" for s in secrets})


def secret_file(secret: str) -> str:
    return f"{SECRETS_DIR}/{secret}"


def from_config(cfg: AlertingConfig | None) -> Alerting:
    if cfg is None:
        return UNCONFIGURED
    receivers = []
    for name, r in cfg.receivers.items():
        found: list[Integration] = []
        for w in r.webhook:
            found.append(
                Integration(
                    "webhook",
                    (("url", w.url), ("send_resolved", w.send_resolved)),
                    ("http_config.authorization.credentials_file", w.bearer_token_secret)
                    if w.bearer_token_secret
                    else None,
                )
            )
        for e in r.email:
            settings: tuple[tuple[str, Any], ...] = (
                ("to", ", ".join(e.to)),
                ("from", e.sender),
                ("smarthost", e.smarthost),
                ("require_tls", True),
                ("send_resolved", True),
            )
            if e.username:
                settings += (("auth_username", e.username),)
            found.append(
                Integration("email", settings, ("auth_password_file", e.password_secret) if e.password_secret else None)
            )
        for t in r.msteams:
            found.append(
                Integration(
                    "msteams", (("send_resolved", t.send_resolved),), ("webhook_url_file", t.webhook_url_secret)
                )
            )
        for p in r.pagerduty:
            found.append(
                Integration("pagerduty", (("send_resolved", True),), ("routing_key_file", p.routing_key_secret))
            )
        receivers.append(Receiver(name, tuple(found)))
    return Alerting(
        receivers=tuple(receivers),
        routes=tuple((s, tuple(cfg.routes[s])) for s in SEVERITIES if s in cfg.routes),
        group_wait=cfg.group_wait,
        group_interval=cfg.group_interval,
        repeat_interval=cfg.repeat_interval,
        runbook_base_url=cfg.runbook_base_url,
    )


def _integration(i: Integration) -> dict[str, Any]:
    out: dict[str, Any] = dict(i.settings)
    if i.secret:
        path, secret = i.secret
        *parents, leaf = path.split(".")
        at = out
        for p in parents:
            at = at.setdefault(p, {})
        at[leaf] = secret_file(secret)
    return out


_KEYS: dict[Kind, str] = {
    "webhook": "webhook_configs",
    "email": "email_configs",
    "msteams": TEAMS_KEY,
    "pagerduty": "pagerduty_configs",
}


def _receiver(r: Receiver) -> dict[str, Any]:
    out: dict[str, Any] = {"name": r.name}
    for i in r.integrations:
        out.setdefault(_KEYS[i.kind], []).append(_integration(i))
    return out


def _quote(values: tuple[str, ...]) -> str:
    return "|".join(values)


INHIBITIONS: tuple[dict[str, Any], ...] = (
    # One broken InfiniBand island: its nodes' own alerts add nothing to the island's page.
    {
        "source_matchers": [f'alertname="{ISLAND_ALERT}"'],
        "target_matchers": [f'alertname=~"{_quote(NODE_ALERTS)}"'],
        "equal": ["cluster", ISLAND_LABEL],
    },
)


def routes(alerting: Alerting) -> list[dict[str, Any]]:
    """One route per (severity, receiver), in order; all but a severity's last continue to the next."""
    out: list[dict[str, Any]] = []
    routed = {s for s, _ in alerting.routes}
    for severity, names in alerting.routes:
        for n, name in enumerate(names):
            route: dict[str, Any] = {"matchers": [f'severity="{severity}"'], "receiver": name}
            if n < len(names) - 1:
                route["continue"] = True
            out.append(route)
    for severity in SEVERITIES:
        if severity not in routed:
            out.append({"matchers": [f'severity="{severity}"'], "receiver": NULL_RECEIVER})
    return out


def config(alerting: Alerting) -> dict[str, Any]:
    """alertmanager.yml as data."""
    default = dict(alerting.routes).get("warning", (NULL_RECEIVER,))[0]
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            # An alert with no known severity still reaches the warning receivers (never dropped).
            "receiver": default,
            "group_by": list(GROUP_BY),
            "group_wait": alerting.group_wait,
            "group_interval": alerting.group_interval,
            "repeat_interval": alerting.repeat_interval,
            "routes": routes(alerting),
        },
        "inhibit_rules": [dict(rule) for rule in INHIBITIONS],
        "receivers": [{"name": NULL_RECEIVER}, *(_receiver(r) for r in alerting.receivers)],
    }


def render_config(alerting: Alerting, cluster: str) -> str:
    head = (
        f"# Alertmanager of cluster {cluster}: routes by severity, the island inhibition, receivers from the\n"
        "# stack's alerting section. Secrets are files under " + SECRETS_DIR + " (docs/oncall.md).\n"
    )
    return head + yaml.safe_dump(config(alerting), sort_keys=False, width=200)


def runbook_url(alerting: Alerting, anchor: str) -> str:
    return f"{alerting.runbook_base_url}docs/oncall.md#{anchor}"
