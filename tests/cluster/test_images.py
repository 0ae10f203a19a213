"""Pure tier: every image the cluster runs comes from a registry without anonymous pull limits, pinned by
digest or explicitly listed as unverified, and the per-minor and per-host pairings hold."""

from __future__ import annotations

import re
from typing import Any

import pytest

from modules.cluster import images
from modules.cluster.manifests import render_manifests
from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError
from modules.images.config import GPU_BASES, UBUNTU_HPC_2404

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _containers(spec: AddonsSpec) -> list[dict[str, Any]]:
    out = []
    for obj in render_manifests(spec):
        s = obj.get("spec", {})
        template = s.get("template") or s.get("jobTemplate", {}).get("spec", {}).get("template")
        if template:
            pod = template["spec"]
            out += pod.get("initContainers", []) + pod["containers"]
    return out


def _unverified_refs(spec: AddonsSpec) -> set[str]:
    """References pinned by tag only, each listed as such: table rows without a digest, cloud-provider-azure's
    per-minor releases, and the images of the per-minor versions table (which has no digest column yet)."""
    rows = {i.ref for i in images.IMAGES.values() if i.digest is None}
    cloud = {spec.cloud_provider.controller_image, spec.cloud_provider.node_manager_image}
    versioned = {spec.dns.image, spec.state_metrics.image, spec.gang.scheduler_image}
    return rows | cloud | versioned


@pytest.mark.parametrize("which", ["dev_spec", "prod_spec", "spec_136"])
def test_every_image_is_rate_limit_free_and_pinned(which: str, request: pytest.FixtureRequest) -> None:
    spec: AddonsSpec = request.getfixturevalue(which)
    unverified = _unverified_refs(spec)
    seen = set()
    for c in _containers(spec):
        ref = c["image"]
        seen.add(ref)
        assert ref.split("/", 1)[0] in images.RATE_LIMIT_FREE, (
            f"{c['name']}: {ref} is not from {images.RATE_LIMIT_FREE}"
        )
        name, _, digest = ref.partition("@")
        assert ":" in name.rsplit("/", 1)[-1] and not name.endswith(":latest"), ref
        assert (digest and DIGEST.match(digest)) or ref in unverified, f"{ref}: neither a digest nor listed unverified"
    # Every table row the cluster deploys is in use (no stale rows); the webhook only with cluster.identity.
    optional = {images.WORKLOAD_IDENTITY_WEBHOOK} if spec.access is None else set()
    assert {i.ref for i in images.IMAGES.values()} - optional <= seen


def test_table_rows_carry_evidence_and_well_formed_digests() -> None:
    for key, image in images.IMAGES.items():
        assert image.registry in images.RATE_LIMIT_FREE, key
        assert image.digest is None or DIGEST.match(image.digest), key
        assert len(image.evidence) > 30, key
        assert image.tag and image.tag != "latest", key


def test_dcgm_clients_are_one_release_of_the_gpu_base_major() -> None:
    """dcgm-exporter and dcgmi talk to the GPU base's nv-hostengine: one DCGM release, the base's major version."""
    base = GPU_BASES[UBUNTU_HPC_2404["version"]]  # a GPU base bump must add its row
    for key in ("dcgm-exporter", "dcgm"):
        assert images.IMAGES[key].tag.startswith(f"{images.DCGM}-"), key  # <dcgm>-<exporter or build>-<os>
    assert images.DCGM.split(".")[0] == base.dcgm.split(".")[0], (images.DCGM, base.dcgm)
    assert images.IMAGES["dcgm"].ref == images.DCGM_CLIENT


@pytest.mark.parametrize(
    ("version", "ref"),
    [
        ("1.35", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.35.8"),
        ("1.36", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.5"),
        # No 1.37 release yet: one minor older is within the version skew policy.
        ("1.37", "mcr.microsoft.com/oss/v2/kubernetes/azure-cloud-controller-manager:v1.36.5"),
    ],
)
def test_cloud_provider_release_follows_the_minor(version: str, ref: str) -> None:
    assert images.cloud_provider_azure(images.CLOUD_CONTROLLER_MANAGER, version).ref == ref
    node = images.cloud_provider_azure(images.CLOUD_NODE_MANAGER, version).ref
    assert node == ref.replace("azure-cloud-controller-manager", "azure-cloud-node-manager")


@pytest.mark.parametrize("version", ["1.34", "1.38"])
def test_a_minor_without_a_cloud_provider_release_is_one_line(version: str) -> None:
    with pytest.raises(ConfigError) as err:
        images.cloud_provider_azure(images.CLOUD_CONTROLLER_MANAGER, version)
    assert str(err.value) == (
        f"azure-gpu-k8s:cluster.kubernetes_version: no cloud-provider-azure release is known for Kubernetes "
        f"{version} or the minor before it (releases follow the Kubernetes minor; known: 1.35, 1.36): use a minor "
        "with a release, or add its release to modules/cluster/images.py CLOUD_PROVIDER_AZURE"
    )


def test_every_supported_minor_has_a_cloud_provider_release() -> None:
    from modules.bootstrap import versions

    for minor in versions.SUPPORTED:
        image = images.cloud_provider_azure(images.CLOUD_NODE_MANAGER, minor)
        built = int(image.tag.split(".")[1])
        assert versions.release(minor).minor_number - 1 <= built <= versions.release(minor).minor_number, minor


def test_the_doc_lists_every_image_as_the_table_pins_it() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "container-images.md").read_text()
    section = doc.split("## Images", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[2].strip(): line for line in section.splitlines() if line.startswith("| ")}
    for key, image in images.IMAGES.items():
        row = rows.get(image.repository)
        assert row is not None, f"docs/container-images.md's image table has no row for {image.repository} ({key})"
        assert f"| {image.tag} |" in row and (image.digest or "unverified") in row, (key, row)
