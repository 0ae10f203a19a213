"""Where alerts go, as data: bad alerting config is one clear line, every shipped rule has a severity that
a route takes and a runbook in docs/oncall.md, the prometheus.yml alerting block, the re-test sweep."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from modules.bootstrap import alerting
from modules.bootstrap.alerting_config import SEVERITIES
from modules.bootstrap.context import ALERTMANAGER_PORT, BootstrapContext
from modules.bootstrap.monitoring import ALERTS, BACKUP_ALERTS, runbook_anchor
from modules.bootstrap.roles import bundle, names
from modules.bootstrap.roles.prometheus import alert_rules, prometheus_config
from modules.errors import ConfigError
from modules.stackplan.config import parse_config

from .conftest import ROOT, STACKS

P = "azure-gpu-k8s"
ONCALL = ROOT / "docs/oncall.md"


def _dev(alerting_section: Any = None, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())["config"]
    if alerting_section is not None:
        raw[f"{P}:alerting"] = alerting_section
    for key, value in changes.items():
        section, _, rest = key.partition(".")
        target = raw.setdefault(f"{P}:{section}", {})
        *path, leaf = rest.split(".")
        for part in path:
            target = target.setdefault(part, {})
        target[leaf] = value
    return raw


TEAMS = {"teams": {"msteams": [{"webhook_url_secret": "teams-alerts"}]}}
ROUTES = {"critical": ["teams"], "warning": ["teams"]}

CASES = [
    (
        "a route to a receiver that is not there",
        _dev({"receivers": TEAMS, "routes": {"critical": ["pager"], "warning": ["teams"]}}),
        f"{P}:alerting: routes.critical: no receiver 'pager': use one of teams",
    ),
    (
        "no critical route",
        _dev({"receivers": TEAMS, "routes": {"warning": ["teams"]}}),
        f"{P}:alerting: routes.critical is missing: every critical alert must reach someone; add it",
    ),
    (
        "the routing key itself instead of its secret's name",
        _dev({"receivers": {"p": {"pagerduty": [{"routing_key_secret": "R0ut1ngK3y+/=="}]}}, "routes": ROUTES}),
        f"{P}:alerting.receivers.p.pagerduty[0].routing_key_secret: routing_key_secret 'R0ut1ngK3y+/==' is not a "
        "Key Vault secret name: use up to 60 letters, digits and '-' (the name, never the secret itself)",
    ),
    (
        "a receiver that reaches nobody",
        _dev({"receivers": {"teams": {}}, "routes": ROUTES}),
        f"{P}:alerting.receivers.teams: a receiver with no integration reaches nobody: add webhook, email, "
        "msteams or pagerduty",
    ),
    (
        "an SMTP login without its password",
        _dev(
            {
                "receivers": {
                    "teams": {
                        "email": [
                            {
                                "to": ["oncall@example.com"],
                                "sender": "am@example.com",
                                "smarthost": "smtp.example.com:587",
                                "username": "am",
                            }
                        ]
                    }
                },
                "routes": ROUTES,
            }
        ),
        f"{P}:alerting.receivers.teams.email[0]: username and password_secret go together: give both for SMTP "
        "AUTH, or neither",
    ),
    (
        "a webhook that is not a URL",
        _dev({"receivers": {"teams": {"webhook": [{"url": "tickets.example.com"}]}}, "routes": ROUTES}),
        f"{P}:alerting.receivers.teams.webhook[0].url: url 'tickets.example.com' is not an http(s) URL: use e.g. "
        "https://tickets.example.com/alertmanager",
    ),
    (
        "a re-test interval no cron schedule keeps",
        _dev(**{"addons.preflight.retest_every_minutes": 7}),
        f"{P}:addons.preflight.retest_every_minutes: retest_every_minutes 7 cannot be kept by a cron schedule: use "
        "one of 10, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440 (a divisor of 60, or whole hours that "
        "divide 24)",
    ),
    (
        "the old per-run count",
        _dev(**{"addons.preflight.retest_max_nodes": 2}),
        f"{P}:addons.preflight.retest_max_nodes: no longer set by hand: set retest_period_days; each run takes "
        "ceil(GPU nodes / runs in the period) nodes",
    ),
]


@pytest.mark.parametrize(("raw", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_alerting_config_is_one_clear_line(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == message


def test_a_hub_stack_has_no_alerting() -> None:
    raw = yaml.safe_load((STACKS / "Pulumi.hub.yaml").read_text())["config"]
    raw[f"{P}:alerting"] = {"receivers": TEAMS, "routes": ROUTES}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == "a hub stack has no 'alerting' section: alerts are a cluster stack's"


def _rules(ctx: BootstrapContext) -> dict[str, dict[str, Any]]:
    out = {}
    for text in alert_rules(ctx).values():
        for group in yaml.safe_load(text)["groups"]:
            out |= {r["alert"]: r for r in group["rules"] if "alert" in r}
    return out


def _anchors() -> set[str]:
    """GitHub's anchors of docs/oncall.md's headings (lowercase, spaces to '-', punctuation dropped)."""
    heads = re.findall(r"^#+ (.+)$", ONCALL.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in heads}


def test_every_shipped_rule_has_a_severity_and_a_runbook_in_this_repository(ctx: BootstrapContext) -> None:
    rules = _rules(ctx)
    table = {**ALERTS, **(BACKUP_ALERTS if ctx.etcd.backup else {})}
    assert set(rules) == set(table)
    anchors = _anchors()
    for name, rule in rules.items():
        assert rule["labels"]["severity"] == table[name].severity in SEVERITIES, name
        url = rule["annotations"]["runbook_url"]
        assert url == f"docs/oncall.md#{runbook_anchor(name)}", name
        assert runbook_anchor(name) in anchors, f"{name}: docs/oncall.md has no heading '{name}'"


def test_every_severity_the_rules_use_reaches_a_receiver_in_the_shipped_stacks(ctx: BootstrapContext) -> None:
    """Walk the rendered route tree as Alertmanager does (first match, then `continue`)."""
    node = bundle(ctx, "prometheus", names(ctx, "prometheus")[0])
    doc = yaml.safe_load(node.file("alertmanager/alertmanager.yml").content)
    notify = {r["name"] for r in doc["receivers"] if len(r) > 1}
    for severity in {r["labels"]["severity"] for r in _rules(ctx).values()}:
        reached = []
        for route in doc["route"]["routes"]:
            if route["matchers"] == [f'severity="{severity}"']:
                reached.append(route["receiver"])
                if not route.get("continue"):
                    break
        assert reached and set(reached) <= notify, (severity, reached)
    assert doc["route"]["receiver"] in notify  # an alert with no known severity is not dropped


def test_a_runbook_base_url_prefixes_every_link(dev: BootstrapContext) -> None:
    from dataclasses import replace

    base = "https://github.com/example/azure-gpu-k8s/blob/main/"
    ctx = replace(dev, alerting=replace(dev.alerting, runbook_base_url=base))
    urls = {r["annotations"]["runbook_url"] for r in _rules(ctx).values()}
    assert all(u.startswith(base + "docs/oncall.md#") for u in urls)


def test_prometheus_sends_to_every_alertmanager_without_its_replica_label(prod: BootstrapContext) -> None:
    hosts = prod.prometheus.hosts
    for host in hosts:
        config = yaml.safe_load(prometheus_config(prod, host))
        block = config["alerting"]
        assert block["alert_relabel_configs"] == [{"action": "labeldrop", "regex": "replica"}]
        (ams,) = block["alertmanagers"]
        assert ams["static_configs"] == [{"targets": [f"{h.ip}:{ALERTMANAGER_PORT}" for h in hosts]}]
        assert config["global"]["external_labels"]["replica"] == host.name


def test_the_hosts_gossip_and_a_single_host_does_not(dev: BootstrapContext, prod: BootstrapContext) -> None:
    a, *others = prod.prometheus.hosts
    unit = bundle(prod, "prometheus", a.name).file("systemd/alertmanager.service").content
    assert all(f"--cluster.peer={b.ip}:9094" in unit for b in others) and f"--cluster.peer={a.ip}" not in unit
    assert f"--cluster.listen-address={a.ip}:9094" in unit
    (only,) = dev.prometheus.hosts
    unit = bundle(dev, "prometheus", only.name).file("systemd/alertmanager.service").content
    assert "--cluster.listen-address= " in unit and "--cluster.peer" not in unit


def test_secrets_are_files_named_after_their_vault_secret(prod: BootstrapContext) -> None:
    text = bundle(prod, "prometheus", names(prod, "prometheus")[0]).file("alertmanager/alertmanager.yml").content
    doc = yaml.safe_load(text)
    by_name = {r["name"]: r for r in doc["receivers"]}
    assert by_name["platform-pager"]["pagerduty_configs"] == [
        {"send_resolved": True, "routing_key_file": "/etc/alertmanager/secrets/pagerduty-platform"}
    ]
    assert by_name["platform-teams"]["msteamsv2_configs"] == [
        {"send_resolved": True, "webhook_url_file": "/etc/alertmanager/secrets/teams-platform-alerts"}
    ]
    assert prod.alerting.secrets == ("pagerduty-platform", "teams-platform-alerts")


def test_a_stack_without_alerting_notifies_nobody_and_says_so() -> None:
    text = alerting.render_config(alerting.UNCONFIGURED, "x")
    doc = yaml.safe_load(text)
    assert doc["receivers"] == [{"name": "null"}]
    assert doc["route"]["receiver"] == "null"
