"""A PR comment and code-scanning results a reviewer can act on (issue 20, item 7), from the commands.

Before issue 20: a new 300-node pool showed "0 nodes" and 40 Secret rows, its scale sets cut off under
"30 more", with no quota line; SARIF results pointed at line 1 of the stack file (nothing inline on the pull
request) and their fingerprints hashed the message, so a changed count made a new finding.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agk.cli import app

ROOT = Path(__file__).resolve().parents[2]
NEW_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB new@example"


def agk(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


def _stacks(where: Path, edit: Any) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(path, where / path.name)
    path = where / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    edit(doc["config"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return where


def _add_h200(config: dict[str, Any]) -> None:
    """A new pool of 300 H200 nodes in dev."""
    config["azure-gpu-k8s:cluster"]["gpu_pools"]["h200"] = {
        "vm_size": "Standard_ND96isr_H200_v5",
        "nodes": 300,
        "pod_ips": 1,
        "surge": 1,
        "infiniband": True,
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base")
    code, _ = agk("plan", "--stack", "dev", "--out", str(out))
    assert code == 0
    return out


def test_a_new_pool_leads_with_its_nodes_scale_sets_and_quota(base: Path, tmp_path: Path) -> None:
    stacks = _stacks(tmp_path / "stacks", _add_h200)
    code, out = agk("plan", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks), "--format", "markdown")
    assert code == 0
    lines = out.splitlines()
    assert "- 300 nodes (2,400 GPUs) created in 4 scale sets" in lines
    # 300 H200 VMs of 96 vCPUs (the control plane grows a size too: 315 nodes at peak cross its sizing step).
    (quota,) = [x for x in lines if x.startswith("- vCPU quota delta (regional, per VM family): ")]
    assert "standardNDISRH200V5Family +28,800" in quota
    rows = [x for x in lines if x.startswith("| ") and not x.startswith("| action")]
    # Every scale set first, every Secret and role assignment after them.
    assert [r.split("|")[2].strip() for r in rows[:4]] == ["`VirtualMachineScaleSet`"] * 4
    last_set = max(i for i, r in enumerate(rows) if "`VirtualMachineScaleSet`" in r)
    first_secret = min(i for i, r in enumerate(rows) if "`Secret`" in r or "`RoleAssignment`" in r)
    assert last_set < first_secret


def _sarif(base: Path, stacks: Path) -> dict[str, Any]:
    code, out = agk("review", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks), "--format", "sarif")
    assert code == 1
    (run,) = json.loads(out)["runs"]
    return dict(run)


def test_sarif_points_at_the_key_that_caused_each_finding(base: Path, tmp_path: Path) -> None:
    def rotate(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:admin"]["ssh_public_keys"] = [NEW_KEY]

    stacks = _stacks(tmp_path / "stacks", rotate)
    run = _sarif(base, stacks)
    text = (stacks / "Pulumi.dev.yaml").read_text().splitlines()
    refused = [r for r in run["results"] if r["ruleId"] == "no-change-azure-refuses"]
    assert len(refused) == 8
    for result in refused:
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == str(stacks / "Pulumi.dev.yaml")
        line = text[location["region"]["startLine"] - 1]
        assert line.strip() == "ssh_public_keys:", line
        assert result["properties"]["configKey"] == "azure-gpu-k8s:admin.ssh_public_keys"
    # One finding, one fingerprint.
    assert len({r["partialFingerprints"]["agkViolation/v1"] for r in run["results"]}) == len(run["results"])


def test_a_findings_fingerprint_survives_a_changed_count(base: Path, tmp_path: Path) -> None:
    def shrink(nodes: int) -> Any:
        return lambda c: c["azure-gpu-k8s:cluster"]["gpu_pools"]["h100"].__setitem__("nodes", nodes)

    def finding(stacks: Path) -> dict[str, Any]:
        code, out = agk(
            "review", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks), "--format", "sarif"
        )
        assert code == 0
        (result,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "pool-shrink-below-running"]
        return dict(result)

    one, two = finding(_stacks(tmp_path / "a", shrink(3))), finding(_stacks(tmp_path / "b", shrink(2)))
    assert one["message"]["text"] != two["message"]["text"]
    assert one["partialFingerprints"] == two["partialFingerprints"]
    line = (
        (tmp_path / "a" / "Pulumi.dev.yaml")
        .read_text()
        .splitlines()[one["locations"][0]["physicalLocation"]["region"]["startLine"] - 1]
    )
    assert line.strip() == "h100:"


def _price(size: str, price: float, **extra: str) -> dict[str, Any]:
    """One item as Azure's Retail Prices API answers (learn.microsoft.com/rest/api/cost-management/retail-prices)."""
    return {
        "currencyCode": "USD",
        "retailPrice": price,
        "unitPrice": price,
        "armRegionName": "eastus2",
        "armSkuName": size,
        "serviceName": "Virtual Machines",
        "productName": "Virtual Machines NDisrH200v5 Series",
        "skuName": size.removeprefix("Standard_").replace("_", " "),
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        **extra,
    }


