"""Each role's image recipe: base image, the versions-table rows it installs and where, its packages.

One recipe per image role and Kubernetes release (``recipe``). The rows are ``modules/bootstrap/versions.py``'s
(``ARTIFACTS`` and the release's kubelet/kubectl), unchanged: a recipe that needs a row without a verified
sha256 is refused with ``versions.require_verified``'s ConfigError naming the row. Where each row lands is
``PLACEMENTS`` (one row per download, with the upstream install instructions it follows); which rows and
packages each role takes is ``ROLE_IMAGES``.

Azure CNI is not in any image. Its row is built from its Go module (Azure publishes no checksum for the
release tarball), and building it at image time would need a Go toolchain row (go.dev/dl's sha256) and the
module proxy reachable from the image builder; neither is in the table yet. So the pools' boot keeps
installing it from the stack's ``node.azure_cni_sha256`` (install-azure-cni.sh), and every manifest names it
under ``not_in_image`` so a host can tell it must still come from the bundle.

Distribution packages: every package an image installs is held (``apt-mark hold``). The image is the unit
of change: a host's software is exactly what its manifest lists until the next image roll replaces the host
through the one-at-a-time gates, so a hand-run ``apt-get upgrade`` must not move any of it either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from modules.bootstrap import versions
from modules.bootstrap.roles import Role
from modules.errors import ConfigError
from modules.images import IMAGE_ROLES, ImageRole
from modules.stackplan.config import ImageConfig, ImagesConfig

KEY = "image_build.kubernetes_version"
"""The config key that chooses the Kubernetes release an image is built for (named in every refusal)."""
MANIFEST = "/etc/agk/image.json"
"""Where every image carries its manifest (role, release, every row's name/version/sha256)."""

GETTING_STARTED = "containerd/containerd docs/getting-started.md (Option 1: official binaries, steps 1-3)"
KUBEADM_NO_PM = (
    "kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/ "
    '("Without a package manager": DOWNLOAD_DIR=/usr/local/bin)'
)


@dataclass(frozen=True)
class Placement:
    """Where one download lands on the image."""

    kind: Literal["file", "extract", "unpack"]
    """``file``: the download is the program, installed at ``dest``; ``extract``: ``members`` of the tarball
    are installed into the directory ``dest``; ``unpack``: the whole tarball is unpacked into ``dest``."""
    dest: str
    members: tuple[str, ...] = ()
    """``extract`` only: paths inside the tarball (``{version}`` is the row's version)."""
    source: str = ""
    """The upstream instructions (or release layout) this placement follows."""

    def paths(self, version: str) -> tuple[str, ...]:
        """The tarball members for ``version`` (``extract``)."""
        return tuple(m.format(version=version) for m in self.members)


PLACEMENTS: dict[str, Placement] = {
    "etcd": Placement(
        "extract",
        "/usr/local/bin",
        tuple(f"etcd-v{{version}}-linux-amd64/{b}" for b in ("etcd", "etcdctl", "etcdutl")),
        "etcd-io/etcd releases: etcd-v<version>-linux-amd64.tar.gz holds etcd, etcdctl, etcdutl under "
        "etcd-v<version>-linux-amd64/ (kubespray roles/etcd installs the same three into /usr/local/bin)",
    ),
    "containerd": Placement("unpack", "/usr/local", (), f"{GETTING_STARTED}: tar Cxzvf /usr/local containerd-*.tar.gz"),
    "runc": Placement(
        "file", "/usr/local/sbin/runc", (), f"{GETTING_STARTED}: install -m 755 runc.amd64 /usr/local/sbin/runc"
    ),
    "cni-plugins": Placement(
        "unpack", "/opt/cni/bin", (), f"{GETTING_STARTED}: tar Cxzvf /opt/cni/bin cni-plugins-*.tgz"
    ),
    "crictl": Placement(
        "extract",
        "/usr/local/bin",
        ("crictl",),
        "kubernetes-sigs/cri-tools docs/crictl.md: tar zxvf crictl-$VERSION-linux-amd64.tar.gz -C /usr/local/bin",
    ),
    "kubelet": Placement("file", "/usr/local/bin/kubelet", (), KUBEADM_NO_PM),
    "kubectl": Placement("file", "/usr/local/bin/kubectl", (), KUBEADM_NO_PM),
    "prometheus": Placement(
        "extract",
        "/usr/local/bin",
        tuple(f"prometheus-{{version}}.linux-amd64/{b}" for b in ("prometheus", "promtool")),
        "prometheus/prometheus releases' tarball layout (as install-prometheus.sh installs it today)",
    ),
    "alertmanager": Placement(
        "extract",
        "/usr/local/bin",
        tuple(f"alertmanager-{{version}}.linux-amd64/{b}" for b in ("alertmanager", "amtool")),
        "prometheus/alertmanager releases' tarball layout (as install-alertmanager.sh installs it today)",
    ),
}
"""Where each versions-table row lands, by row name."""

NOT_IN_IMAGE: dict[str, str] = {
    "azure-cni": "built from its Go module, not downloaded (no published sha256): the pools' boot installs it "
    "(install-azure-cni.sh, node.azure_cni_sha256) until the table has a Go toolchain row to build it with",
}
"""Rows a role needs that its image leaves to the boot, and why (this module's docstring)."""


@dataclass(frozen=True)
class RoleImage:
    """What one image role is built from and installs."""

    base: Literal["general", "gpu"]
    """Which of the cluster's pinned marketplace images (``images.general``/``images.gpu``) it starts from."""
    rows: tuple[str, ...]
    """``versions.ARTIFACTS`` rows, in install order."""
    kubernetes: tuple[str, ...]
    """The release's node binaries (``Release.artifacts()``) it installs, after ``rows``."""
    packages: tuple[str, ...]
    """Distribution packages it installs (and holds)."""
    boots: tuple[Role, ...]
    """The cluster roles (modules/bootstrap/roles.py) that boot this image."""
    left_out: tuple[str, ...] = ()
    """Rows the role needs that stay out of the image (``NOT_IN_IMAGE``)."""


_CONTAINER_RUNTIME = ("containerd", "runc", "crictl")
ROLE_IMAGES: dict[ImageRole, RoleImage] = {
    # etcd and events etcd: the upstream etcd release (not Debian's/Ubuntu's unsupported 3.4 etcd-server).
    "etcd": RoleImage("general", ("etcd",), (), ("prometheus-node-exporter",), ("etcd", "events-etcd")),
    # The API servers run as static pods under the kubelet and containerd, all host network: no CNI plugins.
    "apiserver": RoleImage(
        "general", _CONTAINER_RUNTIME, ("kubelet", "kubectl"), ("prometheus-node-exporter",), ("apiserver",)
    ),
    "system-node": RoleImage(
        "general",
        (*_CONTAINER_RUNTIME, "cni-plugins"),
        ("kubelet",),
        ("iptables",),
        ("system-node",),
        ("azure-cni",),
    ),
    # The Azure HPC base image brings the NVIDIA driver, DCGM, OFED and the container toolkit.
    "gpu-node": RoleImage(
        "gpu", (*_CONTAINER_RUNTIME, "cni-plugins"), ("kubelet",), ("iptables",), ("gpu-node",), ("azure-cni",)
    ),
    "prometheus": RoleImage(
        "general", ("prometheus", "alertmanager"), (), ("prometheus-node-exporter",), ("prometheus",)
    ),
    "nat": RoleImage(
        "general", _CONTAINER_RUNTIME, ("kubelet",), ("iptables", "conntrack", "prometheus-node-exporter"), ("nat",)
    ),
}
"""Per image role: base, rows, packages. Packages are roles.py's minus what the image now installs from the
table (containerd, etcd-server/etcd-client, kubelet) and minus curl/gpg, which only fetched the kubelet's apt
key at boot."""


@dataclass(frozen=True)
class Install:
    """One row an image installs and where it lands."""

    row: versions.Artifact
    placement: Placement

    @property
    def file(self) -> str:
        """The download's file name (the last element of its URL)."""
        return self.row.url.rsplit("/", 1)[-1]

    @property
    def mirror_path(self) -> str:
        """Its path under a mirror (``AGK_ARTIFACT_BASE``): ``<name>/<version>/<file>``."""
        return f"{self.row.name}/{self.row.version}/{self.file}"

    @property
    def sha256(self) -> str:
        assert self.row.sha256 is not None  # recipe() refuses rows without one
        return self.row.sha256


@dataclass(frozen=True)
class Recipe:
    role: ImageRole
    release: str
    """The Kubernetes release (``1.35.8``) the image's kubelet is, and the manifest names."""
    base: ImageConfig
    installs: tuple[Install, ...]
    packages: tuple[str, ...]
    holds: tuple[str, ...]
    left_out: tuple[versions.Artifact, ...]

    @property
    def base_urn(self) -> str:
        b = self.base
        return f"{b.publisher}:{b.offer}:{b.sku}:{b.version}"

    def gallery_version(self, build: int) -> str:
        """The Compute Gallery image version of build ``build``: ``<minor>.<patch>.<build>`` (1.35.8, build 3:
        35.8.3). A version name is three integers (learn.microsoft.com/azure/virtual-machines/
        azure-compute-gallery, "Image versions": MajorVersion.MinorVersion.Patch), so the release's leading 1 is
        dropped; a higher minor or patch sorts as a newer version."""
        _, minor, patch = self.release.split(".")
        return f"{minor}.{patch}.{build}"

    def manifest(self) -> dict[str, object]:
        """``/etc/agk/image.json``: what a booting host checks its bundle against."""
        return {
            "role": self.role,
            "release": self.release,
            "base": self.base_urn,
            "artifacts": [{"name": i.row.name, "version": i.row.version, "sha256": i.sha256} for i in self.installs],
            "packages": list(self.packages),
            "held": list(self.holds),
            "not_in_image": [
                {"name": a.name, "version": a.version, "why": NOT_IN_IMAGE[a.name]} for a in self.left_out
            ],
        }

    def manifest_json(self) -> str:
        return json.dumps(self.manifest(), indent=2, sort_keys=True) + "\n"


def _release(kubernetes: str) -> versions.Release:
    """``1.35`` or ``1.35.8`` -> the table's row; a patch other than the table's has no verified binaries."""
    parts = kubernetes.split(".")
    minor = ".".join(parts[:2])
    try:
        row = versions.TABLE[versions.check_minor(minor)]
    except ValueError as err:
        raise ConfigError(f"azure-gpu-k8s:{KEY}: {err}") from None
    if len(parts) > 3 or (len(parts) == 3 and not parts[2].isdigit()):
        raise ConfigError(f"azure-gpu-k8s:{KEY}: {kubernetes!r} is not a release: use e.g. {row.release()}")
    if len(parts) == 3 and int(parts[2]) != row.patch:
        raise ConfigError(
            f"azure-gpu-k8s:{KEY}: {kubernetes}: modules/bootstrap/versions.py pairs node binaries with sha256s for "
            f"{row.release()} only: build {row.release()}, or add {kubernetes}'s kubelet/kubectl sha256s to the table"
        )
    return row


def recipe(
    role: ImageRole,
    kubernetes: str,
    *,
    images: ImagesConfig | None = None,
    rows: Mapping[str, versions.Artifact] | None = None,
) -> Recipe:
    """The image recipe of ``role`` for Kubernetes ``kubernetes`` (``1.35`` or ``1.35.8``).

    ``images``: the base marketplace images (default: the cluster stacks' defaults). ``rows``: replacement
    rows by name, for tests that serve stand-in downloads; the production recipe takes the table unchanged.
    ConfigError (``versions.Unverified``) naming every row it needs that has no verified sha256.
    """
    if role not in ROLE_IMAGES:
        raise ConfigError(f"image role {role!r} is not known: use one of {', '.join(IMAGE_ROLES)}")
    spec = ROLE_IMAGES[role]
    release = _release(kubernetes)
    table: dict[str, versions.Artifact] = {
        **versions.ARTIFACTS,
        **{name: release.artifacts()[name] for name in spec.kubernetes},
    }
    if rows:
        unknown = sorted(set(rows) - set(table))
        if unknown:
            raise ValueError(f"rows {', '.join(unknown)}: not rows of the versions table")
        table.update(rows)
    chosen = {name: table[name] for name in (*spec.rows, *spec.kubernetes)}
    versions.require_verified(chosen, KEY)
    for a in chosen.values():
        if a.go_module is not None:
            raise ConfigError(
                f"azure-gpu-k8s:{KEY}: {a.name} {a.version} is built from its Go module, which an image build does "
                "not do: leave it to the boot (modules/images/recipe.py NOT_IN_IMAGE)"
            )
    base_images = images or ImagesConfig()
    return Recipe(
        role=role,
        release=release.release(),
        base=base_images.gpu if spec.base == "gpu" else base_images.general,
        installs=tuple(Install(a, PLACEMENTS[a.name]) for a in chosen.values()),
        packages=spec.packages,
        holds=spec.packages,
        left_out=tuple(table[name] for name in spec.left_out),
    )


def image_role(role: Role) -> ImageRole:
    """The image a cluster role boots (events etcd boots the etcd image)."""
    for name, spec in ROLE_IMAGES.items():
        if role in spec.boots:
            return name
    raise KeyError(role)
