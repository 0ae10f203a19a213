"""The engine against a small program of its own: URNs, references, outputs, errors, files."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from agk.plan import wire
from agk.plan.engine import Planner, deployment
from agk.plan.stackconfig import runtime_config
from agk.plan_command import run
from modules.errors import AgkError, ConfigError

from .conftest import FIXTURE
from .graph_checks import check_graph

ARM = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups"


def test_all_plans_referenced_stacks_first(fixture_planner: Planner) -> None:
    plans = fixture_planner.plan_all()
    assert [p.stack for p in plans] == ["hub", "spoke", "spoke-addons"]
    assert plans[1].references == ["organization/gpu-fixture/hub"]
    assert plans[2].references == ["spoke"]


@pytest.mark.parametrize("stack", ["hub", "spoke", "spoke-addons"])
def test_graph_is_well_formed(fixture_planner: Planner, stack: str) -> None:
    check_graph(deployment(fixture_planner.plan(stack)), stack, "gpu-fixture")


def test_urns_carry_the_full_parent_type_chain(fixture_planner: Planner) -> None:
    urns = {r.urn for r in fixture_planner.plan("spoke").resources}
    assert (
        "urn:pulumi:spoke::gpu-fixture::agk:network:Network$azure-native:network:VirtualNetwork"
        "$azure-native:network:Subnet::spoke-gpu-a"
    ) in urns
    assert "urn:pulumi:spoke::gpu-fixture::azure-native:resources:ResourceGroup::rg" in urns
    assert "urn:pulumi:spoke::gpu-fixture::pulumi:providers:azure-native::default_3_29_0" in urns
    assert "urn:pulumi:spoke::gpu-fixture::pulumi:providers:pulumi::default" in urns


def test_outputs_are_arm_shaped(fixture_planner: Planner) -> None:
    plan = fixture_planner.plan("spoke")
    (subnet,) = [r for r in plan.by_type("azure-native:network:Subnet") if r.name == "spoke-gpu-a"]
    vnet_id = f"{ARM}/rg-spoke/providers/Microsoft.Network/virtualNetworks/vnet-spoke"
    assert subnet.id == f"{vnet_id}/subnets/gpu-a"
    assert subnet.outputs["name"] == "gpu-a" and subnet.outputs["type"] == "Microsoft.Network/virtualNetworks/subnets"
    (nsg,) = plan.by_type("azure-native:network:NetworkSecurityGroup")
    # azure-native auto-naming: the logical name plus 8 hex characters.
    assert nsg.outputs["name"].startswith("spoke-nsg") and len(nsg.outputs["name"]) == len("spoke-nsg") + 8
    (peering,) = plan.by_type("azure-native:network:VirtualNetworkPeering")
    hub_vnet = f"{ARM}/rg-hub/providers/Microsoft.Network/virtualNetworks/vnet-hub"
    assert wire.plain(peering.inputs["remoteVirtualNetwork"]) == {"id": hub_vnet}
    assert peering.id.startswith(f"{vnet_id}/virtualNetworkPeerings/spoke-to-hub")


def test_private_addresses_agree_with_the_subnets(fixture_planner: Planner) -> None:
    outputs = {k: wire.plain(v) for k, v in fixture_planner.plan("spoke").outputs.items()}
    assert outputs["apiserver_ip"] == "10.16.0.4"
    jump = ipaddress.ip_address(outputs["jump_ip"])
    assert jump in ipaddress.ip_network("10.16.0.0/24") and jump != ipaddress.ip_address("10.16.0.4")


def test_secrets_stay_secret_across_references(fixture_planner: Planner) -> None:
    plan = fixture_planner.plan("spoke")
    assert wire.is_secret(plan.outputs["hub_token"])
    (ref,) = plan.by_type("pulumi:pulumi:StackReference")
    assert ref.outputs["secretOutputNames"] == ["admin_token"]
    assert ref.external and ref.id == "organization/gpu-fixture/hub"
    state = deployment(plan)["deployment"]["resources"][0]
    assert state["outputs"]["hub_token"] == {wire.SIG: wire.SECRET_SIG, "plaintext": '"hub-token"'}


def test_component_outputs_and_dependencies(fixture_planner: Planner) -> None:
    plan = fixture_planner.plan("spoke")
    (component,) = plan.by_type("agk:network:Network")
    assert set(component.outputs) == {"vnet_id", "vnet_name"} and not component.custom
    (vmss,) = plan.by_type("azure-native:compute:VirtualMachineScaleSet")
    nic = next(r for r in plan.by_type("azure-native:network:NetworkInterface") if r.name == "apiserver-0")
    assert nic.urn in vmss.dependencies  # depends_on
    assert vmss.inputs["sku"] == {"capacity": 4, "name": "Standard_ND96isr_H100_v5"}  # ints stay ints


@pytest.mark.parametrize(
    ("stack", "message"),
    [
        ("broken", "broken: gpu-fixture:network.cidr '10.0.0.300/16' is not a CIDR: use e.g. 10.0.0.0/16"),
        ("run-error", "run-error: missing required configuration variable 'gpu-fixture:cidr'"),
        (
            "dangling",
            "dangling: stack reference 'nowhere': no such stack in "
            f"{FIXTURE / 'bad-stacks'}: use one of broken, cycle-a, cycle-b, dangling, run-error",
        ),
        ("cycle-a", "stack references form a cycle (cycle-a -> cycle-b -> cycle-a): a stack cannot depend on itself"),
        (
            "nope",
            f"unknown stack 'nope': no {FIXTURE / 'bad-stacks' / 'Pulumi.nope.yaml'}: "
            "use one of broken, cycle-a, cycle-b, dangling, run-error",
        ),
    ],
)
def test_bad_input_is_one_line(bad_planner: Planner, stack: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        bad_planner.plan(stack)
    assert str(err.value) == message


def test_runtime_config_form(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.s.yaml").write_text(
        "config:\n  p:obj: {b: 1, a: [true, x]}\n  p:n: 3\n  plain: text\n  p:key: {secure: v1:abc}\n"
    )
    config, secrets = runtime_config(tmp_path, "s", "p")
    assert config == {"p:obj": '{"a":[true,"x"],"b":1}', "p:n": "3", "p:plain": "text", "p:key": "[secret]"}
    assert secrets == ["p:key"]


def _run(tmp_path: Path, **kwargs: object) -> int:
    args: dict[str, object] = {"stack": None, "all_stacks": False, "fmt": "text", "out": None}
    args.update(kwargs)
    return run(stacks_dir=FIXTURE / "stacks", project_root=FIXTURE, **args)  # type: ignore[arg-type]


def test_out_writes_three_files_per_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, all_stacks=True, out=tmp_path / "plan") == 0
    for stack in ("hub", "spoke", "spoke-addons"):
        folder = tmp_path / "plan" / stack
        assert sorted(p.name for p in folder.iterdir()) == ["addresses.json", "plan.md", "state.json"]
        state = json.loads((folder / "state.json").read_text())
        check_graph(state, stack, "gpu-fixture")
        addresses = json.loads((folder / "addresses.json").read_text())
        assert addresses["stack"] == stack and addresses["vnets"][0]["subnets"]
    md = (tmp_path / "plan" / "spoke" / "plan.md").read_text()
    assert "```mermaid\nflowchart LR\n" in md and "<-->|peering|" in md and "nothing was deployed" in md
    assert 'subgraph v1["vnet-hub · hub · 10.0.0.0/22 (another stack)"]' in md
    assert "gpu-a<br/>10.16.4.0/22 · 1,019 usable" in md
    out = capsys.readouterr().out
    assert out.index("Stack hub") < out.index("Stack spoke ") < out.index("Stack spoke-addons")
    assert "nothing was deployed" in out


def test_json_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, stack="spoke", fmt="json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["stack"] == "spoke" and doc["deployed"] is False
    assert doc["outputs"]["hub_token"] == "[secret]"
    assert doc["topology"]["pools"][0] | {"subnet_ids": []} == {
        "name": "a",
        "role": "gpu-node",
        "vm_size": "Standard_ND96isr_H100_v5",
        "scale_sets": 1,
        "nodes": 4,
        "subnet_ids": [],
        "single_placement_group": True,
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "no stack chosen: pass --stack <name> (one of hub, spoke, spoke-addons) or --all"),
        ({"stack": "hub", "all_stacks": True}, "--stack and --all both given: use one of them"),
    ],
)
def test_choose_one(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(AgkError) as err:
        _run(tmp_path, **kwargs)
    assert str(err.value) == message


def test_error_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        run(
            stack=None,
            all_stacks=True,
            fmt="text",
            out=tmp_path / "o",
            stacks_dir=FIXTURE / "bad-stacks",
            project_root=FIXTURE,
        )
    assert not (tmp_path / "o").exists()
