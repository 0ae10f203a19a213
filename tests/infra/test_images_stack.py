"""The ``images`` stack, planned by the real program under the mock runtime: a gallery, one image definition
and one Image Builder template per role, the builder's identity allowed exactly the gallery writes; bad input
is one line before any resource exists.

The stack file is written into a temporary stacks folder (no images stack ships in stacks/ yet)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from agk.plan.engine import export_state
from modules.azure.images import BUILD_SCRIPT, BUILDER_ACTIONS
from modules.errors import AgkError
from modules.images.build import script
from modules.images.config import UBUNTU_2404, UBUNTU_HPC_2404
from modules.images.recipe import recipe

P = "azure-gpu-k8s:"


def _stack(tmp_path: Path, image_build: dict[str, Any]) -> Path:
    config = {
        f"{P}kind": "images",
        f"{P}location": "eastus2",
        f"{P}tags": {"owner": "platform-team", "cost_center": "cc-1234"},
        f"{P}image_build": image_build,
    }
    (tmp_path / "Pulumi.images.yaml").write_text(yaml.safe_dump({"config": config}))
    return tmp_path


def _of(doc: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in doc["deployment"]["resources"] if r["type"] == type_]


def test_images_stack_plans_a_gallery_image_and_template_per_role(tmp_path: Path) -> None:
    doc = export_state("images", _stack(tmp_path, {"kubernetes_version": "1.35", "build": 3}))
    (gallery,) = _of(doc, "azure-native:compute:Gallery")
    assert gallery["inputs"]["galleryName"] == "agk_images"
    images = {r["inputs"]["galleryImageName"]: r for r in _of(doc, "azure-native:compute:GalleryImage")}
    roles = ["etcd", "apiserver", "system-node", "gpu-node", "prometheus", "nat"]
    assert sorted(images) == sorted(roles)
    for role, image in images.items():
        assert image["inputs"]["identifier"] == {"publisher": "agk", "offer": "agk-node", "sku": role}
        assert image["inputs"]["osState"] == "Generalized" and image["inputs"]["osType"] == "Linux"
        assert image["parent"].endswith("agk:images:NodeImages::images")
    templates = {
        r["inputs"]["imageTemplateName"]: r
        for r in _of(doc, "azure-native:virtualmachineimages:VirtualMachineImageTemplate")
    }
    assert sorted(templates) == sorted(f"agk-{role}-35.8.3" for role in roles)
    (identity,) = _of(doc, "azure-native:managedidentity:UserAssignedIdentity")
    for role in roles:
        t = templates[f"agk-{role}-35.8.3"]["inputs"]
        base = UBUNTU_HPC_2404 if role == "gpu-node" else UBUNTU_2404
        assert t["source"] == {"type": "PlatformImage", **base}
        assert t["identity"] == {"type": "UserAssigned", "userAssignedIdentities": [identity["outputs"]["id"]]}
        (customizer,) = t["customize"]
        write, run = customizer["inline"]
        assert run == f"sudo bash {BUILD_SCRIPT}"
        encoded = write.removeprefix("echo ").removesuffix(f" | base64 -d > {BUILD_SCRIPT}")
        assert base64.b64decode(encoded).decode() == script(recipe(role, "1.35")), "the production rendering"
        (dist,) = t["distribute"]
        assert dist["type"] == "SharedImage"
        assert dist["galleryImageId"] == images[role]["outputs"]["id"] + "/versions/35.8.3"
        assert dist["targetRegions"] == [{"name": "eastus2", "replicaCount": 1}]
        assert t["autoRun"] == {"state": "Enabled"}
        assert {"owner", "cost-center", "cluster"} <= set(t["tags"])
    (role_def,) = _of(doc, "azure-native:authorization:RoleDefinition")
    assert role_def["inputs"]["permissions"] == [{"actions": list(BUILDER_ACTIONS)}]
    (assignment,) = _of(doc, "azure-native:authorization:RoleAssignment")
    assert assignment["inputs"]["scope"] == gallery["outputs"]["id"]
    assert assignment["inputs"]["principalId"] == identity["outputs"]["principalId"]
    outputs = next(r for r in doc["deployment"]["resources"] if r["type"] == "pulumi:pulumi:Stack")["outputs"]
    assert outputs["kubernetes_release"] == "1.35.8"
    assert outputs["image_versions"]["etcd"] == images["etcd"]["outputs"]["id"] + "/versions/35.8.3"
    assert outputs["manifests"]["nat"] == recipe("nat", "1.35").manifest()


def test_unverified_rows_stop_the_plan_with_one_line(tmp_path: Path) -> None:
    stacks = _stack(tmp_path, {"kubernetes_version": "1.37", "build": 1, "roles": ["etcd", "gpu-node"]})
    with pytest.raises(AgkError) as err:
        export_state("images", stacks)
    assert "azure-gpu-k8s:image_build.kubernetes_version: kubelet 1.37.2: no verified sha256" in str(err.value)
    assert "\n" not in str(err.value)
    # etcd alone needs no kubelet: 1.37 plans.
    doc = export_state("images", _stack(tmp_path, {"kubernetes_version": "1.37", "build": 1, "roles": ["etcd"]}))
    assert len(_of(doc, "azure-native:compute:GalleryImage")) == 1


def test_image_build_config_refusals(tmp_path: Path) -> None:
    with pytest.raises(AgkError, match=r"image_build.*roles.*name a role twice"):
        export_state("images", _stack(tmp_path, {"kubernetes_version": "1.35", "build": 1, "roles": ["nat", "nat"]}))
    with pytest.raises(AgkError, match=r"image_build\.build"):
        export_state("images", _stack(tmp_path, {"kubernetes_version": "1.35", "build": 0}))


def test_agk_plan_refuses_an_unverified_release_with_status_2(tmp_path: Path) -> None:
    from tests.cli.badinput import agk

    stacks = _stack(tmp_path, {"kubernetes_version": "1.37", "build": 1})
    done = agk("plan", "--stack", "images", "--stacks-dir", str(stacks))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "error: images: azure-gpu-k8s:image_build.kubernetes_version: kubelet 1.37.2, kubectl 1.37.2: no verified "
        "sha256 in modules/bootstrap/versions.py (a placeholder or none): add the sha256 the release publishes, "
        "with its source, to that row, or choose a version whose row has one\n"
    )
