"""The one versions table: every pinned release, with its download, its sha256 and who publishes the pairing.

Two parts, one fact each:

- ``TABLE``: per supported Kubernetes minor, the patch this toolkit boots and everything pinned to the
  minor (kubelet/kubectl/kubeadm binaries with their sha256s, pause, CoreDNS, kube-state-metrics, the
  gang scheduler, cloud-provider-azure, cluster-autoscaler, the oldest containerd the kubelet takes).
- ``ARTIFACTS``: what every node image installs whatever the minor (etcd, containerd, runc, the CNI
  plugins, crictl, Azure CNI, Prometheus, Alertmanager) and the Go toolchain that builds Azure CNI, each an
  ``Artifact`` row; ``APT_PACKAGES``: what an image installs from a vendor's signed apt repository (Grafana).

A row without a sha256 is *unverified*: no public source pairs that version with a checksum. The plan
lists such rows and refuses to build from one (``require_verified``); a placeholder (all zeros) is
refused the same way. Bumping a version is one row: its URL, sha256 and source together (and, for the
components the tests build, ``make components`` rewrites their go.mod: tools/components).

Sources (stored copies up to 2026-08-22; the Go module proxy up to mid-November 2026):

- Supported minors and end of life: kubernetes.io/releases; 1.34 went end of life on 2026-10-27;
  1.35 EOL 2027-02-28 (kubernetes/website#54719), 1.36 2027-06-28 (patch-releases page), 1.37
  2027-10-28 (kubernetes/website#57050).
- Patches: the newest patch per minor whose kubelet, kubectl and kubeadm sha256s a public source pairs,
  *and* whose k8s.io/kubernetes module the Go module proxy serves (the control-plane tests build the API
  server from it): 1.35.8 and 1.36.4, both in kubernetes-sigs/kubespray@46dbdd3
  roles/kubespray_defaults/vars/main/checksums.yml (2026-08-21). Newer patches exist (1.35.10, 1.36.6,
  tagged 2026-10-28) but neither pairing nor module is available here. 1.37.2 (module served) has no
  published kubelet/kubeadm checksum: the row is unverified, so 1.37 cannot be deployed from this table.
- kubeadm's companions per minor (pause, CoreDNS; etcd for reference): k8s.io/kubernetes@v1.35.8,
  v1.36.5, v1.37.2 cmd/kubeadm/app/constants/constants.go: pause 3.10.1 / 3.10.2 / 3.10.2, CoreDNS
  v1.13.1 / v1.14.2 / v1.14.6, etcd 3.6.6-0 / 3.6.8-0 / 3.7.0-0.
- kube-state-metrics: its README compatibility matrix (@c92fe0c, 2026-08-20): v2.19 <-> client-go 1.35,
  v2.20.0 <-> 1.36 (newest release; none for 1.37).
- containerd: RELEASES.md (containerd@301026e, 2026-08-22): 1.7 supported until September 2026, 2.1
  ended 2026-07-03, 2.2 ends 2026-11-06, 2.3 is the LTS line to 2028-04-30; its Kubernetes Support
  matrix: 1.35 -> 2.2.0+, 2.1.5+, 1.7.28+; 1.36 -> 2.3.0+, 2.2.0+ (no 1.37 row yet: taken as 1.36's).
  The kubelet keeps its containerd 1.x fallback until 1.38 (kubernetes#136846, kubernetes/enhancements#6087),
  so the column follows containerd's matrix, not the kubelet's floor. Every image installs the table's 2.3
  containerd, so ``containerd_min`` holds for every minor.
- scheduler-plugins: v0.35.7, built on Kubernetes v1.35.7, shipped 2026-09-08
  (kubernetes-sigs/scheduler-plugins#1006, kubernetes/k8s.io#9912). Version skew policy
  (kubernetes.io/releases/version-skew-policy): kube-scheduler "must not be newer than the
  kube-apiserver ... may be up to one minor version older". So v0.35.7 serves 1.35 and 1.36; 1.37 has
  no gang scheduler until a v0.36.x ships.
- cloud-provider-azure: the newest tag of each release-1.y branch (kubernetes-sigs/cloud-provider-azure
  @7b31c76, 2026-08-19): v1.35.8, v1.36.5; no 1.37 release. cluster-autoscaler: kubernetes/autoscaler
  @55c37cd tags cluster-autoscaler-1.35.2 and 1.36.1 (2026-07-22); no 1.37 tag.
- etcd: the upstream release every member runs (kubeadm and kubespray pin upstream binaries; Debian's
  and Ubuntu's etcd-server packages are the 3.4 line, whose support ended with v3.4.45 on 2026-06-01,
  etcd-io/etcd#21613). 3.6.14 is the newest 3.6 whose tarball sha256 a source pairs (kubespray
  @46dbdd3 etcd_binary_checksums) and whose module the proxy serves (the tests build the same).
- kwok: sigs.k8s.io/kwok v0.8.0 (the module proxy's newest): fake nodes and pods for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from modules.config_model import PROJECT
from modules.errors import ConfigError

REGISTRY = "registry.k8s.io"
COREDNS_REPO = f"{REGISTRY}/coredns/coredns"
KUBE_STATE_METRICS_REPO = f"{REGISTRY}/kube-state-metrics/kube-state-metrics"
GANG_SCHEDULER_REPO = f"{REGISTRY}/scheduler-plugins/kube-scheduler"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
"""Control-plane and node images, ``registry.k8s.io/<component>:v<release>`` (the release's CHANGELOG)."""
NEWEST_GANG_SCHEDULER = "v0.35.7"
"""scheduler-plugins' newest release (built for 1.35), named in the refusal for newer minors."""


ZEROS = "0" * 64
BINARIES = {"cni/network/plugin": "azure-vnet", "cni/ipam/plugin": "azure-vnet-ipam"}
"""Binary names of built packages whose last path element is not the name (Azure CNI's Makefile names)."""
KUBESPRAY = "kubernetes-sigs/kubespray@46dbdd3 roles/kubespray_defaults/vars/main/checksums.yml (2026-08-21)"
DL_K8S = "https://dl.k8s.io/release/v{release}/bin/linux/amd64/{binary}"
"""Where Kubernetes publishes its node binaries (kubespray download.yml uses the same form)."""
NODE_BINARIES = ("kubelet", "kubectl", "kubeadm")
DIGEST_SOURCE = (
    "public manifests pairing registry.k8s.io's tag and index digest (several independent ones each, search "
    "corpus 2026-08/10; the registry.k8s.io promoter manifests stored here predate these tags)"
)


@dataclass(frozen=True)
class Artifact:
    """One download a node image installs: the version, where it comes from, its sha256, who pairs them."""

    name: str
    version: str
    url: str
    """The linux/amd64 download."""
    sha256: str | None
    """Of the download; None: no public source pairs it with the version (unverified: not deployable)."""
    source: str
    """Where the version and the sha256 were read, so a reviewer can check them."""
    go_module: str | None = None
    """Built from this Go module at ``v<version>`` instead of downloaded (when no checksum is published):
    its source is pinned by the go.sum hash the Go checksum database serves (tools/components/<name>)."""
    packages: tuple[str, ...] = ()
    """The main packages of ``go_module`` it builds (binary name: ``BINARIES``, else the last path element)."""
    ldflags: tuple[str, ...] = ()
    """Linker flags of the build (as the project's release build sets them)."""

    def binary(self, package: str) -> str:
        return BINARIES.get(package, package.rsplit("/", 1)[-1])

    @property
    def verified(self) -> bool:
        if self.go_module is not None:
            return True
        return self.sha256 is not None and len(self.sha256) == 64 and self.sha256 != ZEROS


@dataclass(frozen=True)
class Release:
    """One supported Kubernetes minor: the patch this toolkit boots and what is pinned to it."""

    minor: str
    patch: int
    """Newest patch with verified node binaries; a stack pins another with ``cluster.kubernetes_patch``."""
    end_of_life: str
    pause: str
    """Sandbox (pause) image tag, as kubeadm pins it for this minor."""
    coredns: str
    kube_state_metrics: str
    gang_scheduler: str | None
    """scheduler-plugins release within the skew rule (its minor = ours or one older); None: none."""
    containerd_min: str
    """Oldest containerd line (major.minor) containerd recommends for this minor (its RELEASES.md matrix); the
    plan refuses a containerd row older (check_image_containerd)."""
    cloud_provider_azure: str | None
    """cloud-provider-azure's release of this minor (None: none yet, the minor before serves)."""
    cluster_autoscaler: str | None
    binaries: dict[str, str | None]
    """kubelet, kubectl, kubeadm of ``patch`` -> sha256 (None: unverified)."""
    binaries_source: str
    digests: dict[str, str | None]
    """pause, coredns, kube-state-metrics -> the image index digest a public source pairs with the tag
    (None: unverified, pinned by the release tag alone)."""

    @property
    def minor_number(self) -> int:
        return int(self.minor.split(".")[1])

    def release(self, patch: int | None = None) -> str:
        """``1.35`` + patch (default: the table's) -> ``1.35.8``."""
        return f"{self.minor}.{self.patch if patch is None else patch}"

    def artifacts(self) -> dict[str, Artifact]:
        """The node binaries of this minor's patch, as rows."""
        return {
            b: Artifact(
                b,
                self.release(),
                DL_K8S.format(release=self.release(), binary=b),
                self.binaries[b],
                self.binaries_source,
            )
            for b in NODE_BINARIES
        }

    def image(self, component: str, patch: int | None = None) -> str:
        if component not in COMPONENTS:
            raise KeyError(f"{component}: not a Kubernetes component image ({', '.join(COMPONENTS)})")
        return f"{REGISTRY}/{component}:v{self.release(patch)}"

    def _ref(self, repo: str, tag: str, image: str) -> str:
        digest = self.digests.get(image)
        return f"{repo}:{tag}" + (f"@{digest}" if digest else "")

    @property
    def pause_image(self) -> str:
        return self._ref(f"{REGISTRY}/pause", self.pause, "pause")

    @property
    def coredns_image(self) -> str:
        return self._ref(COREDNS_REPO, self.coredns, "coredns")

    @property
    def kube_state_metrics_image(self) -> str:
        return self._ref(KUBE_STATE_METRICS_REPO, self.kube_state_metrics, "kube-state-metrics")


TABLE: dict[str, Release] = {
    r.minor: r
    for r in (
        Release(
            "1.35",
            8,
            "2027-02-28",
            "3.10.1",
            "v1.13.1",
            "v2.19.1",
            "v0.35.7",
            "1.7",
            "v1.35.8",
            "v1.35.2",
            {
                "kubelet": "6971b9f95e54dbed67a2271abe6e78f8cc2894494649f3cf39e4b25a82dca923",
                "kubectl": "874d5e72dbb819f43cff16bcd1e4f8bac5b7f2361fe1e55049b0a6c676fb0cbf",
                "kubeadm": "1bbc64a2be5b300880ae9330c6bba592ec2a2b8ecb79c527b0c7cc0f44070e5e",
            },
            KUBESPRAY,
            {
                "pause": "sha256:278fb9dbcca9518083ad1e11276933a2e96f23de604a3a08cc3c80002767d24c",
                "coredns": None,
                "kube-state-metrics": "sha256:85108987d044b18a098126732f98602df408888c0f7d456241f5abefb9744bc1",
            },
        ),
        Release(
            "1.36",
            4,
            "2027-06-28",
            "3.10.2",
            "v1.14.2",
            "v2.20.0",
            "v0.35.7",
            "2.2",
            "v1.36.5",
            "v1.36.1",
            {
                "kubelet": "cf2562db46c48ab84cc3791540778ee7fb1a0a008529adbb434723dd02ed8b4b",
                "kubectl": "8b8f088da2dab964f853b38464033b1be15ede2839eca751482357c45abdd05a",
                "kubeadm": "10d054585907f2c8bb823c84f6a66b3bd2a474c3d795475f04e9a44f78650fe6",
            },
            KUBESPRAY,
            {
                "pause": "sha256:f548e0e8e3dc1896ca956272154dde3314e8cc4fde0a57577ee9fa1c63f5baf4",
                "coredns": "sha256:e7e6440cfd1e919280958f5b5a6ab2b184d385bba774c12ad2a9e1e4183f90d9",
                "kube-state-metrics": "sha256:42cfe3723a5f058171c627537fb57a3ea0f26e4380fa18555a95cb1a1b4cfc5b",
            },
        ),
        Release(
            "1.37",
            2,
            "2027-10-28",
            "3.10.2",
            "v1.14.6",
            "v2.20.0",
            None,
            "2.2",
            None,
            None,
            {"kubelet": None, "kubectl": None, "kubeadm": None},
            "no stored source pairs v1.37.2's node binaries with a sha256 (kubespray@46dbdd3 stops at 1.36)",
            {
                "pause": "sha256:f548e0e8e3dc1896ca956272154dde3314e8cc4fde0a57577ee9fa1c63f5baf4",
                "coredns": "sha256:900f9c109f7a33545d3c811516e8376df9019147b750f5ce3e254468769176ea",
                "kube-state-metrics": "sha256:42cfe3723a5f058171c627537fb57a3ea0f26e4380fa18555a95cb1a1b4cfc5b",
            },
        ),
    )
}
SUPPORTED: tuple[str, ...] = tuple(TABLE)

ARTIFACTS: dict[str, Artifact] = {
    a.name: a
    for a in (
        Artifact(
            "etcd",
            "3.6.14",
            "https://github.com/etcd-io/etcd/releases/download/v3.6.14/etcd-v3.6.14-linux-amd64.tar.gz",
            "ffe840ff9295808e88cce2794a18a5ac87f12a5203c8314d0bf6aa119b41bac5",
            f"{KUBESPRAY} etcd_binary_checksums.amd64",
        ),
        Artifact(
            "containerd",
            "2.3.6",
            "https://github.com/containerd/containerd/releases/download/v2.3.6/containerd-2.3.6-linux-amd64.tar.gz",
            "df806bb9b86653ebc94822a7076642ff3c3614324dbc1b511bdf75ac1669b762",
            # 2.3.4 is the newest kubespray pairs (9d689698...), but 2.3.5 fixed CVE-2026-53495: the newer
            # release with one public pairing wins over the older vulnerable one; the image build checks it.
            "one public install script pinning the release's .sha256sum (search corpus, 2026-09); the 2.3 LTS line "
            "(containerd RELEASES.md @301026e)",
        ),
        Artifact(
            "runc",
            "1.4.3",
            "https://github.com/opencontainers/runc/releases/download/v1.4.3/runc.amd64",
            "f6ae8efc0fa40079e1475e97cbe9d1bd3f106a28d6af78a11d9f1bd565515e60",
            f"{KUBESPRAY} runc_checksums.amd64; fixes CVE-2025-31133/52565/52881 and CVE-2026-41579 (runc CHANGELOG)",
        ),
        Artifact(
            "cni-plugins",
            "1.9.1",
            "https://github.com/containernetworking/plugins/releases/download/v1.9.1/cni-plugins-linux-amd64-v1.9.1.tgz",
            "b98f74a0f8522f0a83867178729c1aa70f2158f90c45a2ca8fa791db1c76b303",
            f"{KUBESPRAY} cni_binary_checksums.amd64",
        ),
        Artifact(
            "crictl",
            "1.36.0",
            "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/crictl-v1.36.0-linux-amd64.tar.gz",
            "83855e114566a8a8c44c548d515670f51de3a5e1da8b2effb59870e2f10c25a3",
            f"{KUBESPRAY} crictl_checksums.amd64",
        ),
        Artifact(
            "azure-cni",
            "1.6.21",
            "https://github.com/Azure/azure-container-networking/releases/download/v1.6.21/"
            "azure-vnet-cni-linux-amd64-v1.6.21.tgz",
            None,
            "Azure publishes no checksum for its CNI release tarballs (none in any stored source, 2026-12), so the "
            "images build azure-vnet and azure-vnet-ipam from the tagged source, as the release's Makefile does",
            go_module="github.com/Azure/azure-container-networking",
            packages=("cni/network/plugin", "cni/ipam/plugin"),
            ldflags=("-X main.version=v1.6.21",),
        ),
        Artifact(
            "go",
            "1.26.8",
            "https://go.dev/dl/go1.26.8.linux-amd64.tar.gz",
            "d0f743b33e8d8945e6b1f432edd15785c70507121d6e2a723b21285eddf8b57b",
            "go.dev/dl/?mode=json publishes each archive's sha256 (several public pins of this line, search corpus "
            "2026-11); the toolchain the image build compiles Azure CNI with (not installed on the image). Its "
            "modules are checked against the committed go.sum (tools/components/azure-cni), which the Go checksum "
            "database (sum.golang.org) vouches for",
        ),
        Artifact(
            "prometheus",
            "3.13.4",
            "https://github.com/prometheus/prometheus/releases/download/v3.13.4/prometheus-3.13.4.linux-amd64.tar.gz",
            "87f21a66f96c597a189cef8d640e8921b621fc17a9feff707c332c4f3b3ddd56",
            "three public pins of the release's sha256sums.txt line (search corpus, 2026-09/10); 3.13 is the LTS "
            "line supported to July 2027 (3.5 LTS ended 2026-07-31, prometheus.io release cycle)",
        ),
        Artifact(
            "alertmanager",
            "0.34.1",
            "https://github.com/prometheus/alertmanager/releases/download/v0.34.1/alertmanager-0.34.1.linux-amd64.tar.gz",
            "265b9d1e55ef0d5306a436018af6d2b686c2ce051f03d968f7464ecb1372a7e8",
            "four public pins of the release's sha256sums.txt line (search corpus, 2026-09/10)",
        ),
    )
}
"""What every node image installs, whatever the Kubernetes minor (each role takes the rows it needs)."""


@dataclass(frozen=True)
class AptPackage:
    """A package a node image installs from its vendor's apt repository: apt checks the package's sha256 against
    the repository's Release file, which the vendor signs with the key fetched (over HTTPS) at image build."""

    name: str
    version: str
    """The package version, pinned (``apt-get install name=version``) and held."""
    repository: str
    """The ``deb`` line's URI, suite and component."""
    key_url: str
    source: str


APT_PACKAGES: dict[str, AptPackage] = {
    p.name: p
    for p in (
        AptPackage(
            "grafana",
            "13.2.3",
            "https://apt.grafana.com stable main",
            "https://apt.grafana.com/gpg.key",
            "grafana.com/docs/grafana/latest/setup-grafana/installation/debian (the apt repository and its key); "
            "13.2.3 as bootstrap.prometheus.grafana_version pinned it before the image carried it",
        ),
    )
}
"""Packages from vendors' signed apt repositories, by name (the Prometheus image's Grafana)."""

NVIDIA_CONTAINER_TOOLKIT_MIN = "1.17.8"
"""The oldest nvidia-container-toolkit a GPU image may carry: 1.17.8 fixes CVE-2025-23266 (a container escape
through the toolkit's createContainer hook; NVIDIA security bulletin of July 2025). The GPU image's base (the Azure
HPC image) brings the toolkit; its build refuses an older one (modules/images/templates/build-image.sh.j2)."""

DEFAULT_MINOR = "1.36"
"""The newest supported minor every pinned component serves: the gang scheduler within the skew rule (addons.gang is
on by default; 1.37 has none), cloud-provider-azure's release of the minor (none for 1.37), and a verified kubelet
(1.37's is not)."""


ETCD = ARTIFACTS["etcd"].version
"""The etcd release every member runs, and the one the real-etcd and control-plane tests build."""
KWOK = "v0.8.0"
"""kwok, which stands in for kubelets (fake nodes and pods) in the control-plane and scale tiers."""


@dataclass(frozen=True)
class Image:
    """One cluster add-on's container image: the release, its repository and the index digest a source pairs."""

    name: str
    version: str
    repository: str
    digest: str
    source: str
    """Where the release and its digest were read, so a reviewer can check them."""

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.version}@{self.digest}"


