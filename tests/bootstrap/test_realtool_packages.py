"""The package steps with the real apt, dpkg and containerd, on throwaway hosts (hostsim.py).

apt-install.sh runs against local flat repositories (file: sources, packages built here with
dpkg-deb, indexes written by hand) beside a broken third-party source, as the HPC image carries
several: a package the image already has is not fetched at all (no `apt-get update`), the kubelet's
step updates only the kubernetes list and falls back to every source when a dependency lives
elsewhere, and a source that fails to update does not fail a step that needs nothing from it.
pin-containerd.sh holds the package that ships containerd and refuses one older than the minor
needs (Debian's containerd here is the 1.6 line).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle
from modules.bootstrap.templating import render

from .hostsim import in_private_host, namespaces, private_host

KUBERNETES_LIST = "/etc/apt/sources.list.d/kubernetes.list"
HOLD_DPKG_LOCK = (
    'import fcntl, time; f = open("/var/lib/dpkg/lock-frontend", "w"); fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(6)'
)
"""dpkg's frontend lock (an fcntl lock, as dpkg and apt take it), held for 6 s."""
REPOS = "/opt/agk-test-repos"


def _deb(repo: Path, name: str, version: str, depends: str = "") -> None:
    """A package with no files (dpkg-deb), listed in the repository's Packages index."""
    root = repo / "build" / name / "DEBIAN"
    root.mkdir(parents=True)
    control = f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: agk tests <t@example.com>\n"
    control += f"Depends: {depends}\n" if depends else ""
    control += "Description: stand-in for a boot step's package\n"
    (root / "control").write_text(control)
    deb = repo / f"{name}_{version}_all.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "--build", str(root.parent), str(deb)], check=True, capture_output=True
    )
    data = deb.read_bytes()
    entry = (
        control.rstrip("\n")
        + f"\nFilename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n\n"
    )
    with (repo / "Packages").open("a") as f:
        f.write(entry)


