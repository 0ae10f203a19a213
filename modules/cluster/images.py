"""Every container image the add-ons run: one table, each row with its registry, tag, digest and evidence.

Images come only from registries without anonymous pull limits (docs.docker.com/docker-hub/usage: Docker
Hub allows 10 anonymous pulls an hour per IP, and a cluster behind one NAT IP pulls as one client).
A digest is written only where a public, pinned source pairs it with the tag (an OLM bundle's
``relatedImages``, the Kubernetes image promoter's manifest, a node's ``status.images``); a row whose
digest could not be verified says so (``digest=None``) and is pinned by its immutable release tag.
Mirroring (docs/container-images.md): copy each reference byte for byte (``az acr import --source <ref>``,
``crane copy``); the digest stays the same, so only the registry host changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.config_model import PROJECT
from modules.errors import ConfigError

# Registries a node may pull from without an anonymous rate limit (docs.docker.com/docker-hub/usage: Docker Hub limits anonymous pulls per IP).
RATE_LIMIT_FREE = ("registry.k8s.io", "mcr.microsoft.com", "nvcr.io")


@dataclass(frozen=True)
class Image:
    repository: str
    tag: str
    digest: str | None
    """``sha256:...`` as the registry serves the tag (index digest for multi-arch images); None: unverified."""
    evidence: str
    """Where the tag and the digest were read, so a reviewer can check them."""

    @property
    def registry(self) -> str:
        return self.repository.split("/", 1)[0]

    @property
    def ref(self) -> str:
        """What a pod spec names: tag for people, digest for the runtime (the digest wins)."""
        return f"{self.repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


WORKLOAD_IDENTITY = "v1.6.0"
"""Azure Workload Identity's release: the webhook image below and the Go module the tests build it from
(github.com/Azure/azure-workload-identity, tools/components/components.py): one version, typed once."""

NETWORK_POLICIES = "v1.1.1"
"""kube-network-policies' release (kubernetes-sigs, SIG Network): the NetworkPolicy engine's image below and the Go
module the tests build its agent from (tools/components/components.py): one version, typed once."""

DCGM = "4.6.0"
"""The DCGM release of the in-cluster DCGM clients (dcgm-exporter, dcgmi): the GPU base's major version."""
GPU_OPERATOR = "NVIDIA/gpu-operator v26.7.0 bundle/manifests/gpu-operator-certified.clusterserviceversion.yaml"
"""NVIDIA's release that pairs the GPU node agents' tags with their digests (its OLM bundle's relatedImages)."""

IMAGES: dict[str, Image] = {
    "workload-identity-webhook": Image(
        "mcr.microsoft.com/oss/v2/azure/workload-identity/webhook",
        WORKLOAD_IDENTITY,
        "sha256:6873b8cec3fb5d585e712ea18af1c1c24107c589e4eafd20a91e260092bc8acb",
        "ONE public source only: an integration test of a public chart repository pairs the tag with this imageID "
        "(as a node reports the pulled image); upstream's deploy/azure-wi-webhook.yaml at the v1.6.0 tag names the "
        "tag (under oss/azure/, without v2) and no digest. Check it before a deploy: "
        "`az acr manifest show-metadata` or `crane digest` of the tag. A wrong digest fails the pull, never runs "
        "another image",
    ),
    # DCGM clients of the host's nv-hostengine (the GPU image's nvidia-dcgm), which they must match in major
    # version (modules/images/config.py GPU_BASES; the cluster plan checks it). dcgm-exporter's distroless image
    # has no dcgmi, so the preflight diagnostics run dcgmi from NVIDIA's DCGM image of the same release.
    "dcgm-exporter": Image(
        "nvcr.io/nvidia/k8s/dcgm-exporter",
        f"{DCGM}-4.8.3-distroless",
        "sha256:613ab03c11d442fd960ff515f547e9921537454a712d08160bc8f677f89f1c35",
        f"{GPU_OPERATOR} relatedImages dcgm-exporter-image (deployments/gpu-operator/values.yaml dcgmExporter "
        f"{DCGM}-4.8.3-distroless)",
    ),
    "dcgm": Image(
        "nvcr.io/nvidia/cloud-native/dcgm",
        f"{DCGM}-1-ubi10",
        "sha256:92080d86d04c265f7fc0b8e1cd95dff94d3ab57de6a6474c3c483e4c2ada5dea",
        f"{GPU_OPERATOR} relatedImages dcgm-image; the image carries dcgmi and bash (NVIDIA's own cluster "
        'validation runs `bash -c "dcgmi diag -r 3"` in nvcr.io/nvidia/cloud-native/dcgm)',
    ),
    "nvidia-device-plugin": Image(
        "nvcr.io/nvidia/k8s-device-plugin",
        "v0.20.0",
        "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
        f"{GPU_OPERATOR} relatedImages device-plugin-image (values.yaml devicePlugin v0.20.0)",
    ),
    "rdma-shared-device-plugin": Image(
        "nvcr.io/nvidia/mellanox/k8s-rdma-shared-dev-plugin",
        "network-operator-v26.4.1",
        "sha256:464970d3197fe982b779c48cce74d90f7563ede5daef834bf169db39ee4541c7",
        "Mellanox/network-operator tag v26.4.1: hack/release.yaml (repository nvcr.io/nvidia/mellanox, version "
        "network-operator-v26.4.1) and bundle/manifests/nvidia-network-operator.clusterserviceversion.yaml "
        "relatedImages rdma-shared-device-plugin",
    ),
    "node-problem-detector": Image(
        "registry.k8s.io/node-problem-detector/node-problem-detector",
        "v0.8.20",
        "sha256:52f0618e9bc2cea60b7aa9d9c962a0b84dace6ef3cff62d1e1a29c92ba1c4177",
        "kubernetes/k8s.io registry.k8s.io/images/k8s-staging-npd/images.yaml (the image promoter's manifest)",
    ),
    # The NetworkPolicy engine's node agent, standard flavour (modules/cluster/objects/policy_engine.py).
    "kube-network-policies": Image(
        "registry.k8s.io/networking/kube-network-policies",
        NETWORK_POLICIES,
        None,
        "the release's tag (kubernetes-sigs/kube-network-policies v1.1.1, the Go module the tests build; its "
        "cloudbuild.yaml builds the release's images into gcr.io/k8s-staging-networking at the tag, promoted to "
        "registry.k8s.io/networking; its Dockerfile puts the standard flavour at /bin/netpol). No source stored here "
        "names the v1.1.1 image: v1.1.1's own install.yaml still names v1.1.0, whose image lacks v1.1.1's one fix "
        "(pkg/networkpolicy/networkpolicy.go: host-network pods' addresses, the node's, are no longer diverted to "
        "the agent). The image promoter's manifest stored here (kubernetes/k8s.io "
        "registry.k8s.io/images/k8s-staging-networking/images.yaml) pairs digests up to v0.8.1 only: tag and digest "
        "unverified. Check before a deploy: `crane digest` of the tag",
    ),
    # Stdlib-only scripts (ConfigMaps): the preflight reporter, the re-test and remediation jobs and
    # the iptables exporter (ctypes + the kernel's iptables socket options, no iptables binary).
    "python": Image(
        "mcr.microsoft.com/azurelinux/base/python",
        "3.12",
        "sha256:d1a693353b7db0383e66a61416a049f617fdfb89435dcaac543749fb4f14950a",
        "a public daily MCR image scan (generated 2026-10-08): azurelinux/base/python:3.12, Python 3.12.15, "
        "created 2026-10-06, 0 known vulnerabilities. The tag moves; the digest does not",
    ),
}