KUEUE = Image(
    "kueue",
    "v0.19.5",
    f"{REGISTRY}/kueue/kueue",
    "sha256:a55949705d7ab1fe38034da56c5af95deecec3da0abebb209a372f7a5c414a2d",
    # Newest Kueue release with a published digest in the stored sources (2026-09-17). Kueue's installation
    # page (site/content/en/docs/getting-started/installation.md @v0.19.2) asks for "Kubernetes 1.29 or
    # newer"; v0.19 is built on k8s.io/* v0.36 (its go.mod), so it serves every minor in TABLE. Its webhooks
    # use the internal cert management by default (same page).
    "kubernetes/k8s.io#9955 'Kueue: Promote v0.19.5' (images.yaml, crane digest of kueue:v0.19.5)",
)
"""Kueue: the queues, cohort and Topology Aware Scheduling (modules/cluster/objects/queues.py). The tests build
it from its Go module (tools/components/kueue), the release the proxy serves nearest to this one."""


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
        raise ConfigError(f"{PROJECT}:cluster.kubernetes_version: {err}") from None


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


def check_image_containerd(minor: str) -> None:
    """ConfigError when the node images' containerd (the ``containerd`` row every image installs) is older than
    ``minor``'s kubelet supports: the hosts boot gallery images built from this table, not marketplace images."""
    row = ARTIFACTS["containerd"]
    need = release(minor).containerd_min
    have = ".".join(row.version.split(".")[:2])
    if _line(have) < _line(need):
        raise ConfigError(
            f"{PROJECT}:cluster.kubernetes_version: Kubernetes {minor} needs containerd {need} or newer, but the "
            f"node images install containerd {row.version}: bump the containerd row of modules/bootstrap/versions.py "
            "and rebuild the images, or use an older kubernetes_version"
        )


