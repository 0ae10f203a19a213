"""Fixtures for the bootstrap tests: the shipped cluster stacks' contexts and the real tools."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster

ROOT = Path(__file__).resolve().parents[2]
STACKS = ROOT / "stacks"
CLUSTER_STACKS = ("dev", "prod-7500")

# Programs `make components` builds from Go modules at the versions table's pins (tools/components):
# only these builds count, never a same-named program on PATH (Debian's etcd is the unsupported 3.4).
BUILT = ROOT / "tools" / "bin"
COMPONENTS = (
    "etcd",
    "etcdctl",
    "etcdutl",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "gang-scheduler",
    "kueue",
    "kube-state-metrics",
    "azure-vnet",
    "azure-vnet-ipam",
    "azure-wi-webhook",
    "prometheus",
    "promtool",
    "kube-network-policies",
)
# Program -> the Debian package that ships it (.ci/apt-packages.txt).
PACKAGES = {
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "cloud-init": "cloud-init",
    "iptables": "iptables",
    "iptables-save": "iptables",
    "ip": "iproute2",
    "containerd": "containerd",
    "systemd-analyze": "systemd",
    "unshare": "util-linux",
    "chroot": "coreutils",
    "openssl": "openssl",
    "apt-get": "apt",
    "dpkg-deb": "dpkg",
    "debootstrap": "debootstrap",
}


def context(stack: str) -> BootstrapContext:
    """What the cluster program boots its nodes with (its own prepare step, not a copy of it)."""
    return prepare_cluster(stack, load_stack(STACKS, stack), STACKS).bootstrap


@pytest.fixture(scope="session", params=CLUSTER_STACKS)
def ctx(request: pytest.FixtureRequest) -> BootstrapContext:
    return context(request.param)


@pytest.fixture(scope="session")
def dev() -> BootstrapContext:
    return context("dev")


@pytest.fixture(scope="session")
def prod() -> BootstrapContext:
    return context("prod-7500")


def tool(name: str) -> str:
    """The path of a real program the test drives; a missing one fails (never skips)."""
    where = "CI requires it" if os.environ.get("CI") == "true" else "the real-tool tests need it"
    if name in COMPONENTS:
        built = BUILT / name
        if not built.is_file():
            pytest.fail(f"{built} is not built ({where}): run make components (needs Go)", pytrace=False)
        return str(built)
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.fail(f"{name} is not installed ({where}): apt-get install {PACKAGES[name]}", pytrace=False)
    return path


@pytest.fixture
def require() -> Callable[[str], str]:
    return tool
