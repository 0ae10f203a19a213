"""The cluster program's `prerequisites` output reaches text, plan.md and JSON as "Before `pulumi up`"."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from agk.cli import app


def agk(*args: str) -> str:
    result = CliRunner().invoke(app, ["plan", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def dev_json() -> dict[str, object]:
    body = json.loads(agk("--stack", "dev", "--format", "json"))
    assert isinstance(body, dict)
    return body


def test_json_carries_the_output(dev_json: dict[str, object]) -> None:
    outputs = dev_json["outputs"]
    assert isinstance(outputs, dict)
    raw = outputs["prerequisites"]
    assert dev_json["prerequisites"] == {
        "features": raw["features"],
        "quotas": raw["quotas"],
        "steps": raw["steps"],
        "regional": [{"vcpus": raw["regional_vcpus"], "declared": None}],
        "public_ips": [raw["public_ips"]],
        "permissions": raw["permissions"],
    }
    # Every NAT gateway's prefix is Standard public IPs of the region.
    assert raw["public_ips"]["count"] == sum(g["public_ips"] for g in outputs["egress"])
    # Role assignments and the custom role need more than Contributor; the hub's half needs the hub's group.
    assert [(p["role"], p["scope"]) for p in raw["permissions"]] == [
        ("Contributor", "subscription (or resource group agk-dev, created beforehand)"),
        ("User Access Administrator", "subscription (or resource group agk-dev, created beforehand)"),
        ("Network Contributor", "resource group agk-hub"),
        ("Private DNS Zone Contributor", "resource group agk-hub"),
    ]
    (feature,) = outputs["prerequisites"]["features"]
    assert (feature["namespace"], feature["name"]) == ("Microsoft.Compute", "EncryptionAtHost")


def test_text_and_markdown_show_what_azure_must_grant_first(dev_json: dict[str, object]) -> None:
    outputs = dev_json["outputs"]
    assert isinstance(outputs, dict)
    (feature,) = outputs["prerequisites"]["features"]
    text = agk("--stack", "dev").splitlines()
    start = text.index("Before `pulumi up`:")
    assert text[start + 1] == (
        f"  register feature Microsoft.Compute/EncryptionAtHost: {feature['command']}  ({feature['why']})"
    )
    quotas = [line for line in text[start + 2 :] if line.startswith("  regional vCPU quota ")]
    assert len(quotas) == len(outputs["prerequisites"]["quotas"]) + 1  # and Total Regional vCPUs
    total = outputs["prerequisites"]["regional_vcpus"]
    assert quotas[-1] == f"  regional vCPU quota Total Regional vCPUs: {total:,} vCPUs; not declared yet"
    assert "  regional vCPU quota standardNDSH100v5Family: 480 vCPUs (Standard_ND96isr_H100_v5); not declared yet" in [
        q.split("  (")[0] for q in quotas
    ]
    markdown = agk("--stack", "dev", "--format", "markdown")
    assert "#### Before `pulumi up`\n\n- register the feature `Microsoft.Compute/EncryptionAtHost`:" in markdown


def test_a_stack_without_the_output_has_no_section() -> None:
    assert "Before `pulumi up`" not in agk("--stack", "dev-addons")
    assert "prerequisites" not in json.loads(agk("--stack", "dev-addons", "--format", "json"))