def _apt_host(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """Shell lines that leave the private host with only our sources; the source list files."""
    kube, archive = tmp / "repo-kubernetes", tmp / "repo-archive"
    for repo in (kube, archive):
        repo.mkdir()
        (repo / "Packages").touch()
    _deb(kube, "agk-kubelet", "1.35.8-1.1", depends="agk-conntrack")
    _deb(archive, "agk-conntrack", "1.4.8-1")
    _deb(archive, "agk-curl", "8.5.0-2")
    # apt's fetchers run as _apt: the repositories live where it can read them (/opt is private here).
    lists = {
        KUBERNETES_LIST: f"deb [trusted=yes] file:{REPOS}/{kube.name} ./\n",
        "/etc/apt/sources.list.d/archive.list": f"deb [trusted=yes] file:{REPOS}/{archive.name} ./\n",
        # A third-party source of the image that is down (or whose key rotated).
        "/etc/apt/sources.list.d/broken.list": f"deb [trusted=yes] file:{REPOS}/gone ./\n",
    }
    lines = [
        "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*",
        "find /var/lib/apt/lists -maxdepth 1 -type f -name '*_*' -delete",
        f"mkdir -p {REPOS} && cp -a {kube} {archive} {REPOS}/ && chmod -R a+rX {REPOS}",
    ]
    return lines, lists


def _apt_test_host(dev: BootstrapContext, require: Callable[[str], str], tmp: Path) -> tuple[str, list[str]]:
    """apt-install.sh's path, and the shell lines that give a private GPU host our sources only."""
    require("unshare")
    require("apt-get")
    require("dpkg-deb")
    setup, lists = _apt_host(tmp)
    host = [
        *private_host(tmp, bundle(dev, "gpu-node", "a100")),
        *setup,
        *(f"printf '%s' '{text}' > {path}" for path, text in lists.items()),
    ]
    return PATHS.script("apt-install.sh"), host


@pytest.mark.realtool
def test_apt_install_skips_what_the_image_has_and_updates_only_what_it_needs(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    apt, host = _apt_test_host(dev, require, tmp_path)
    lines = [
        *host,
        # The image has dpkg: nothing to fetch, so not even the broken source is asked.
        f"{apt} dpkg",
        "test -z \"$(find /var/lib/apt/lists -maxdepth 1 -type f -name '*_*')\"",
        # The kubelet's step: its list first; its dependency is in another source, so every one.
        f"{apt} --list {KUBERNETES_LIST} agk-kubelet=1.35.8-1.1",
        "dpkg-query -W -f='${Version}\\n' agk-kubelet agk-conntrack",
        # Again (a retried step): installed at that version, nothing to do.
        f"{apt} --list {KUBERNETES_LIST} agk-kubelet=1.35.8-1.1",
        # A package from the archive while a third-party source is broken.
        f"{apt} agk-curl",
        "dpkg-query -W -f='${Version}\\n' agk-curl",
    ]
    out = in_private_host(None, lines, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "apt-install: installed already: dpkg" in out.stdout
    assert out.stdout.count("apt-install: installed already: agk-kubelet=1.35.8-1.1") == 1
    assert "alone cannot install agk-kubelet=1.35.8-1.1: updating every source" in out.stderr
    assert "some sources did not update: installing from the rest" in out.stderr
    versions = [line for line in out.stdout.splitlines() if line[:1].isdigit() and " " not in line]
    assert versions == ["1.4.8-1", "1.35.8-1.1", "8.5.0-2"]  # dpkg-query lists agk-conntrack first


@pytest.mark.realtool
def test_the_kubelet_step_updates_only_the_kubernetes_list_when_that_is_enough(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    apt, host = _apt_test_host(dev, require, tmp_path)
    lines = [
        *host,
        f"{apt} agk-conntrack",  # an earlier step: every source (the broken one fails, tolerated)
        f"rm -f {'/etc/apt/sources.list.d/broken.list'}",
        f"printf '%s' 'deb [trusted=yes] file:{REPOS}/gone-too ./\n' > /etc/apt/sources.list.d/later.list",
        "echo '--- the kubelet step'",
        f"{apt} --list {KUBERNETES_LIST} agk-kubelet=1.35.8-1.1 2>&1",
    ]
    out = in_private_host(None, lines, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    kubelet_step = out.stdout.split("--- the kubelet step")[1]
    assert "repo-kubernetes" in kubelet_step
    # Only the kubernetes list was read: the other broken source was never asked.
    assert "gone-too" not in kubelet_step and "updating every source" not in kubelet_step


@pytest.mark.realtool
@pytest.mark.parametrize(("minimum", "accepted"), [("1.6", True), ("1.7", False)])
def test_containerd_is_held_and_must_be_new_enough(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, minimum: str, accepted: bool
) -> None:
    # Debian 12's containerd (1.6.20) stands in for an image's: held when new enough, refused when not.
    require("containerd")
    require("unshare")
    node = bundle(dev, "system-node", "system")
    script = render("pin-containerd.sh.j2", minor="1.35", containerd_min=minimum)
    with namespaces("node") as ns:
        lines = [
            *private_host(tmp_path, node, {"/opt/agk/pin-test.sh": script}),
            "if sh /opt/agk/pin-test.sh; then echo accepted; else echo refused; fi",
            "apt-mark showhold",
        ]
        out = in_private_host(ns["node"], lines)
    stdout = out.stdout.split()
    assert ("accepted" in stdout) is accepted, out.stdout + out.stderr
    assert ("containerd" in stdout) is accepted  # Debian's package that ships /usr/bin/containerd
    if not accepted:
        assert f"containerd 1.6 is older than {minimum}, which Kubernetes 1.35 needs" in out.stderr


def test_every_containerd_host_pins_its_runtime(ctx: BootstrapContext) -> None:
    from modules.bootstrap import versions
    from modules.bootstrap.roles import ROLES, names

    need = versions.release(ctx.kubernetes_minor).containerd_min
    for role in ROLES:
        for name in names(ctx, role)[:1]:
            node = bundle(ctx, role, name)
            if not any(f.path == PATHS.containerd_config for f in node.files):
                continue
            assert f"sh {PATHS.script('pin-containerd.sh')}" in node.file("install-kubernetes.sh").content
            assert f"ge {need}; then" in node.file("pin-containerd.sh").content, role


@pytest.mark.realtool
def test_an_install_that_a_restart_interrupted_is_finished_by_the_next_boot(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """A restart mid-install leaves dpkg's journal (/var/lib/dpkg/updates) and an unconfigured package;
    apt-get refuses every install until `dpkg --configure -a`. The boot steps run again after the
    restart (userdata.PER_BOOT), so the package step must finish what was interrupted."""
    apt, host = _apt_test_host(dev, require, tmp_path)
    archive = f"{REPOS}/repo-archive"
    lines = [
        *host,
        # What the restart left: one package unpacked, not configured, and a journal entry.
        f"dpkg --unpack {archive}/agk-conntrack_1.4.8-1_all.deb >/dev/null",
        ": > /var/lib/dpkg/updates/0000",
        # And another dpkg user (unattended-upgrades at first boot) holds dpkg's lock for a few seconds.
        f"{sys.executable} -c '{HOLD_DPKG_LOCK}' & sleep 1",
        f"{apt} agk-curl",
        "dpkg-query -W -f='${db:Status-Status} ${Package}\\n' agk-conntrack agk-curl",
    ]
    out = in_private_host(None, lines, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "installed agk-conntrack" in out.stdout and "installed agk-curl" in out.stdout, out.stdout
    assert "apt-install: dpkg was interrupted (or is running): finishing it" in out.stderr
    assert "dpkg frontend lock" in out.stderr  # it waited for the other holder instead of failing the step
