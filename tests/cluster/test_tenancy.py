"""Team namespaces' Pod Security labels and the NCCL topology ConfigMap (objects/teams.py, objects/tenancy.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from modules.cluster.objects import tenancy
from modules.cluster.objects.teams import team_objects
from modules.cluster.spec import AddonsSpec

from .conftest import spec_of


def test_team_namespaces_carry_pod_security_labels_pinned_to_the_cluster_minor(dev_spec: AddonsSpec) -> None:
    for version in ("1.35", "1.36"):
        spec = dev_spec if version == dev_spec.kubernetes_version else spec_of("dev", version=version)
        ns = team_objects(spec, spec.teams[0])[0]
        labels = {k: v for k, v in ns["metadata"]["labels"].items() if k.startswith("pod-security.kubernetes.io/")}
        minor = f"v{version}"
        assert labels == {
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/enforce-version": minor,
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/warn-version": minor,
            "pod-security.kubernetes.io/audit": "restricted",
            "pod-security.kubernetes.io/audit-version": minor,
        }
        assert ns["metadata"]["labels"][spec.team_key] == spec.teams[0].name


def test_every_team_gets_the_topology_files_of_the_image_byte_for_byte(dev_spec: AddonsSpec) -> None:
    (cm,) = [o for o in tenancy.tenancy(dev_spec) if o["metadata"]["namespace"] == dev_spec.teams[0].name]
    assert cm["metadata"]["name"] == "nccl-topology"
    assert set(cm["data"]) == {"ndv4-topo.xml", "ndv5-topo.xml"}
    for key, text in cm["data"].items():
        assert text == (Path(tenancy.TOPOLOGY_DIR) / key).read_text()
        assert text.startswith('<system version="1">'), key
    assert "8e9d055fb9e1f7385da734969793861c447958a1" in cm["metadata"]["annotations"]["source"]


def test_topology_paths_are_the_images_own() -> None:
    # setup_sku_customizations.sh: standard_nd*v4 -> ndv4, standard_nd96is*_h[1-2]00_v5 -> ndv5.
    assert tenancy.topology_file("Standard_ND96asr_v4") == "/opt/microsoft/ndv4/topo.xml"
    assert tenancy.topology_file("Standard_ND96isr_H100_v5") == "/opt/microsoft/ndv5/topo.xml"
    assert tenancy.topology_file("Standard_D8s_v3") is None
    assert tenancy.topology_volume("Standard_D8s_v3") == [] and tenancy.topology_mount("Standard_D8s_v3") == []


# git's blob ids of the upstream files at the pinned commit (git ls-tree of Azure/azhpc-images).
UPSTREAM_BLOBS = {
    "ndv4-topo.xml": "dde6f06d1a6c39ade87a06c79550662d815b3457",
    "ndv5-topo.xml": "fce65815a40cadb6e7edea633a5985d74d5f19b2",
}


def test_the_topology_files_are_upstreams_unchanged() -> None:
    ids = {
        p.name: subprocess.run(
            ["git", "hash-object", str(p)], capture_output=True, text=True, check=True
        ).stdout.strip()
        for p in sorted(Path(tenancy.TOPOLOGY_DIR).glob("*.xml"))
    }
    assert ids == UPSTREAM_BLOBS
