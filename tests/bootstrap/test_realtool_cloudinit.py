"""`cloud-init schema` accepts every role's user-data of every cluster stack (the stable bootstrap, with
host facts shaped as a deploy writes them)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host.boot import BOOTED, HostConfig
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.userdata import BOOT_COMMAND, PER_BOOT, offline_host, render_user_data

from .hostsim import nic_metadata


@pytest.mark.realtool
def test_cloud_init_schema_every_role(ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path) -> None:
    cloud_init = require("cloud-init")
    checked = []
    for role in ROLES:
        for name in names(ctx, role):
            path = tmp_path / f"{name}.yaml"
            host = HostConfig(
                role, name, ctx.cluster, "https://agkdev-76edd991.vault.azure.net/", f"{name}-0e02c6c5", str(uuid4())
            )
            path.write_text(render_user_data(ctx, bundle(ctx, role, name), host))
            run = subprocess.run(
                [cloud_init, "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
            )
            assert run.returncode == 0, f"{role} {name}: {run.stdout}{run.stderr}"
            assert "Valid cloud-config" in run.stdout
            checked.append(role)
    assert set(checked) >= {"etcd", "apiserver", "gpu-node", "system-node", "prometheus", "nat"}


@pytest.mark.realtool
def test_cloud_init_schema_rejects_a_broken_document(require: Callable[[str], str], tmp_path: Path) -> None:
    # The check can fail: a wrong type in a known module is refused.
    path = tmp_path / "bad.yaml"
    path.write_text("#cloud-config\npackages: 7\nwrite_files: {path: x}\n")
    run = subprocess.run(
        [require("cloud-init"), "schema", "--config-file", str(path)], capture_output=True, text=True, check=False
    )
    assert run.returncode != 0


@pytest.mark.realtool
def test_install_scripts_parse(ctx: BootstrapContext, require: Callable[[str], str]) -> None:
    for role in ("apiserver", "gpu-node"):
        node = bundle(ctx, role, names(ctx, role)[0])
        for f in node.files:
            if f.path.endswith(".sh") or f.path == "/usr/sbin/policy-rc.d":
                run = subprocess.run(["sh", "-n"], input=f.content, capture_output=True, text=True, check=False)
                assert run.returncode == 0, f"{f.path}: {run.stderr}"


# What the images put in /etc/cloud/cloud.cfg.d before our files arrive: the Azure HPC image
# disables cloud-init networking (Azure/azhpc-images components/disable_cloudinit.sh); Canonical's
# Ubuntu image only names the datasource and lets it configure the network.
IMAGE_CLOUD_CFG = {
    "gpu-node": {"99-disable-network-config.cfg": "network: {config: disabled}\n"},
    "system-node": {"90_dpkg.cfg": "datasource_list: [ Azure ]\n"},
}
HELPER = Path(__file__).with_name("cloudinit_azure_network.py")


def _azure_datasource(cases: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    python = "/usr/bin/python3"  # the interpreter Debian's cloud-init package installs its module for
    run = subprocess.run([python, str(HELPER)], input=json.dumps(cases), capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    return {r["name"]: r for r in json.loads(run.stdout)}


@pytest.mark.realtool
def test_cloud_init_binds_no_pod_ip_on_any_pool(ctx: BootstrapContext, require: Callable[[str], str]) -> None:
    require("cloud-init")
    cases = []
    for pool in ctx.pools:
        ours = bundle(ctx, pool.role, pool.name).file("cloud/15_azure-vnet.cfg").content
        network = nic_metadata(pool)
        cases.append(
            {"name": pool.name, "cfg_d": {**IMAGE_CLOUD_CFG[pool.role], "15_azure-vnet.cfg": ours}, "network": network}
        )
        # The same NIC without our file on the Ubuntu image: the datasource binds every pod IP (the check can fail).
        if pool.role == "system-node":
            cases.append({"name": "without-our-file", "cfg_d": IMAGE_CLOUD_CFG["system-node"], "network": network})
    results = _azure_datasource(cases)
    for pool in ctx.pools:
        ips = [a["privateIpAddress"] for a in nic_metadata(pool)["interface"][0]["ipv4"]["ipAddress"]]  # type: ignore[index]
        bound = {a.split("/")[0] for a in results[pool.name]["addresses"]}  # type: ignore[union-attr]
        assert not bound & set(ips[1:]), f"{pool.name}: pod IPs bound to the host: {sorted(bound & set(ips[1:]))}"
    unguarded = results["without-our-file"]
    system = ctx.pool("system")
    assert len(unguarded["addresses"]) == system.pod_ips  # type: ignore[arg-type]


PER_BOOT_HELPER = Path(__file__).with_name("cloudinit_per_boot.py")


@pytest.mark.realtool
def test_cloud_init_runs_the_boot_on_every_boot_until_the_host_has_booted(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """cloud-init's own write_files and scripts-per-boot code on a host's real user-data: the script lands
    executable where the module looks, runs boot.py (a stand-in that fails, as a fetch that ran out of
    time does) on the first boot and again on the next, and nothing once sync.py has written BOOTED."""
    require("cloud-init")
    node = bundle(dev, "gpu-node", "a100")
    user_data = render_user_data(dev, node, offline_host(dev, node))
    ran, booted = tmp_path / "ran", tmp_path / "var/lib/agk/booted"
    case = {
        "user_data": user_data,
        "root": str(tmp_path),
        "moved": {BOOTED: str(booted), BOOT_COMMAND: f"sh -c 'echo boot >> {ran}; exit 1'"},
        "boots": ["", "", str(booted)],  # a marker path: written before that boot
    }
    run = subprocess.run(
        ["/usr/bin/python3", str(PER_BOOT_HELPER)], input=json.dumps(case), capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["per_boot"] == str(Path(PER_BOOT).parent)
    assert out["modes"][PER_BOOT] == "0o755"
    assert out["boots"][:2] == ["Runparts: 1 failures (agk-boot) in 1 attempted commands"] * 2, out["boots"]
    assert out["boots"][2] == "ok" and ran.read_text() == "boot\nboot\n"
    # The system configuration runs write_files at init and the per-boot scripts at final (Debian's
    # cloud.cfg here; Ubuntu's cloud.cfg.tmpl lists the same modules in the same stages).
    assert "write-files" in out["init_modules"] and "scripts-per-boot" in out["final_modules"]