DCGM_EXPORTER = IMAGES["dcgm-exporter"].ref
DCGM_CLIENT = IMAGES["dcgm"].ref
DEVICE_PLUGIN = IMAGES["nvidia-device-plugin"].ref
RDMA_DEVICE_PLUGIN = IMAGES["rdma-shared-device-plugin"].ref
NODE_PROBLEM_DETECTOR = IMAGES["node-problem-detector"].ref
PYTHON = IMAGES["python"].ref
POLICY_AGENT = IMAGES["kube-network-policies"].ref
WORKLOAD_IDENTITY_WEBHOOK = IMAGES["workload-identity-webhook"].ref

# cloud-provider-azure releases, one per Kubernetes minor ("Minor release versions match Kubernetes
# minor release versions"): the newest tag of each release-1.y branch in kubernetes-sigs/cloud-provider-azure
# (git tags @ 7b31c76, 2026-08-19: v1.35.8, v1.36.5). No release exists for 1.37 yet. Images live under
# oss/v2/kubernetes from 1.32 on (helm/cloud-provider-azure/README.md, templates/cloud-provider-azure.yaml).
# Digests unverified (MCR manifests are not reachable from here): pinned by release tag.
# TODO(versions table): a column of modules/bootstrap/versions.py ("a new column is a new Release field").
CLOUD_PROVIDER_AZURE: dict[int, str] = {35: "v1.35.8", 36: "v1.36.5"}
CLOUD_PROVIDER_REPO = "mcr.microsoft.com/oss/v2/kubernetes"
CLOUD_CONTROLLER_MANAGER = "azure-cloud-controller-manager"
CLOUD_NODE_MANAGER = "azure-cloud-node-manager"


def cloud_provider_azure(component: str, kubernetes_version: str) -> Image:
    """The cloud-controller-manager or cloud-node-manager release for ``kubernetes_version``.

    The release of the same minor, else of the one before: cloud-controller-manager "must not be newer
    than the kube-apiserver ... may be up to one minor version older" (kubernetes.io version skew
    policy), as the gang scheduler's rule in the versions table. cloud-provider-azure itself
    recommends the same minor; a 1.37 cluster runs the 1.36 release until v1.37.x exists.
    """
    minor = int(kubernetes_version.split(".")[1])
    found = next((m for m in (minor, minor - 1) if m in CLOUD_PROVIDER_AZURE), None)
    if found is None:
        known = ", ".join(f"1.{m}" for m in sorted(CLOUD_PROVIDER_AZURE))
        raise ConfigError(
            f"{PROJECT}:cluster.kubernetes_version: no cloud-provider-azure release is known for Kubernetes "
            f"{kubernetes_version} or the minor before it (releases follow the Kubernetes minor; known: {known}): "
            "use a minor with a release, or add its release to modules/cluster/images.py CLOUD_PROVIDER_AZURE"
        )
    return Image(
        f"{CLOUD_PROVIDER_REPO}/{component}",
        CLOUD_PROVIDER_AZURE[found],
        None,
        "kubernetes-sigs/cloud-provider-azure git tag; digest unverified",
    )


# CoreDNS, kube-state-metrics and scheduler-plugins follow the Kubernetes minor: their tags live in
# the one versions table, modules/bootstrap/versions.py.
