"""An etcd member runs the versions table's upstream etcd from the image, not a distribution package.

The boot steps as the bundle writes them, run by agk-step on a throwaway host (hostsim.py: /etc, /var/lib,
/run and /opt overlaid in a private mount namespace, the image's etcd folder bind-mounted there): the
version check passes the real etcd, etcdctl and etcdutl of the table (tools/bin, built at that release)
and stops the boot, in one line, on another release; the etcd user is created with the real useradd,
once, also where the image has only the group. The one stand-in: the "other release" programs, shell
scripts printing what etcd 3.4's --version prints (this machine has no etcd 3.4, out of support).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap import versions
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import NodeBundle, bundle, names

from .conftest import tool
from .hostsim import in_private_host, private_host

STATE = PATHS.boot_state
OLD = "3.4.30"
"""What Ubuntu's etcd-server package is (noble's 3.4 line): a host booted from a stale image has it."""


def _member(ctx: BootstrapContext) -> NodeBundle:
    return bundle(ctx, "etcd", names(ctx, "etcd")[0])


def _step(node: NodeBundle, name: str) -> str:
    return next(s.runcmd for s in node.steps if s.name == name)


def _image_bin(folder: Path, programs: dict[str, str]) -> Path:
    """The image's etcd folder: program name -> the file it is (a path to link, or a script's text)."""
    folder.mkdir()
    for name, what in programs.items():
        if what.startswith("/"):
            (folder / name).symlink_to(what)
        else:
            (folder / name).write_text(what)
            (folder / name).chmod(0o755)
    return folder


def test_members_install_no_etcd_package_and_check_the_release_first(ctx: BootstrapContext) -> None:
    for role in ("etcd", "events-etcd"):
        for name in names(ctx, role):
            node = bundle(ctx, role, name)
            assert not {"etcd-server", "etcd-client", "etcd"} & set(node.packages), name
            order = [s.name for s in node.steps]
            # The image check first (every role), then the release check: neither retried.
            assert order[:2] == ["image", "etcd-version"] and node.steps[1].tries == 1, order
            assert order.index("etcd-user") < order.index("etcd-data") < order.index("etcd"), order
            assert f"{PATHS.etcd_program('etcdctl')} " in node.file("etcd-joined.sh").content


@pytest.mark.realtool
def test_the_tables_release_passes_and_another_stops_the_boot_in_one_line(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("unshare")
    node = _member(dev)
    good = _image_bin(tmp_path / "good", {p: tool(p) for p in ("etcd", "etcdctl", "etcdutl")})
    stale = _image_bin(
        tmp_path / "stale",
        {
            "etcd": f"#!/bin/sh\necho 'etcd Version: {OLD}'\necho 'Git SHA: Not provided'\n",
            "etcdctl": f"#!/bin/sh\necho 'etcdctl version: {OLD}'\necho 'API version: 3.4'\n",
        },
    )
    host = [*private_host(tmp_path, node), "export AGK_STEP_BACKOFF=0"]
    passed = in_private_host(
        None,
        [*host, f"mount --bind {shlex.quote(str(good))} {PATHS.etcd_bin}", _step(node, "etcd-version"), "ls " + STATE],
    )
    assert "etcd-version.done" in passed.stdout.split()
    assert f"etcd-version: etcd {versions.ETCD}, etcdctl {versions.ETCD}, etcdutl {versions.ETCD}" in passed.stdout

    stopped = in_private_host(
        None,
        [
            *host,
            f"mount --bind {shlex.quote(str(stale))} {PATHS.etcd_bin}",
            f"! {_step(node, 'etcd-version')}",
            f"! {_step(node, 'etcd-user')}",
            f"cat {STATE}/failed",
        ],
    )
    assert stopped.stdout.split() == ["etcd-version"]
    said = [line for line in stopped.stderr.splitlines() if line.startswith("etcd-version:")]
    assert said == [
        f"etcd-version: expected {versions.ETCD} in {PATHS.etcd_bin} (modules/bootstrap/versions.py ETCD), found "
        f"etcd {OLD}, etcdctl {OLD}, etcdutl none: boot this host from an image built from the versions table"
    ]
    assert "agk-boot: etcd-version failed after 1 tries" in stopped.stderr
    assert "agk-boot: etcd-user skipped: step etcd-version failed" in stopped.stderr


@pytest.mark.realtool
@pytest.mark.parametrize("image_has", ["nothing", "the group", "the user"])
def test_the_etcd_user_is_made_once_and_owns_the_data(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, image_has: str
) -> None:
    require("unshare")
    node = _member(dev)
    image = {
        "nothing": [],
        "the group": ["groupadd --system etcd"],
        "the user": ["useradd --system --user-group --no-create-home --shell /usr/sbin/nologin etcd"],
    }[image_has]
    data = f"{PATHS.etcd_mount}/data"
    out = in_private_host(
        None,
        [
            # The key as the host sync writes it (root's), which etcd-pki hands to etcd.
            *private_host(tmp_path, node, {f"{PATHS.etcd_pki}/server.key": "KEY\n"}),
            "export AGK_STEP_BACKOFF=0",
            "! id etcd 2>/dev/null",
            *image,
            _step(node, "etcd-user"),
            f"rm {STATE}/etcd-user.done",
            _step(node, "etcd-user"),  # a later boot, or a retried step
            _step(node, "etcd-data"),
            _step(node, "etcd-pki"),
            "getent passwd etcd | cut -d: -f1,7",
            "id -gn etcd",
            f"stat -c '%U:%G %a' {data}",
            f"stat -c '%U:%G' {PATHS.etcd_pki}/server.key",
            "getent group etcd | wc -l",
        ],
    )
    lines = out.stdout.split("\n")
    assert lines[:5] == ["etcd:/usr/sbin/nologin", "etcd", "etcd:etcd 700", "etcd:etcd", "1"], out.stdout + out.stderr
