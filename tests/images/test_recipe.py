"""Image recipes per role (pure): rows from the versions table unchanged, where each lands, the packages
held, the manifest, the refusals (exact text), and the rendered build script's lines."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from modules.bootstrap import versions
from modules.errors import ConfigError
from modules.images.build import APT_CONF, NEEDRESTART_CONF, script
from modules.images.config import GPU_BASES, UBUNTU_2404, UBUNTU_HPC_2404, ImageConfig, ImagesConfig
from modules.images.recipe import IMAGE_ROLES, MANIFEST, image_role, recipe

GENERAL = ":".join(UBUNTU_2404[k] for k in ("publisher", "offer", "sku", "version"))
GPU = ":".join(UBUNTU_HPC_2404[k] for k in ("publisher", "offer", "sku", "version"))

EXPECTED = {
    # role: (base, [(row, kind, dest)], packages)
    "etcd": (GENERAL, [("etcd", "extract", "/usr/local/bin")], ("prometheus-node-exporter",)),
    "apiserver": (
        GENERAL,
        [
            ("containerd", "unpack", "/usr/local"),
            ("runc", "file", "/usr/local/sbin/runc"),
            ("crictl", "extract", "/usr/local/bin"),
            ("kubelet", "file", "/usr/local/bin/kubelet"),
            ("kubectl", "file", "/usr/local/bin/kubectl"),
        ],
        ("prometheus-node-exporter",),
    ),
    "system-node": (
        GENERAL,
        [
            ("containerd", "unpack", "/usr/local"),
            ("runc", "file", "/usr/local/sbin/runc"),
            ("crictl", "extract", "/usr/local/bin"),
            ("cni-plugins", "unpack", "/opt/cni/bin"),
            ("azure-cni", "unpack", "/opt/cni/bin"),
            ("kubelet", "file", "/usr/local/bin/kubelet"),
        ],
        ("iptables",),
    ),
    "gpu-node": (
        GPU,
        [
            ("containerd", "unpack", "/usr/local"),
            ("runc", "file", "/usr/local/sbin/runc"),
            ("crictl", "extract", "/usr/local/bin"),
            ("cni-plugins", "unpack", "/opt/cni/bin"),
            ("azure-cni", "unpack", "/opt/cni/bin"),
            ("kubelet", "file", "/usr/local/bin/kubelet"),
        ],
        ("iptables",),
    ),
    "prometheus": (
        GENERAL,
        [("prometheus", "extract", "/usr/local/bin"), ("alertmanager", "extract", "/usr/local/bin")],
        ("prometheus-node-exporter",),
    ),
    "nat": (
        GENERAL,
        [
            ("containerd", "unpack", "/usr/local"),
            ("runc", "file", "/usr/local/sbin/runc"),
            ("crictl", "extract", "/usr/local/bin"),
            ("kubelet", "file", "/usr/local/bin/kubelet"),
        ],
        ("iptables", "conntrack", "prometheus-node-exporter"),
    ),
}


@pytest.mark.parametrize("role", IMAGE_ROLES)
def test_recipe_per_role(role: str) -> None:
    base, rows, packages = EXPECTED[role]
    r = recipe(role, "1.35")  # type: ignore[arg-type]
    assert r.base_urn == base
    assert [(i.row.name, i.placement.kind, i.placement.dest) for i in r.installs] == rows
    assert r.packages == packages
    assert r.holds == packages, "every distribution package an image installs is held"
    assert r.release == "1.35.8"
    # The table's rows, unchanged: version, URL and sha256.
    table = {**versions.ARTIFACTS, **versions.TABLE["1.35"].artifacts()}
    for i in r.installs:
        assert i.row == table[i.row.name]
        # A row built from its Go module is pinned by the committed go.sum, not a download's sha256.
        assert i.sha256 == (table[i.row.name].sha256 or "go.sum")


def test_etcd_members_and_no_ubuntu_etcd() -> None:
    (etcd,) = recipe("etcd", "1.35").installs
    assert etcd.row.version == versions.ETCD == "3.6.14"
    assert etcd.placement.paths(etcd.row.version) == (
        "etcd-v3.6.14-linux-amd64/etcd",
        "etcd-v3.6.14-linux-amd64/etcdctl",
        "etcd-v3.6.14-linux-amd64/etcdutl",
    )
    assert etcd.mirror_path == "etcd/3.6.14/etcd-v3.6.14-linux-amd64.tar.gz"
    for role in IMAGE_ROLES:
        packages = recipe(role, "1.36").packages  # type: ignore[arg-type]
        assert not {"etcd-server", "etcd-client", "containerd", "kubelet"} & set(packages)


def test_azure_cni_is_built_into_the_pool_images() -> None:
    """Azure publishes no checksum for its CNI tarball: the pool images build it from its Go module with the
    table's Go toolchain (sha256 checked) and the committed go.sum, under -mod=readonly; nothing is left to the
    boot."""
    for role in ("system-node", "gpu-node"):
        r = recipe(role, "1.35")
        assert r.left_out == ()
        cni = next(i for i in r.installs if i.row.name == "azure-cni")
        assert cni.built and cni.sha256 == "go.sum"
        assert r.toolchain is not None and r.toolchain.row.name == "go" and r.toolchain.row.verified
        text = script(r)
        assert f"fetch go {r.toolchain.row.version} {r.toolchain.row.url} {r.toolchain.row.sha256}" in text
        assert "-mod=readonly" in text and "-o /opt/cni/bin/azure-vnet github.com/Azure/" in text
        assert "-o /opt/cni/bin/azure-vnet-ipam github.com/Azure/azure-container-networking/cni/ipam/plugin" in text
        assert "github.com/Azure/azure-container-networking v1.6.21" in text  # the go.mod, embedded
        assert r.manifest()["not_in_image"] == []
    # Roles that build nothing do not download the toolchain.
    assert recipe("etcd", "1.35").toolchain is None


def test_cluster_roles_map_to_images() -> None:
    assert image_role("events-etcd") == "etcd"
    assert image_role("etcd") == "etcd"
    assert image_role("gpu-node") == "gpu-node"


def test_unverified_kubelet_is_refused_with_the_row_named() -> None:
    with pytest.raises(versions.Unverified) as err:
        recipe("apiserver", "1.37")
    assert str(err.value) == (
        "azure-gpu-k8s:image_build.kubernetes_version: kubelet 1.37.2, kubectl 1.37.2: no verified sha256 in "
        "modules/bootstrap/versions.py (a placeholder or none): add the sha256 the release publishes, with its "
        "source, to that row, or choose a version whose row has one"
    )
    # An image without the kubelet does not need 1.37's binaries.
    assert recipe("etcd", "1.37").release == "1.37.2"


def test_placeholder_sha256_is_refused() -> None:
    zeros = replace(versions.ARTIFACTS["runc"], sha256=versions.ZEROS)
    with pytest.raises(ConfigError, match=r"^azure-gpu-k8s:image_build.kubernetes_version: runc 1\.4\.3: no verified"):
        recipe("nat", "1.35", rows={"runc": zeros})


def test_release_refusals() -> None:
    with pytest.raises(ConfigError) as err:
        recipe("apiserver", "1.35.7")
    assert str(err.value) == (
        "azure-gpu-k8s:image_build.kubernetes_version: 1.35.7: modules/bootstrap/versions.py pairs node binaries "
        "with sha256s for 1.35.8 only: build 1.35.8, or add 1.35.7's kubelet/kubectl sha256s to the table"
    )
    with pytest.raises(ConfigError) as err:
        recipe("apiserver", "1.34")
    assert str(err.value) == (
        "azure-gpu-k8s:image_build.kubernetes_version: kubernetes_version '1.34' is not supported: use 1.35, 1.36 or 1.37"
    )
    assert recipe("apiserver", "1.36.4").release == "1.36.4"


def test_manifest() -> None:
    r = recipe("nat", "1.36")
    m = json.loads(r.manifest_json())
    assert m["role"] == "nat"
    assert m["release"] == "1.36.4"
    assert m["base"] == GENERAL
    assert m["artifacts"] == [
        {"name": a.name, "version": a.version, "sha256": a.sha256}
        for a in (
            versions.ARTIFACTS["containerd"],
            versions.ARTIFACTS["runc"],
            versions.ARTIFACTS["crictl"],
            versions.TABLE["1.36"].artifacts()["kubelet"],
        )
    ]
    assert m["held"] == ["iptables", "conntrack", "prometheus-node-exporter"]


def test_rendered_script_lines() -> None:
    r = recipe("etcd", "1.35")
    text = script(r)
    lines = text.splitlines()
    etcd = versions.ARTIFACTS["etcd"]
    assert lines[0] == "#!/bin/bash"
    assert "set -eu" in lines
    fetch = f"fetch etcd 3.6.14 {etcd.url} {etcd.sha256} etcd-v3.6.14-linux-amd64.tar.gz"
    assert fetch in lines
    assert '  if ! echo "$4  $work/$5" | sha256sum -c --status -; then' in lines
    assert '    fail "$1 $2: sha256 mismatch for $url: expected $4, got $got"' in lines
    assert '  if [ -n "$mirror" ]; then url="${mirror%/}/$1/$2/$5"; fi' in lines
    assert "mirror=${AGK_ARTIFACT_BASE:-}" in lines
    install = "apt-get -q -y install --no-install-recommends prometheus-node-exporter"
    hold = "apt-mark hold prometheus-node-exporter"
    assert install in lines and hold in lines
    assert 'APT::Periodic::Enable "0";' in lines
    assert '  "^prometheus-node-exporter$";' in lines
    assert "$nrconf{restart} = 'l';" in lines
    for unit in ("etcd", "kubelet", "containerd"):
        assert f"$nrconf{{override_rc}}{{qr(^{unit}\\.service$)}} = 0;" in lines
    assert f"cat > {APT_CONF} <<'AGK_EOF'" in lines
    assert f"cat > {NEEDRESTART_CONF} <<'AGK_EOF'" in lines
    # Order: every row before the packages, the packages before the manifest, the manifest last.
    manifest = f"cat > {MANIFEST} <<'AGK_EOF'"
    assert lines.index(fetch) < lines.index(install) < lines.index(hold) < lines.index(manifest)
    assert text.split(manifest + "\n", 1)[1].split("AGK_EOF\n", 1)[0] == r.manifest_json()


def test_rendered_scripts_parse() -> None:
    bash = shutil.which("bash")
    assert bash, "bash is needed to parse the rendered scripts"
    for role in IMAGE_ROLES:
        subprocess.run([bash, "-n"], input=script(recipe(role, "1.36")), text=True, check=True)  # type: ignore[arg-type]


def test_production_rendering_takes_the_table_unchanged() -> None:
    text = script(recipe("gpu-node", "1.36"))
    for a in (*(versions.ARTIFACTS[n] for n in ("containerd", "runc", "crictl", "cni-plugins")),):
        assert f"fetch {a.name} {a.version} {a.url} {a.sha256} " in text
    kubelet = versions.TABLE["1.36"].artifacts()["kubelet"]
    assert f"fetch kubelet 1.36.4 {kubelet.url} {kubelet.sha256} kubelet" in text
    assert "azure-cni" not in text.split("/etc/agk/image.json")[0]


BASE = GPU_BASES[UBUNTU_HPC_2404["version"]]


@pytest.mark.parametrize(
    ("toolkit", "driver", "dcgm", "error"),
    [
        (
            "1.17.3",
            BASE.driver,
            BASE.dcgm,
            "nvidia-container-toolkit 1.17.3 on the base image is older than 1.17.8 (CVE-2025-23266): pin a newer "
            "images.gpu",
        ),
        ("1.17.8", BASE.driver, BASE.dcgm, None),
        ("1.18.0", BASE.driver, BASE.dcgm, None),
        (
            "1.18.0",
            "560.35.03",
            BASE.dcgm,
            f"the base image's NVIDIA driver is '560.35.03', not {BASE.driver} as GPU_BASES says for images.gpu "
            f"{UBUNTU_HPC_2404['version']}: correct the row or pin another images.gpu",
        ),
        (
            "1.18.0",
            BASE.driver,
            "3.3.7",
            f"the base image's DCGM is '3.3.7', not {BASE.dcgm} as GPU_BASES says for images.gpu "
            f"{UBUNTU_HPC_2404['version']}: correct the row or pin another images.gpu",
        ),
    ],
)
def test_the_gpu_image_checks_its_base_and_masks_docker(
    tmp_path: Path, toolkit: str, driver: str, dcgm: str, error: str | None
) -> None:
    """The GPU image's base check, run by bash with stand-in nvidia-ctk, modinfo, dcgmi and systemctl (no GPU
    here): CVE-2025-23266 is fixed in nvidia-container-toolkit 1.17.8, and the base's driver and DCGM are the
    table's; any other base stops the build, naming what it found."""
    text = script(recipe("gpu-node", "1.35"))
    start, end = text.index("# The HPC base image"), text.index("# No surprise restarts")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-ctk").write_text(f"#!/bin/sh\necho 'NVIDIA Container Toolkit CLI version {toolkit}'\n")
    # modinfo -F version nvidia; dcgmi --version prints TCLAP's "<name>  version: <v>" (NVIDIA/DCGM dcgmi).
    (bin_dir / "modinfo").write_text(f'#!/bin/sh\n[ "$*" = "-F version nvidia" ] && echo {driver}\n')
    (bin_dir / "dcgmi").write_text(f"#!/bin/sh\necho\necho 'dcgmi  version: {dcgm}'\necho\n")
    (bin_dir / "systemctl").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/systemctl.log\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    prelude = 'fail() { echo "agk image build (gpu-node): $*" >&2; exit 1; }\n'
    done = subprocess.run(
        ["bash", "-euc", prelude + text[start:end]],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode == 0) is (error is None), done.stderr
    if error is None:
        assert "mask docker.service" in (tmp_path / "systemctl.log").read_text()
    else:
        assert done.stderr == f"agk image build (gpu-node): {error}\n"
    assert "nvidia-ctk" not in script(recipe("system-node", "1.35"))


def test_a_gpu_image_on_a_base_the_table_does_not_know_is_refused() -> None:
    old = ImagesConfig(gpu=ImageConfig(**{**UBUNTU_HPC_2404, "version": "22.04.2024102301"}))
    with pytest.raises(ConfigError, match=r"^azure-gpu-k8s:images.gpu.version: 22.04.2024102301 is not a known GPU"):
        recipe("gpu-node", "1.35", images=old)
    recipe("system-node", "1.35", images=old)  # the general images do not read it
