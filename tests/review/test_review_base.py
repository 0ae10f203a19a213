"""`agk plan --base` and `agk review --base` end to end: formats, exit status, allowances, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agk.cli import app
from modules.bootstrap.delivery import PARTS
from policies.changes import CHANGE_POLICIES
from policies.pack import POLICIES

ALL = len(POLICIES) + len(CHANGE_POLICIES)
"""Resource policies plus the change policies that run with --base."""

ROOT = Path(__file__).resolve().parents[2]
HINT = "give a folder written by 'agk plan --out' or a 'pulumi stack export' file"


def agk(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _stacks(where: Path, rename: bool = False, changes: dict[str, Any] | None = None) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(path, where / path.name)
    path = where / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    if rename:
        pools = doc["config"]["azure-gpu-k8s:cluster"]["gpu_pools"]
        pools["h100x"] = pools.pop("h100")
    if changes is not None:
        doc["config"]["azure-gpu-k8s:changes"] = changes
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return where


APISERVERS = 3
PER_POOL = 13 - 3 + 2 * PARTS + 2 + APISERVERS
"""A renamed pool's resources, deleted and created: 13 less the 3 of the bootstrap certificate it no longer
has, its bundle's PARTS secrets with a read grant each, and its bootstrap token secret with the pool's
read grant and a write grant per API server."""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("base")
    code, _, err = agk("plan", "--stack", "dev", "--out", str(out))
    assert code == 0, err
    return out


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _stacks(tmp_path_factory.mktemp("renamed"), rename=True)


def test_plan_json_lists_changes_and_the_blast_radius(base: Path, renamed: Path) -> None:
    code, out, err = agk(
        "plan", "--stack", "dev", "--base", str(base), "--stacks-dir", str(renamed), "--format", "json"
    )
    assert (code, err) == (0, "")
    body = json.loads(out)
    assert body["base"] == str(base / "dev" / "state.json")
    # The API servers' bundles name the pools' token secrets: each of their PARTS secrets is updated.
    assert body["change_counts"] == {
        "create": PER_POOL,
        "update": APISERVERS * PARTS,
        "replace": 0,
        "delete": PER_POOL,
    }
    for change in body["changes"]:
        assert {"urn", "type", "action", "keys"} <= set(change)
    scale_set = next(c for c in body["changes"] if c["type"] == "azure-native:compute:VirtualMachineScaleSet")
    assert scale_set == {
        "urn": "urn:pulumi:dev::azure-gpu-k8s::agk:compute:NodePool$azure-native:compute:VirtualMachineScaleSet::h100-00",
        "type": "azure-native:compute:VirtualMachineScaleSet",
        "action": "delete",
        "keys": [],
        "paths": [],
        "refused": [],
    }
    radius = body["blast_radius"]
    assert {k: radius[k] for k in ("nodes", "gpus", "etcd_members", "subnets_moved")} == {
        "nodes": 4,
        "gpus": 32,
        "etcd_members": 0,
        "subnets_moved": [],
    }
    assert body["review"] == (
        f"FAIL: 1 mandatory and 1 advisory violations of {ALL} policies (details: agk review --stack dev --base BASE)"
    )


def test_plan_md_leads_with_the_blast_radius(base: Path, renamed: Path, tmp_path: Path) -> None:
    code, _, err = agk(
        "plan", "--stack", "dev", "--base", str(base), "--stacks-dir", str(renamed), "--out", str(tmp_path / "o")
    )
    assert (code, err) == (0, "")
    lines = (tmp_path / "o" / "dev" / "plan.md").read_text().splitlines()
    assert lines[:11] == [
        "### `agk plan` · stack `dev`",
        "",
        "#### Blast radius",
        "",
        "- 4 nodes (32 GPUs) in 1 scale set replaced or deleted",
        "- VMs removed: h100-00: all 4 VMs, the set is deleted; drain them first (docs/day2.md)",
        "- 4 nodes (32 GPUs) created in 1 scale set",
        "- 0 etcd members lost",
        "- 0 subnets in use moved",
        "- 1 subnet in use removed: gpu-h100 10.16.1.0/24 -> gone (155 IP configurations, 4 machines)",
        "- API endpoint: unaffected",
    ]
    assert (
        f"#### Changes against `{base / 'dev' / 'state.json'}`: {PER_POOL} to create, {APISERVERS * PARTS} to update, "
        f"{PER_POOL} to delete"
    ) in lines
    assert "| delete | `VirtualMachineScaleSet` | `h100-00` |  |" in lines


def test_review_with_base_fails_on_a_stateful_deletion(base: Path, renamed: Path) -> None:
    code, out, err = agk(
        "review", "--stack", "dev", "--base", str(base), "--stacks-dir", str(renamed), "--format", "json"
    )
    assert (code, err) == (1, "")
    body = json.loads(out)
    assert body["policies_run"] == ALL
    assert {(v["policy"], v["enforcement"]) for v in body["violations"]} == {
        ("no-stateful-replacement", "mandatory"),
        ("pool-shrink-below-running", "advisory"),
    }


def test_review_without_changes_passes_with_every_policy(base: Path) -> None:
    code, out, _ = agk("review", "--stack", "dev", "--base", str(base))
    assert code == 0
    assert out.splitlines()[0] == f"agk review: dev: {ALL} policies, 0 mandatory and 0 advisory violation(s)"


def test_sarif_carries_the_change_rules(base: Path, renamed: Path) -> None:
    code, out, _ = agk(
        "review", "--stack", "dev", "--base", str(base), "--stacks-dir", str(renamed), "--format", "sarif"
    )
    assert code == 1
    (run,) = json.loads(out)["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [p.name for p in [*POLICIES, *CHANGE_POLICIES]]
    result = next(r for r in run["results"] if r["ruleId"] == "no-stateful-replacement")
    assert rules[result["ruleIndex"]]["id"] == "no-stateful-replacement"
    assert result["level"] == "error"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == str(renamed / "Pulumi.dev.yaml")


def test_file_review_against_a_base_reads_the_allowance(base: Path, renamed: Path, tmp_path: Path) -> None:
    code, _, _ = agk("plan", "--stack", "dev", "--stacks-dir", str(renamed), "--out", str(tmp_path / "head"))
    assert code == 0
    allowing = _stacks(
        tmp_path / "stacks",
        rename=True,
        changes={"allow": [{"name": "dev-gpu-h100", "action": "delete", "reason": "OPS-42 rename the pool"}]},
    )
    head = tmp_path / "head" / "dev" / "state.json"
    code, out, err = agk(
        "review", "--file", str(head), "--base", str(base / "dev" / "state.json"), "--stacks-dir", str(allowing)
    )
    assert (code, err) == (0, "")
    assert "ADVISORY  pool-shrink-below-running" in out
    assert "no-stateful-replacement" not in out


@pytest.mark.parametrize("command", ["plan", "review"])
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (None, "error: --base {path}: no such file or directory: " + HINT),
        (
            "{nope",
            "error: --base {path}: not JSON (line 1: Expecting property name enclosed in double quotes): " + HINT,
        ),
        ('{"version": 3}', "error: --base {path}: no 'deployment' key: give the output of `pulumi stack export`"),
        (
            "folder",
            "error: --base {path}: no {path}/dev/state.json: plan the base with"
            " 'agk plan --stack dev --out {path}' (stacks there: none)",
        ),
    ],
)
def test_bad_base_is_one_line_exit_2(tmp_path: Path, command: str, make: str | None, message: str) -> None:
    path = tmp_path / "base"
    if make == "folder":
        path.mkdir()
    elif make is not None:
        path.write_text(make)
    code, out, err = agk(command, "--stack", "dev", "--base", str(path))
    assert (code, out) == (2, "")
    assert err == message.format(path=path) + "\n"


def test_one_export_is_not_a_base_for_all(base: Path) -> None:
    code, out, err = agk("plan", "--all", "--base", str(base / "dev" / "state.json"))
    assert (code, out) == (2, "")
    assert (
        err
        == f"error: --base {base / 'dev' / 'state.json'}: one stack's export (dev): give --stack dev, or a folder for --all\n"
    )


def test_bad_allowance_is_one_line_exit_2(base: Path, tmp_path: Path) -> None:
    stacks = _stacks(tmp_path, changes={"allow": [{"name": "dev-etcd-0", "action": "nuke", "reason": "x"}]})
    code, out, err = agk("review", "--stack", "dev", "--base", str(base), "--stacks-dir", str(stacks))
    assert (code, out) == (2, "")
    assert err == (
        "error: dev: azure-gpu-k8s:changes.allow[0].action: 'nuke' is not allowed: use 'replace', 'delete', 'move' or 'add'\n"
    )


def test_all_against_a_folder_without_a_stack_treats_it_as_new(base: Path) -> None:
    # base holds dev only: with --all every other stack is new (all creates), not an error.
    code, out, err = agk("plan", "--all", "--base", str(base), "--format", "json")
    assert (code, err) == (0, "")
    stacks = {s["stack"]: s for s in json.loads(out)["stacks"]}
    assert stacks["dev"]["new_stack"] is False and stacks["dev"]["changes"] == []
    hub = stacks["hub"]
    assert hub["new_stack"] is True
    assert {c["action"] for c in hub["changes"]} == {"create"}
    assert hub["change_counts"]["create"] == hub["resources"] - 1  # all but the stack itself