def test_the_cost_line_prices_a_new_pool_at_linux_pay_as_you_go(base: Path, tmp_path: Path) -> None:
    stacks = _stacks(tmp_path / "stacks", _add_h200)
    h200 = "Standard_ND96isr_H200_v5"
    # Test figures, not Azure's: the API lists Windows, Spot, Low Priority and dev/test meters and other
    # regions beside the one price that counts, on two pages.
    pages = [
        {"Items": [_price(h200, 90.0, productName="Virtual Machines NDisrH200v5 Series Windows")]},
        {
            "Items": [
                _price(h200, 80.0),
                _price(h200, 20.0, skuName="ND96isr H200 v5 Spot"),
                _price(h200, 30.0, skuName="ND96isr H200 v5 Low Priority"),
                _price(h200, 70.0, type="DevTestConsumption"),
                _price(h200, 60.0, armRegionName="westus3"),
                {"serviceName": "Storage", "type": "Consumption", "unitOfMeasure": "1 GB/Month"},
            ]
        },
    ]
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(pages))
    code, out = agk(
        "plan", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks), "--format", "markdown",
        "--prices", str(prices),
    )  # fmt: skip
    assert code == 0
    (cost,) = [x for x in out.splitlines() if x.startswith("- Cost delta")]
    # 300 VMs at 80.00 an hour; the control plane's larger sizes are not in the file, and say so.
    assert cost.startswith(
        "- Cost delta (Linux pay-as-you-go list price, per VM family): standardNDISRH200V5Family +$24,000.00/h;"
        " total +$24,000.00/h, +$17,520,000/month"
    ), cost
    assert "not priced: " in cost and f"(not in --prices {prices})" in cost, cost
    code, out = agk("plan", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks), "--format", "json")
    doc = json.loads(out)
    assert {"region": "eastus2", "vm_size": h200, "vms": 300} in doc["vm_delta"]


def test_without_prices_the_cost_line_says_how_to_get_them(base: Path) -> None:
    code, out = agk("plan", "--stack", "dev", "--base", str(base), "--format", "markdown")
    assert code == 0
    assert "- Cost delta: not priced (agk plan --prices FILE with the Azure Retail Prices API's answer;" in out


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{", "not JSON (line 1): save the API's answer unchanged"),
        (
            '{"items": []}',
            "not an Azure Retail Prices API answer (no 'Items' list): save the JSON that"
            " https://prices.azure.com/api/retail/prices returns, or a list of such answers",
        ),
        (
            json.dumps({"Items": [_price("Standard_D8ds_v5", -1.0)]}),
            "Items[0] retailPrice -1.0 is not a price: save the API's JSON unchanged",
        ),
    ],
)
def test_a_bad_prices_file_is_one_line_and_exit_2(base: Path, tmp_path: Path, content: str, says: str) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(content)
    result = CliRunner().invoke(app, ["plan", "--stack", "dev", "--base", str(base), "--prices", str(prices)])
    assert result.exit_code == 2
    assert result.output == f"error: --prices {prices}: {says}\n"


def test_prices_without_a_base_is_refused(tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text('{"Items": []}')
    result = CliRunner().invoke(app, ["plan", "--stack", "dev", "--prices", str(prices)])
    assert result.exit_code == 2
    assert result.output == f"error: --prices {prices}: prices a change, and no --base is given: add --base\n"
