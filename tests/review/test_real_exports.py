"""`agk review --file` on real `pulumi stack export` files (pulumi-azure-native's recorded tests,
fixtures/real/README.md): every mandatory violation is a true one, and each is listed with why.

They are plain Azure stacks, not clusters of this project: what a policy of the pack demands of
any Azure resource applies (tags, TLS, public access, SSH keys, NSGs); what it demands of cluster
roles must stay silent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from agk.cli import app

REAL = Path(__file__).parent / "fixtures" / "real"

EXPECTED: dict[str, set[tuple[str, str, str]]] = {
    "upgrade-storage-blob": {
        # No owner/cost-center/cluster tags on taggable resources (the Blob and the container take none).
        ("required-tags", "mandatory", "rg"),
        ("required-tags", "mandatory", "store"),
        # Outputs: minimumTlsVersion TLS1_0 (the input is unset; Azure's default is TLS 1.0).
        ("storage-min-tls-1-2", "mandatory", "store"),
        # Inputs: allowBlobPublicAccess true, the container's publicAccess Blob.
        ("storage-no-public-blob-access", "mandatory", "store"),
        ("storage-no-public-blob-access", "mandatory", "blobContainer"),
    },
    "upgrade-networked-vm": {
        # The NIC's outputs: enableAcceleratedNetworking false.
        ("accelerated-networking", "mandatory", "networkInterface"),
        # No securityProfile.encryptionAtHost in the VM's inputs.
        ("encryption-at-host", "mandatory", "vm"),
        ("required-tags", "mandatory", "vm"),
        ("required-tags", "mandatory", "networkInterface"),
        ("required-tags", "mandatory", "publicIp"),
        ("required-tags", "mandatory", "vnet"),
        ("required-tags", "mandatory", "rg"),
        # osProfile.adminPassword set; outputs: disablePasswordAuthentication false.
        ("ssh-keys-only", "mandatory", "vm"),
        # The subnet has no networkSecurityGroup.
        ("subnet-has-nsg", "mandatory", "subnet"),
    },
    "upgrade-keyvault": {
        # Vault, Secret and Key all take tags (their Args have `tags`); none carries any.
        ("required-tags", "mandatory", "rg"),
        ("required-tags", "mandatory", "vault"),
        ("required-tags", "mandatory", "secret"),
        ("required-tags", "mandatory", "key"),
    },
}

FALSE_POSITIVES_BEFORE = {
    # Issue 13: tags demanded of a type that has none, and "accepts plain HTTP" for an account
    # whose export says enableHttpsTrafficOnly true.
    ("required-tags", "mandatory", "myBlobFile"),
    ("storage-https-only", "mandatory", "store"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_violation_on_a_real_export_is_true(name: str) -> None:
    result = CliRunner().invoke(app, ["review", "--file", str(REAL / f"{name}.stack.json"), "--format", "json"])
    assert result.exit_code == 1, result.output
    found = {
        (v["policy"], v["enforcement"], v["urn"].rsplit("::", 1)[-1]) for v in json.loads(result.stdout)["violations"]
    }
    assert found == EXPECTED[name]
    assert not found & FALSE_POSITIVES_BEFORE


def test_the_fixtures_are_the_recorded_files() -> None:
    # Copied unmodified: each still parses and keeps the engine's manifest and the provider's markers.
    for name in EXPECTED:
        data = json.loads((REAL / f"{name}.stack.json").read_text())
        assert data["version"] == 3 and data["deployment"]["manifest"]["version"].startswith("v3.13")
        assert all("created" in r for r in data["deployment"]["resources"])
