"""The boot units converge when IMDS is slow or down, replayed on throwaway hosts (hostsim.py).

systemd itself cannot run here (no PID 1 of our own), so a unit's run is its ExecStart lines run in
order, as systemd runs a oneshot, and a restart (Restart=on-failure) is running them again;
`systemd-analyze verify` checks the units themselves (test_realtool_units). IMDS is the stand-in of
fake_imds.py, failing its first N requests.

- node identity: one run gives up after its bounded tries (so systemd can retry it), the next run
  succeeds; on a later boot with IMDS down, the name the first boot recorded is used.
- pod IPs off the host: a host with one address per interface (the HPC image, every later boot)
  needs no IMDS at all; a host with cloud-init's pod IPs bound waits for IMDS, fails while it is
  down, and removes them on the run after.
"""

from __future__ import annotations

import configparser
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from modules.bootstrap.context import IMDS_API_VERSION, BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle
from modules.bootstrap.roles.parts import IMDS_TRIES, NODE_IDENTITY_UNIT, NODE_NETWORK_UNIT
from modules.bootstrap.roles.pool import NODE_IDENTITY_CACHE

from .hostsim import (
    eth0_with,
    fake_imds,
    in_private_host,
    namespaces,
    network_route,
    nic_ips,
    nic_metadata,
    private_host,
    run,
)

SCALE_SET_ROUTE = f"/metadata/instance/compute/vmScaleSetName?api-version={IMDS_API_VERSION}&format=text"
NETWORK_ROUTE = f"/metadata/instance/network?api-version={IMDS_API_VERSION}"
FAST = "export AGK_IMDS_RETRY_DELAY=1"  # curl's --retry-delay is whole seconds (0 means its own back-off)


def _service(text: str) -> dict[str, str]:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return dict(parser.items("Service"))


@pytest.mark.parametrize("unit", [NODE_NETWORK_UNIT, NODE_IDENTITY_UNIT])
def test_boot_units_retry_until_they_succeed(dev: BootstrapContext, unit: str) -> None:
    service = _service(bundle(dev, "gpu-node", "h100").file(f"systemd/{unit}").content)
    assert service["Type"] == "oneshot"
    # The only Restart= a oneshot accepts besides no (systemd 244+); bounded runs, spaced restarts.
    assert service["Restart"] == "on-failure"
    assert int(service["RestartSec"]) >= 10
    assert service["TimeoutStartSec"] not in ("infinity", "0")


@pytest.mark.realtool
def test_node_identity_gives_up_then_succeeds_on_the_next_run(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("ip")
    require("unshare")
    node = bundle(dev, "gpu-node", "h100")
    script = f"sh {PATHS.script('node-identity.sh')}"
    # IMDS busy for longer than one run asks it: the first run must end (failed), not hang.
    routes = {SCALE_SET_ROUTE: {"body": "h100-07", "fail_first": IMDS_TRIES + 2}}
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, routes):
        lines = [
            *private_host(tmp_path, node),
            FAST,
            f"if {script}; then echo first-run-ok; else echo first-run-failed; fi",
            f"test ! -e {PATHS.kubelet_env}",
            f"{script}",  # systemd's restart: IMDS answers now
            f"cat {PATHS.kubelet_env}",
        ]
        out = in_private_host(ns["node"], lines)
    stdout = out.stdout.strip().splitlines()
    assert stdout[0] == "first-run-failed", out.stdout + out.stderr
    assert stdout[-1].endswith("/ib-island=h100-07"), out.stdout
    assert f"did not answer {IMDS_TRIES} times" in out.stderr


@pytest.mark.realtool
def test_a_reboot_during_an_imds_outage_keeps_the_recorded_island(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("ip")
    require("unshare")
    node = bundle(dev, "gpu-node", "h100")
    script = f"sh {PATHS.script('node-identity.sh')}"
    routes = {SCALE_SET_ROUTE: {"body": "h100-03", "fail_first": 1}}
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, routes):
        first_boot = [*private_host(tmp_path, node), FAST, script, f"cat {NODE_IDENTITY_CACHE}"]
        assert in_private_host(ns["node"], first_boot).stdout.strip().splitlines()[-1] == "h100-03"
    # The reboot: /run is empty again, /var/lib kept (the same overlay upper layer), IMDS down.
    down = {SCALE_SET_ROUTE: {"body": "never", "fail_first": 10_000}}
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, down):
        reboot = [*private_host(tmp_path, node), f"rm -rf {PATHS.run}", FAST, script, f"cat {PATHS.kubelet_env}"]
        out = in_private_host(ns["node"], reboot)
    assert out.stdout.strip().splitlines()[-1].endswith("/ib-island=h100-03"), out.stdout + out.stderr
    assert "using the scale set name this node read on its first boot (h100-03)" in out.stderr


@pytest.mark.realtool
def test_a_host_with_one_address_per_interface_needs_no_imds(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    # The HPC image (cloud-init networking off) and every later boot: IMDS down changes nothing.
    require("ip")
    require("unshare")
    pool = dev.pool("a100")
    node = bundle(dev, "gpu-node", "a100")
    ips = nic_ips(nic_metadata(pool))
    down = {NETWORK_ROUTE: {"body": {}, "fail_first": 10_000}}
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, down):
        eth0_with(ns["node"], ips[:1], pool.subnet.prefixlen)
        lines = [*private_host(tmp_path, node), FAST, f"/usr/bin/python3 {PATHS.script('pod-ips-off-host.py')}"]
        out = in_private_host(ns["node"], lines)
    assert "no pod IP is bound to this host" in out.stdout
    assert "IMDS" not in out.stderr  # never asked


@pytest.mark.realtool
def test_bound_pod_ips_wait_for_imds_and_come_off_on_the_next_run(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("ip")
    require("unshare")
    pool = dev.pool("system")
    node = bundle(dev, "system-node", "system")
    network = nic_metadata(pool)
    ips = nic_ips(network)
    busy = network_route(network)
    busy[NETWORK_ROUTE]["fail_first"] = IMDS_TRIES + 1  # the first run's tries, and one more
    script = f"/usr/bin/python3 {PATHS.script('pod-ips-off-host.py')}"
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, busy):
        eth0_with(ns["node"], ips, pool.subnet.prefixlen)
        first = in_private_host(
            ns["node"], [*private_host(tmp_path, node), "export AGK_IMDS_RETRY_DELAY=0", script], check=False
        )
        still = run("ip", "-j", "-4", "addr", "show", "dev", "eth0", ns=ns["node"]).stdout
        second = in_private_host(ns["node"], [*private_host(tmp_path, node), "export AGK_IMDS_RETRY_DELAY=0", script])
        left = run("ip", "-j", "-4", "addr", "show", "dev", "eth0", ns=ns["node"]).stdout
    # The first run fails (systemd restarts the unit) and removes nothing it cannot name.
    assert first.returncode != 0 and f"did not answer {IMDS_TRIES} times" in first.stderr
    assert len([a for link in json.loads(still) for a in link["addr_info"]]) == len(ips)
    assert "removed pod IP" in second.stdout
    assert [a["local"] for link in json.loads(left) for a in link["addr_info"]] == [ips[0]]
