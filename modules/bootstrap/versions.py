"""The one Kubernetes versions table: per supported minor, the patch and everything pinned to it.

Every part of the toolkit that depends on the Kubernetes version reads this table: the config
validator (``cluster.kubernetes_version``), the node bootstrap (control-plane and kube-proxy images,
the kubelet package, the pause image) and the add-ons (CoreDNS, kube-state-metrics, the gang
scheduler). A new column (e.g. cloud-provider-azure images) is a new ``Release`` field, filled in on
every row with its source.

Sources, as of the stored copies (2026-08; "as of 2026-12" numbers newer than these are
*unverified*: bump a patch after checking the release's CHANGELOG):

- Supported minors and end-of-life dates: kubernetes.io/releases (shared/DOMAIN.md "Kubernetes
  versions"): 1.34 went end of life on 2026-10-27; 1.35 EOL 2027-02-28; 1.36 EOL 2027-06-28; 1.37
  released 2026-08-26 (its EOL below follows the 14-month support period of the patch-release
  policy and is *unverified*).
- Patches: the newest patch of each minor that the Go module proxy serves in full (k8s.io/kubernetes
  ``@v/<version>.info``: v1.35.8 2026-08-20, v1.36.5 2026-09-23, v1.37.2 2026-10-27; v1.35.9 is listed
  on kubernetes.io/releases but its module is refused here). The test tiers build the API server,
  controller-manager and schedulers from exactly these modules (tools/components), so a patch the
  proxy does not serve cannot be pinned without an untested control plane.
- pause: kubespray roles/kubespray_defaults/vars/main/main.yml pod_infra_supported_versions (1.35:
  3.10.1, 1.36: 3.10.2), which follows kubeadm's PauseVersion; 1.37 keeps 3.10.2 (*unverified*).
- CoreDNS, the version kubeadm installs (coredns/deployment kubernetes/CoreDNS-k8s_version.md; its
  stored copy stops at 1.32): 1.35 v1.13.1 (kubernetes/kubernetes#133968), 1.36 v1.14.2 (kubespray
  coredns_supported_versions), 1.37 v1.14.4 (kubernetes/kubernetes#139735, merged in the 1.37
  cycle; that the v1.37.0 tag carries it is *unverified*).
- kube-state-metrics: its README compatibility matrix (@c92fe0c, 2026-08-20): v2.19 is built with
  client-go 1.35 (v2.19.1, 2026-06-11, client-go v0.35.4), v2.20.0 with 1.36 (client-go v0.36.3);
  for 1.37 the project advises its newest release.
- containerd: "The last Kubernetes release to offer this support [containerd 1.x] will be v1.35
  (aligned with containerd 1.7 EOL)" (Kubernetes v1.34 release blog, "Kubernetes to end containerd
  1.x support in v1.36", KEP-4033; relayed as "Kubernetes 1.35 is the last release supporting
  containerd 1.x" by the v1.35 notes): 1.35 keeps 1.7, 1.36 and 1.37 need 2.0 or newer. The boot
  refuses an older containerd on the node; ``check_containerd`` refuses it from the images table.
- scheduler-plugins: v0.35.7, built on Kubernetes v1.35.7, shipped 2026-09-08
  (kubernetes-sigs/scheduler-plugins#1006, kubernetes/k8s.io#9912: the image promotion); the module
  proxy serves sigs.k8s.io/scheduler-plugins@v0.35.7. Version skew policy (kubernetes.io/releases/
  version-skew-policy): kube-scheduler "must not be newer than the kube-apiserver ... may be up to
  one minor version older". So v0.35.7 serves 1.35 and 1.36; 1.37 has no gang scheduler until a
  v0.36.x ships.
- etcd: the upstream release every member runs (kubeadm and kubespray pin upstream binaries; Debian's
  and Ubuntu's etcd-server packages are the 3.4 line, whose support ended with v3.4.45 on 2026-06-01,
  etcd-io/etcd#21613). v3.6.16 (go.etcd.io/etcd/server/v3@v3.6.16, 2026-10-22) is the newest 3.6 patch
  the module proxy serves; the test tiers build it from that module.
- kwok: sigs.k8s.io/kwok v0.8.0 (the module proxy's newest; kwok's docs install it with ``go install
  sigs.k8s.io/kwok/cmd/kwok@<release>``): fake nodes and pods for the control-plane and scale tiers.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.errors import ConfigError

REGISTRY = "registry.k8s.io"
COREDNS_REPO = f"{REGISTRY}/coredns/coredns"
KUBE_STATE_METRICS_REPO = f"{REGISTRY}/kube-state-metrics/kube-state-metrics"
GANG_SCHEDULER_REPO = f"{REGISTRY}/scheduler-plugins/kube-scheduler"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
"""Control-plane and node images, ``registry.k8s.io/<component>:v<release>`` (the release's CHANGELOG)."""
NEWEST_GANG_SCHEDULER = "v0.35.7"
"""scheduler-plugins' newest release (built for 1.35), named in the refusal for newer minors."""


@dataclass(frozen=True)
class Release:
    """One supported Kubernetes minor: the patch this toolkit boots and what is pinned to it."""

    minor: str
    patch: int
    """Newest verified patch release; a stack pins another with ``bootstrap.kubernetes_patch``."""
    end_of_life: str
    pause: str
    """Sandbox (pause) image tag, as kubeadm pins it for this minor."""
    coredns: str
    kube_state_metrics: str
    gang_scheduler: str | None
    """scheduler-plugins release within the skew rule (its minor = ours or one older); None: none."""
    containerd_min: str
    """Oldest containerd line (major.minor) this minor's kubelet supports; the boot refuses older."""

    @property
    def minor_number(self) -> int:
        return int(self.minor.split(".")[1])

    def release(self, patch: int | None = None) -> str:
        """``1.35`` + patch (default: the table's) -> ``1.35.8``."""
        return f"{self.minor}.{self.patch if patch is None else patch}"

    def image(self, component: str, patch: int | None = None) -> str:
        if component not in COMPONENTS:
            raise KeyError(f"{component}: not a Kubernetes component image ({', '.join(COMPONENTS)})")
        return f"{REGISTRY}/{component}:v{self.release(patch)}"

    @property
    def pause_image(self) -> str:
        return f"{REGISTRY}/pause:{self.pause}"

    @property
    def coredns_image(self) -> str:
        return f"{COREDNS_REPO}:{self.coredns}"

    @property
    def kube_state_metrics_image(self) -> str:
        return f"{KUBE_STATE_METRICS_REPO}:{self.kube_state_metrics}"


TABLE: dict[str, Release] = {
    r.minor: r
    for r in (
        Release("1.35", 8, "2027-02-28", "3.10.1", "v1.13.1", "v2.19.1", "v0.35.7", "1.7"),
        Release("1.36", 5, "2027-06-28", "3.10.2", "v1.14.2", "v2.20.0", "v0.35.7", "2.0"),
        Release("1.37", 2, "2027-10-28", "3.10.2", "v1.14.4", "v2.20.0", None, "2.0"),
    )
}
SUPPORTED: tuple[str, ...] = tuple(TABLE)

IMAGE_CONTAINERD: dict[str, str] = {
    # Canonical ubuntu-24_04-lts server (modules/stackplan/config.py UBUNTU_2404): the archive's containerd
    # package is the 1.7 line (noble). *unverified* on this exact version: check `containerd --version`.
    "24.04.202609040": "1.7",
    # microsoft-dsvm ubuntu-hpc 2204 (UBUNTU_HPC_2204): moby-containerd from packages.microsoft.com,
    # installed unpinned with moby-engine (Azure/azhpc-images ubuntu/common/install_docker.sh), the
    # 1.7 line in 2024-10. *unverified*: check `containerd --version` on the image.
    "22.04.2024102301": "1.7",
}
"""containerd line (major.minor) each pinned VM image ships, by image version. The node's boot checks
the real version either way (pin-containerd.sh); this table lets the config refuse early."""
DEFAULT_MINOR = "1.35"
"""The newest supported minor that has a gang scheduler within the skew rule (addons.gang is on by default)."""


ETCD = "3.6.16"
"""The etcd release every member runs, and the one the real-etcd and control-plane tests build."""
KWOK = "v0.8.0"
"""kwok, which stands in for kubelets (fake nodes and pods) in the control-plane and scale tiers."""


def _choices() -> str:
    return ", ".join(SUPPORTED[:-1]) + f" or {SUPPORTED[-1]}"


def check_minor(minor: str) -> str:
    """``minor`` when the table has it; ``ValueError`` naming the supported minors otherwise."""
    if minor not in TABLE:
        raise ValueError(f"kubernetes_version {minor!r} is not supported: use {_choices()}")
    return minor


def release(minor: str) -> Release:
    """The table's row for ``minor``; ConfigError naming the key and the supported minors otherwise."""
    try:
        return TABLE[check_minor(minor)]
    except ValueError as err:
        raise ConfigError(f"azure-gpu-k8s:cluster.kubernetes_version: {err}") from None


def kubernetes_release(minor: str, patch: int | None) -> str:
    """``1.35`` + patch (or the table's newest) -> ``1.35.8``."""
    return release(minor).release(patch)


def tag_minor(tag: str) -> int | None:
    """The Kubernetes minor a scheduler-plugins tag is built for (``v0.34.7`` -> 34), None if not a v0.N tag."""
    parts = tag.removeprefix("v").split(".")
    if len(parts) < 2 or parts[0] != "0" or not parts[1].isdigit():
        return None
    return int(parts[1])


def gang_within_skew(tag: str, minor: str) -> bool:
    """Whether a scheduler-plugins ``tag`` may run against ``minor``'s API server (same minor or one older)."""
    built = tag_minor(tag)
    return built is not None and release(minor).minor_number - 1 <= built <= release(minor).minor_number


def gang_scheduler_image(tag: str) -> str:
    """The kube-scheduler image of scheduler-plugins ``tag``."""
    return f"{GANG_SCHEDULER_REPO}:{tag}"


def _line(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def check_containerd(minor: str, images: dict[str, str]) -> None:
    """ConfigError when an image (kind -> image version) ships a containerd older than ``minor`` needs.

    Images this table does not know pass here; their nodes' boot checks the installed containerd.
    """
    need = release(minor).containerd_min
    for kind, version in images.items():
        have = IMAGE_CONTAINERD.get(version)
        if have is not None and _line(have) < _line(need):
            raise ConfigError(
                f"azure-gpu-k8s:cluster.kubernetes_version: Kubernetes {minor} needs containerd {need} or newer, "
                f"but images.{kind} {version} ships containerd {have}: use kubernetes_version "
                f"{_newest_for(have)}, or pin images.{kind} to an image with containerd {need} or newer "
                "(and add it to modules/bootstrap/versions.py IMAGE_CONTAINERD)"
            )


def _newest_for(containerd: str) -> str:
    """The newest supported minor whose kubelet still supports this containerd line."""
    fits = [m for m, r in TABLE.items() if _line(r.containerd_min) <= _line(containerd)]
    return fits[-1] if fits else SUPPORTED[0]
