"""Host tier: a Prometheus host copies its Alertmanager receivers' secrets from Key Vault into the files
alertmanager.yml names, with the host's rendered settings (prod-7500's receivers), a stand-in Key Vault
and IMDS on loopback (tests/bootstrap/host/fakes.py; Azure cannot be reached)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modules.bootstrap import alerting, delivery
from modules.bootstrap.host import alert_secrets, boot
from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.prometheus import ALERT_SECRETS_CONFIG
from tests.bootstrap.conftest import context
from tests.bootstrap.host.fakes import FakeVault, azure

HOST = "prod-7500-prometheus-0"
CLIENT = "12121212-3434-5656-7878-909090909090"
OTHER = "abababab-cdcd-efef-0101-232323232323"


def _setup(tmp_path: Path, vault_url: str) -> tuple[Path, Path, dict[str, str]]:
    ctx = context("prod-7500")
    node = bundle(ctx, "prometheus", HOST)
    facts = delivery.placeholder_facts(ctx, node)
    settings = alert_secrets.Settings.from_json(facts[alerting.ALERT_FACT])
    config = tmp_path / "alert-secrets.json"
    config.write_text(settings.to_json())
    host = tmp_path / "host.json"
    host.write_text(boot.HostConfig("prometheus", HOST, "prod-7500", vault_url, "x", CLIENT).to_json())
    # The files it fills are the ones alertmanager.yml reads.
    am = yaml.safe_load(node.file("alertmanager/alertmanager.yml").content)
    read = {
        c[k]
        for r in am["receivers"]
        for kind, cs in r.items()
        if kind != "name"
        for c in cs
        for k in c
        if k.endswith("_file")
    }
    ini = node.file("grafana/grafana.ini").content  # Grafana reads its admin password from the same place
    read |= {line.split("$__file{")[1].rstrip("}") for line in ini.splitlines() if "$__file{" in line}
    assert read == {f"{settings.dir}/{name}" for name in settings.secrets}
    assert [f.path for f in node.facts] == [ALERT_SECRETS_CONFIG]
    return config, host, dict(settings.secrets)


def test_set_secrets_are_copied_unset_ones_named_with_the_command_that_sets_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    vault = FakeVault()
    with azure(vault) as (vault_url, imds_url):
        config, host, secrets = _setup(tmp_path, vault_url)
        pager, teams = secrets["pagerduty-platform"], secrets["teams-platform-alerts"]
        # As the cluster stack creates them (the placeholder, this host may read), then the operator sets one.
        for secret in secrets.values():
            vault.put(secret, alert_secrets.PLACEHOLDER, CLIENT)
        vault.put(pager, "R0UTINGKEY0123456789abcdef012345", CLIENT)
        root = tmp_path / "root"
        args = ["--config", str(config), "--host-config", str(host), "--deadline", "5"]
        assert alert_secrets.main(args, imds_endpoint=imds_url, root=str(root)) == 0
        written = root / "etc/alertmanager/secrets/pagerduty-platform"
        assert written.read_text() == "R0UTINGKEY0123456789abcdef012345"
        assert written.stat().st_mode & 0o777 == 0o640
        assert not (root / "etc/alertmanager/secrets/teams-platform-alerts").exists()
        out = capsys.readouterr().out
        assert "R0UTINGKEY" not in out  # never the value in the journal
        assert (
            f"az keyvault secret set --vault-name 127 --name {teams} --value <the teams-platform-alerts value>" in out
        )
        assert "pagerduty-platform: written" in out and "teams-platform-alerts: not set" in out
        # The next run changes nothing; a rotated value is copied.
        assert alert_secrets.main(args, imds_endpoint=imds_url, root=str(root)) == 0
        assert "pagerduty-platform: unchanged" in capsys.readouterr().out
        vault.put(teams, "https://prod.westeurope.logic.azure.com/workflows/x/triggers/manual?sig=abc", CLIENT)
        assert alert_secrets.main(args, imds_endpoint=imds_url, root=str(root)) == 0
        assert (root / "etc/alertmanager/secrets/teams-platform-alerts").read_text().startswith("https://")


def test_a_secret_this_host_may_not_read_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vault = FakeVault()
    with azure(vault) as (vault_url, imds_url):
        config, host, secrets = _setup(tmp_path, vault_url)
        for secret in secrets.values():
            vault.put(secret, "value", OTHER)  # another host's grant only
        # Key Vault answers 403 while a new grant propagates, so the host retries until its deadline.
        args = ["--config", str(config), "--host-config", str(host), "--deadline", "2"]
        assert alert_secrets.main(args, imds_endpoint=imds_url, root=str(tmp_path / "root")) == 1
        assert "HTTP 403" in capsys.readouterr().err