class Unverified(ConfigError):
    """A row the build needs has no verified sha256."""


def require_verified(rows: dict[str, Artifact], key: str) -> None:
    """ConfigError naming every row of ``rows`` without a verified sha256 (``key``: the config key that chose them)."""
    bad = [a for a in rows.values() if not a.verified]
    if bad:
        names = ", ".join(f"{a.name} {a.version}" for a in bad)
        raise Unverified(
            f"azure-gpu-k8s:{key}: {names}: no verified sha256 in modules/bootstrap/versions.py (a placeholder or none): "
            "add the sha256 the release publishes, with its source, to that row, or choose a version whose row has one"
        )


def unverified_rows(minor: str) -> list[Artifact]:
    """Every row a cluster of ``minor`` relies on that no public source pairs with a sha256."""
    rows = [*release(minor).artifacts().values(), *ARTIFACTS.values()]
    return [a for a in rows if not a.verified]


def in_force(release_: str) -> list[dict[str, str | bool | None]]:
    """Every pinned version a cluster of ``release_`` (``1.36.4``) runs, for the plan: name, version,
    sha256, source, whether it is verified, and (for images) what is pinned by tag only."""
    minor = ".".join(release_.split(".")[:2])
    row = release(minor)
    out: list[dict[str, str | bool | None]] = [
        {
            "name": a.name,
            "version": a.version,
            "sha256": a.sha256,
            "source": a.source,
            "verified": a.verified,
            "checked_by": ("go.sum" if a.go_module else "sha256") if a.verified else "UNVERIFIED",
        }
        for a in (*row.artifacts().values(), *ARTIFACTS.values())
    ]
    images = (("pause", row.pause), ("coredns", row.coredns), ("kube-state-metrics", row.kube_state_metrics))
    for name, tag in images:
        digest = row.digests.get(name)
        out.append(
            {
                "name": name,
                "version": tag,
                "sha256": digest,
                "source": DIGEST_SOURCE if digest else "no public source pairs the tag with a digest: pinned by tag",
                "verified": digest is not None,
                "checked_by": "digest" if digest else "tag",
            }
        )
    return out
