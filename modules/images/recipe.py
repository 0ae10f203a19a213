"""Each role's image recipe: base image, the versions-table rows it installs and where, its packages.

One recipe per image role and Kubernetes release (``recipe``). The rows are ``modules/bootstrap/versions.py``'s
(``ARTIFACTS`` and the release's kubelet/kubectl), unchanged: a recipe that needs a row without a verified
sha256 is refused with ``versions.require_verified``'s ConfigError naming the row. Where each row lands is
``PLACEMENTS`` (one row per download, with the upstream install instructions it follows); which rows and
packages each role takes is ``ROLE_IMAGES``.

Azure CNI is in the pool images, built from its Go module at image build (Azure publishes no checksum for the
release tarball): the script downloads the table's Go toolchain (checked against go.dev's sha256), writes the
module's go.mod and go.sum (tools/components/azure-cni, generated from the same row: the Go checksum database
vouches for every module hash in it) and builds ``azure-vnet`` and ``azure-vnet-ipam`` with the release's flags,
``-mod=readonly`` so a module whose hash is not in go.sum stops the build. ``AGK_GOPROXY`` points the build at a
module mirror, as ``AGK_ARTIFACT_BASE`` does for downloads.

Distribution packages: every package an image installs is held (``apt-mark hold``). The image is the unit
of change: a host's software is exactly what its manifest lists until the next image roll replaces the host
through the one-at-a-time gates, so a hand-run ``apt-get upgrade`` must not move any of it either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from modules.bootstrap import versions
from modules.bootstrap.roles import Role
from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.images import IMAGE_ROLES, ImageRole
from modules.images.config import GpuBase, ImageConfig, ImagesConfig, gpu_base

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
        "prometheus/prometheus releases' tarball layout (prometheus-<version>.linux-amd64/)",
    ),
    "azure-cni": Placement(
        "unpack",
        "/opt/cni/bin",
        (),
        "Azure/azure-container-networking Makefile (azure-vnet, azure-vnet-ipam into the CNI bin directory); a row "
        "with a Go module is built into it, a test's stand-in row is a tarball unpacked into it",
    ),
    "alertmanager": Placement(
        "extract",
        "/usr/local/bin",
        tuple(f"alertmanager-{{version}}.linux-amd64/{b}" for b in ("alertmanager", "amtool")),
        "prometheus/alertmanager releases' tarball layout (alertmanager-<version>.linux-amd64/)",
    ),
}
"""Where each versions-table row lands, by row name."""

UNIT_DIR = "/usr/local/lib/systemd/system"
"""Where the image installs the base units of the programs it installs from the table: systemd reads it before
/usr/lib/systemd/system (systemd.unit(5), "System Unit Search Path"), so on the HPC image this containerd unit,
not moby-containerd's, is the one the bundle's drop-ins extend."""
UNITS: dict[str, tuple[str, str]] = {
    # containerd/containerd containerd.service (what docs/getting-started.md has one download into
    # /usr/local/lib/systemd/system), as released with 2.x.
    "containerd": (
        "containerd.service",
        """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
""",
    ),
    # kubernetes/release cmd/krel/templates/latest/kubelet/kubelet.service (what the pkgs.k8s.io package
    # installs), running the image's kubelet; the bundle's drop-in gives it its flags.
    "kubelet": (
        "kubelet.service",
        """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/local/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
