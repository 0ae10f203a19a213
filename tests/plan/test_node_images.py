"""Hosts and scale sets boot the images stack's gallery image versions, and a new one is a planned roll (issue 21).

The real program, planned under Pulumi's mock runtime (no cloud): every cluster VM and scale set references its
role's gallery image version, which the plan names; raising ``cluster.node_images.build`` gives each scale set a
new model (an update Azure takes in place; upgrade policy Manual keeps running instances as they are) and replaces
each fixed host delete-first (Azure refuses a VM's image change in place: the program asks for the replacement),
which the review refuses unless the stack allows it, like any other replacement of a running machine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from agk.plan.diff import resources_of
from agk.review import ChangeSet, review
from agk.stack_export import parse
from modules.errors import AgkError

from .changed_stacks import cluster, diff, export, export_after, line, stack_folder

GALLERY = "/resourceGroups/agk-images/providers/Microsoft.Compute/galleries/agk_images/images/"
VM = "azure-native:compute:VirtualMachine"
VMSS = "azure-native:compute:VirtualMachineScaleSet"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


def _image(res: Mapping[str, Any]) -> dict[str, Any]:
    inputs = res["inputs"]
    profile = inputs["virtualMachineProfile"] if res["type"] == VMSS else inputs
    image = profile["storageProfile"]["imageReference"]
    assert isinstance(image, dict)
    return image


def _roles(state: dict[str, Any]) -> dict[str, str]:
    """Each VM's and scale set's logical name -> the image reference it boots (gallery role/version)."""
    out = {}
    for res in resources_of(state):
        if res["type"] in (VM, VMSS):
            image = _image(res)
            ref = str(image.get("id", ""))
            out[res["urn"].rsplit("::", 1)[-1]] = ref.split(GALLERY, 1)[1] if GALLERY in ref else repr(image)
    return out


def _stack_outputs(state: dict[str, Any]) -> dict[str, Any]:
    from agk.plan import wire

    stack = next(r for r in resources_of(state) if r["type"] == "pulumi:pulumi:Stack")
    return {k: wire.plain(v) for k, v in stack.get("outputs", {}).items()}


def test_every_cluster_host_and_scale_set_boots_its_roles_gallery_image(base: dict[str, Any]) -> None:
    roles = _roles(base)
    assert roles["dev-etcd-0"] == "etcd/versions/36.4.1"
    assert roles["dev-apiserver-0"] == "apiserver/versions/36.4.1"
    assert roles["dev-prometheus-0"] == "prometheus/versions/36.4.1"
    assert roles["dev-nat-0"] == "nat/versions/36.4.1"
    assert {v for k, v in roles.items() if k.startswith(("a100-", "h100-"))} == {"gpu-node/versions/36.4.1"}
    assert {v for k, v in roles.items() if k.startswith("system-")} == {"system-node/versions/36.4.1"}
    # Nothing of the cluster boots a marketplace image any more.
    assert all("versions/36.4.1" in v for v in roles.values()), roles
    outputs = _stack_outputs(base)
    assert outputs["node_images"] == {
        "etcd": "36.4.1",
        "apiserver": "36.4.1",
        "gpu-node": "36.4.1",
        "system-node": "36.4.1",
        "prometheus": "36.4.1",
        "nat": "36.4.1",
    }
    # The plan says the images stack goes first, with the command that checks each version exists.
    steps = [s["what"] for s in outputs["prerequisites"]["steps"]]
    assert "node image gpu-node 36.4.1" in steps
    (gpu,) = [s for s in outputs["prerequisites"]["steps"] if s["what"] == "node image gpu-node 36.4.1"]
    assert "az sig image-version show -g agk-images -r agk_images -i gpu-node -e 36.4.1" in gpu["command"]
    assert "pulumi up --stack images" in gpu["command"]


def test_a_new_image_build_rolls_scale_sets_and_replaces_fixed_hosts_under_review(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    def rebuild(config: dict[str, Any]) -> None:
        cluster(config)["node_images"] = {"images_stack": "images", "build": 2}

    def build_two(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:image_build"]["build"] = 2

    folder = stack_folder(tmp_path / "stacks", edit=rebuild)
    images = folder / "Pulumi.images.yaml"
    doc = yaml.safe_load(images.read_text())
    build_two(doc["config"])
    images.write_text(yaml.safe_dump(doc, sort_keys=False))
    head = export_after(folder, base)
    found, radius = diff(base, head)
    by_name = {c.name: c for c in found.changes}
    # A scale set takes the new image in its model, in place: no refusal, no replacement.
    h100 = next(c for n, c in by_name.items() if n.startswith("h100-") and c.type == VMSS)
    assert (h100.action, h100.refused) == ("update", ())
    assert "virtualMachineProfile.storageProfile.imageReference.id" in h100.paths
    assert h100.name in {r.name for r in radius.to_roll}, "the plan names the sets whose nodes need a reimage"
    # A fixed host is replaced, deleted first: the program asks for it, since Azure refuses the change in place.
    nat = by_name["dev-nat-0"]
    assert (line(nat), nat.delete_first) == ("replace VirtualMachine dev-nat-0 [storageProfile.imageReference]", True)
    etcd = by_name["dev-etcd-0"]
    assert etcd.action == "replace"
    # The review refuses each replacement of a running host unless the stack allows it by name.
    report = review([parse(head, "dev", "x")], None, [ChangeSet(found, [], "stacks/Pulumi.dev.yaml")])
    refused = {v.urn.rsplit("::", 1)[-1] for v in report.violations if v.policy == "no-stateful-replacement"}
    assert {"dev-nat-0", "dev-apiserver-0", "dev-prometheus-0", "dev-etcd-0"} <= refused
    nat_msg = next(v.message for v in report.violations if v.urn.endswith("::dev-nat-0"))
    assert "because storageProfile.imageReference changes" in nat_msg
    assert "allow: [{name: dev-nat-0, action: replace" in nat_msg


def test_one_role_rolls_on_its_own_build(tmp_path: Path, base: dict[str, Any]) -> None:
    def gpu_only(config: dict[str, Any]) -> None:
        cluster(config)["node_images"] = {"build": 1, "roles": {"gpu-node": 2}}

    folder = stack_folder(tmp_path / "stacks", edit=gpu_only)
    images = folder / "Pulumi.images.yaml"
    doc = yaml.safe_load(images.read_text())
    doc["config"]["azure-gpu-k8s:image_build"]["build"] = 2
    images.write_text(yaml.safe_dump(doc, sort_keys=False))
    found, _ = diff(base, export_after(folder, base))
    changed = {c.name for c in found.changes if c.type in (VM, VMSS)}
    assert changed and all(n.startswith(("a100-", "h100-")) for n in changed), changed


@pytest.mark.parametrize(
    ("node_images", "images_build", "message"),
    [
        (
            {"build": 3},
            1,
            "azure-gpu-k8s:cluster.node_images: etcd image 36.4.3 is not built yet (images stack 'images' builds "
            "36.4.1): raise image_build.build there to 3 and deploy it first, or boot build 1",
        ),
        (
            {"images_stack": "hub"},
            1,
            "azure-gpu-k8s:cluster.node_images.images_stack: 'hub' is a hub stack: name the images stack",
        ),
        (
            {"images_stack": "gallery"},
            1,
            "azure-gpu-k8s:cluster.node_images.images_stack: cannot read images stack 'gallery'",
        ),
    ],
)
def test_an_image_the_images_stack_has_not_built_is_a_config_error(
    tmp_path: Path, node_images: dict[str, Any], images_build: int, message: str
) -> None:
    def edit(config: dict[str, Any]) -> None:
        cluster(config)["node_images"] = node_images

    with pytest.raises(AgkError) as err:
        export(stack_folder(tmp_path / "stacks", edit=edit))
    assert message in str(err.value)


def test_a_role_the_images_stack_does_not_build_is_a_config_error(tmp_path: Path) -> None:
    folder = stack_folder(tmp_path / "stacks")
    images = folder / "Pulumi.images.yaml"
    doc = yaml.safe_load(images.read_text())
    doc["config"]["azure-gpu-k8s:image_build"]["roles"] = ["etcd", "apiserver", "prometheus", "nat", "system-node"]
    images.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(AgkError) as err:
        export(folder)
    assert "images stack 'images' builds no gpu-node image, which gpu-node hosts boot: add gpu-node" in str(err.value)


def test_moving_a_scale_set_from_a_marketplace_image_is_refused_in_place(base: dict[str, Any]) -> None:
    """A cluster deployed before this change booted marketplace images: Azure refuses a scale set's move to a
    gallery image in place (publisher and offer are create-time), so the plan says so rather than failing."""
    old = copy.deepcopy(base)
    for res in resources_of(old):
        if res["type"] == VMSS:
            res["inputs"]["virtualMachineProfile"]["storageProfile"]["imageReference"] = {
                "publisher": "microsoft-dsvm",
                "offer": "ubuntu-hpc",
                "sku": "2204",
                "version": "22.04.2024102301",
            }
    found, _ = diff(old, base)
    sets = [c for c in found.changes if c.type == VMSS]
    assert sets and all(c.refused for c in sets)
    assert "virtualMachineProfile.storageProfile.imageReference.publisher" in sets[0].refused


def test_agk_plan_prints_the_image_versions(tmp_path: Path) -> None:
    from agk.plan.engine import Planner
    from agk.plan.report import as_json, markdown, text

    plan = Planner(stack_folder(tmp_path / "stacks")).plan("dev")
    assert as_json(plan, {}, None)["node_images"]["gpu-node"] == "36.4.1"
    assert "  gpu-node             36.4.1" in text(plan, {}, None)
    assert "| gpu-node | 36.4.1 |" in markdown(plan, {}, None)