""",
    ),
}
"""Row name -> (unit file, text): the base unit the image installs with that row (its tarball has none)."""

NOT_IN_IMAGE: dict[str, str] = {}
"""Rows a role needs that its image leaves to the boot, and why: none (the boot installs nothing)."""
TOOLCHAIN = "go"
"""The row whose toolchain builds the rows with a Go module (downloaded into the build's scratch folder only)."""
GO_MODULES = Path(__file__).resolve().parents[2] / "tools" / "components"
"""Where each built row's go.mod and go.sum live (written by tools/components/components.py from the table)."""


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
    """The cluster roles (modules/bootstrap/roles/) that boot this image."""
    left_out: tuple[str, ...] = ()
    """Rows the role needs that stay out of the image (``NOT_IN_IMAGE``)."""
    apt_packages: tuple[str, ...] = ()
    """``versions.APT_PACKAGES`` it installs from their vendors' signed apt repositories (held)."""


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
        (*_CONTAINER_RUNTIME, "cni-plugins", "azure-cni"),
        ("kubelet",),
        ("iptables",),
        ("system-node",),
    ),
    # The Azure HPC base image brings the NVIDIA driver, DCGM, OFED and the container toolkit.
    "gpu-node": RoleImage(
        "gpu", (*_CONTAINER_RUNTIME, "cni-plugins", "azure-cni"), ("kubelet",), ("iptables",), ("gpu-node",)
    ),
    # Grafana beside Prometheus (the platform dashboards): from Grafana's signed apt repository at image build,
    # no longer at every boot.
    "prometheus": RoleImage(
        "general",
        ("prometheus", "alertmanager"),
        (),
        ("prometheus-node-exporter",),
        ("prometheus",),
        apt_packages=("grafana",),
    ),
    "nat": RoleImage(
        "general", _CONTAINER_RUNTIME, ("kubelet",), ("iptables", "conntrack", "prometheus-node-exporter"), ("nat",)
    ),
}
"""Per image role: base, rows, packages. Packages are the roles' minus what the image now installs from the
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
    def built(self) -> bool:
        """Built from its Go module (``go.mod``/``go.sum``), not downloaded."""
        return self.row.go_module is not None

    @property
    def sha256(self) -> str:
        if self.row.sha256 is None:
            assert self.built  # recipe() refuses other rows without one
            return "go.sum"
        return self.row.sha256

    def go_file(self, name: str) -> str:
        """``go.mod`` or ``go.sum`` of the built row (what pins its module and every dependency's hash)."""
        return (GO_MODULES / self.row.name / name).read_text()

    def builds(self) -> tuple[tuple[str, str], ...]:
        """(package path, binary) of the built row."""
        assert self.row.go_module is not None
        return tuple((f"{self.row.go_module}/{p}", self.row.binary(p)) for p in self.row.packages)


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
    toolchain: Install | None = None
    """The Go toolchain that builds the rows with a Go module (None: the recipe builds none)."""
    apt_packages: tuple[versions.AptPackage, ...] = ()
    """Packages from a vendor's signed apt repository, pinned to the table's version and held."""
    gpu_base: GpuBase | None = None
    """The GPU base's driver and DCGM, which the build checks on the base (None: built on the general base)."""

    @property
    def base_kind(self) -> str:
        """``gpu`` for the image built on the GPU base (``images.gpu``), else ``general``."""
        return ROLE_IMAGES[self.role].base

    @property
    def apt_pins(self) -> tuple[str, ...]:
        return tuple(f"{p.name}={p.version}" for p in self.apt_packages)

    @property
    def apt_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.apt_packages)

    @property
    def units(self) -> tuple[tuple[str, str], ...]:
        """(path, text) of the base units of the rows installed (``UNITS``)."""
        return tuple(
            (f"{UNIT_DIR}/{UNITS[i.row.name][0]}", UNITS[i.row.name][1]) for i in self.installs if i.row.name in UNITS
        )

    @property
    def base_urn(self) -> str:
        b = self.base
        return f"{b.publisher}:{b.offer}:{b.sku}:{b.version}"

    def gallery_version(self, build: int) -> str:
        """The Compute Gallery image version of build ``build`` (``gallery_version``)."""
        return gallery_version(self.release, build)

    def manifest(self) -> dict[str, object]:
        """``/etc/agk/image.json``: what a booting host checks its bundle against."""
        return {
            "role": self.role,
            "release": self.release,
            "base": self.base_urn,
            "artifacts": [{"name": i.row.name, "version": i.row.version, "sha256": i.sha256} for i in self.installs],
            "packages": [*self.packages, *self.apt_pins],
            "held": [*self.holds, *self.apt_names],
            "not_in_image": [
                {"name": a.name, "version": a.version, "why": NOT_IN_IMAGE[a.name]} for a in self.left_out
            ],
        }

    def manifest_json(self) -> str:
        return json.dumps(self.manifest(), indent=2, sort_keys=True) + "\n"


def gallery_version(release: str, build: int) -> str:
    """The Compute Gallery image version of ``release``'s build ``build``: ``<minor>.<patch>.<build>`` (1.35.8,
    build 3: 35.8.3). A version name is three integers (learn.microsoft.com/azure/virtual-machines/
    azure-compute-gallery, "Image versions": MajorVersion.MinorVersion.Patch), so the release's leading 1 is
    dropped; a higher minor or patch sorts as a newer version."""
    _, minor, patch = release.split(".")
    return f"{minor}.{patch}.{build}"


def release_of(kubernetes: str) -> str:
    """``1.35`` or ``1.35.8`` -> the release an image of it is built for (``1.35.8``); ConfigError otherwise."""
    return _release(kubernetes).release()


def _release(kubernetes: str) -> versions.Release:
    """``1.35`` or ``1.35.8`` -> the table's row; a patch other than the table's has no verified binaries."""
    parts = kubernetes.split(".")
    minor = ".".join(parts[:2])
    try:
        row = versions.TABLE[versions.check_minor(minor)]
    except ValueError as err:
        raise ConfigError(f"{PROJECT}:{KEY}: {err}") from None
    if len(parts) > 3 or (len(parts) == 3 and not parts[2].isdigit()):
        raise ConfigError(f"{PROJECT}:{KEY}: {kubernetes!r} is not a release: use e.g. {row.release()}")
    if len(parts) == 3 and int(parts[2]) != row.patch:
        raise ConfigError(
            f"{PROJECT}:{KEY}: {kubernetes}: modules/bootstrap/versions.py pairs node binaries with sha256s for "
            f"{row.release()} only: build {row.release()}, or add {kubernetes}'s kubelet/kubectl sha256s to the table"
        )
    return row


def recipe(
    role: ImageRole,
    kubernetes: str,
    *,
    images: ImagesConfig | None = None,
    rows: Mapping[str, versions.Artifact] | None = None,
    key: str = KEY,
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
    versions.require_verified(chosen, key)
    toolchain = None
    if any(a.go_module is not None for a in chosen.values()):
        go = table[TOOLCHAIN]
        versions.require_verified({TOOLCHAIN: go}, key)
        toolchain = Install(go, Placement("unpack", "", (), "go.dev/doc/install"))
    base_images = images or ImagesConfig()
    # Before anything is built: a GPU image only on a base whose driver and DCGM the table knows.
    gpu = gpu_base(base_images.gpu) if spec.base == "gpu" else None
    return Recipe(
        role=role,
        release=release.release(),
        base=base_images.gpu if spec.base == "gpu" else base_images.general,
        installs=tuple(Install(a, PLACEMENTS[a.name]) for a in chosen.values()),
        packages=spec.packages,
        holds=spec.packages,
        left_out=tuple(table[name] for name in spec.left_out),
        toolchain=toolchain,
        apt_packages=tuple(versions.APT_PACKAGES[name] for name in spec.apt_packages),
        gpu_base=gpu,
    )


def image_role(role: Role) -> ImageRole:
    """The image a cluster role boots (events etcd boots the etcd image)."""
    for name, spec in ROLE_IMAGES.items():
        if role in spec.boots:
            return name
    raise KeyError(role)
