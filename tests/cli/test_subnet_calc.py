"""`subnet-calc` through the installed console script: the reference table, plans, bad input."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agk.subnet_calc import plan_json
from modules.address_plan.limits import DEFAULTS
from modules.address_plan.subnet_sizes import size

# ---- small stack files for `plan`: a hub and one cluster spoke, edited per case ----

P = "azure-gpu-k8s"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHk8H1r0WwzGqP2nVqk6dZ1iF3y0b3sYwJ4cN8m2Xq7v test@example"
_COMMON: dict[str, Any] = {
    f"{P}:location": "eastus2",
    f"{P}:tags": {"owner": "t", "cost_center": "c"},
    f"{P}:admin": {"username": "azureuser", "ssh_public_keys": [KEY]},
}


def hub(space: str = "10.0.0.0/22") -> dict[str, Any]:
    return {
        f"{P}:kind": "hub",
        **copy.deepcopy(_COMMON),
        f"{P}:network": {"address_space": [space]},
        f"{P}:hub": {"bastion": True, "jump_hosts": 1},
    }


def cluster(name: str, space: str, service: str = "172.20.0.0/16", nodes: int = 4, pod_ips: int = 30) -> dict[str, Any]:
    return {
        f"{P}:kind": "cluster",
        **copy.deepcopy(_COMMON),
        f"{P}:network": {"address_space": [space]},
        f"{P}:cluster": {
            "name": name,
            "hub_stack": "hub",
            "service_cidr": service,
            "system_pool": {"vm_size": "Standard_D8ds_v5", "nodes": 2, "pod_ips": 30},
            "gpu_pools": {"h100": {"vm_size": "Standard_ND96isr_H100_v5", "nodes": nodes, "pod_ips": pod_ips}},
        },
    }


Edit = Callable[[dict[str, dict[str, Any]]], None]


def write(root: Path, edit: Edit | None = None) -> Path:
    """Write hub + `dev` (10.16.0.0/20) after ``edit`` changed the configs; returns the stacks dir."""
    stacks: dict[str, dict[str, Any]] = {"hub": hub(), "dev": cluster("dev", "10.16.0.0/20")}
    if edit is not None:
        edit(stacks)
    root.mkdir(parents=True, exist_ok=True)
    for name, config in stacks.items():
        (root / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return root


ROOT = Path(__file__).resolve().parents[2]
CALC = Path(sys.executable).parent / "subnet-calc"


def calc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CALC), *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


# The reference table (AKS IP planning: kubenet nodes + 1, Azure CNI (nodes + 1) x (1 + max pods);
# learn.microsoft.com/azure/aks/concepts-network-ip-address-planning), plus the 5,000 + 1 surge case.
REFERENCE = [
    (["--plugin", "kubenet", "--nodes", "50"], 51, 26, 59, []),
    (["--plugin", "kubenet", "--nodes", "4999"], 5000, 19, 8187, ["kubenet-node-limit", "vmss-instance-limit"]),
    (["--plugin", "azure-cni", "--nodes", "50", "--max-pods", "250"], 12801, 18, 16379, []),
    (
        ["--plugin", "azure-cni", "--nodes", "4999", "--max-pods", "250"],
        1255000,
        11,
        2097147,
        ["vnet-private-ip-limit", "vmss-instance-limit"],
    ),
    (
        ["--plugin", "azure-cni", "--nodes", "5000", "--max-pods", "250"],
        1255251,
        11,
        2097147,
        ["vnet-private-ip-limit", "vmss-instance-limit", "lb-backend-pool-limit", "cluster-node-limit"],
    ),
]


@pytest.mark.parametrize(("args", "needed", "prefix", "usable", "codes"), REFERENCE)
def test_reference_table_through_the_cli(
    args: list[str], needed: int, prefix: int, usable: int, codes: list[str]
) -> None:
    done = calc("size", *args, "--surge", "1", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    doc = json.loads(done.stdout)
    assert (doc["vnet_ips_needed"], doc["prefix_length"], doc["usable_ips"]) == (needed, prefix, usable)
    assert [w["code"] for w in doc["warnings"]] == codes
    assert doc["subnet"] is None and doc["surge_nodes"] == 1
    # The function gives the same answer as the command.
    plugin, nodes = args[1], int(args[3])
    pods = int(args[5]) if len(args) > 4 else None
    assert size(plugin, nodes, max_pods=pods, surge=1).to_dict() == doc


def test_size_text_output() -> None:
    done = calc("size", "--plugin", "azure-cni", "--nodes", "4999", "--max-pods", "250")
    assert done.returncode == 0
    assert done.stdout == (
        "plugin            azure-cni\n"
        "nodes             4,999 + 1 surge\n"
        "max pods          250\n"
        "VNet IPs needed   1,255,000\n"
        "subnet            /11 (2,097,147 usable)\n"
        "IP configs / NIC  251\n"
        "warnings          \n"
        "  [vnet-private-ip-limit] 1,255,000 private IPs exceed the 65,536 one VNet holds "
        "(a hard Azure limit): lower max pods or split the workload across clusters (subnet-calc fit prints what fits)\n"
        "  [vmss-instance-limit] 5,000 nodes exceed the 1,000 VMs of one scale set: the pool needs 5 scale sets\n"
    )


def test_size_json_contract_for_pod_subnet_and_overlay() -> None:
    pod = json.loads(calc("size", "--plugin", "azure-cni-pod-subnet", "--nodes", "10", "--format", "json").stdout)
    assert pod["pod_subnet"] == {"ips_needed": 11 * 112, "prefix_length": 21, "usable_ips": 2043}
    overlay = json.loads(calc("size", "--plugin", "azure-cni-overlay", "--nodes", "10", "--format", "json").stdout)
    assert overlay["pod_cidr"] == {"prefix_length": 20} and overlay["vnet_ips_needed"] == 11


def test_max_pods_out_of_range_is_a_warning_for_size() -> None:
    done = calc("size", "--plugin", "azure-cni", "--nodes", "3", "--max-pods", "300", "--format", "json")
    assert done.returncode == 0
    assert [w["code"] for w in json.loads(done.stdout)["warnings"]] == ["max-pods-range", "nic-ip-config-limit"]


@pytest.mark.parametrize("stack", ["hub", "dev", "prod-7500"])
def test_plan_formats_agree(stack: str) -> None:
    done = calc("plan", "--stack", stack, "--format", "json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc == plan_json(stack, ROOT / "stacks")
    vnet = doc["vnets"][0]
    assert set(vnet) >= {"name", "cidr", "ips_needed", "usable_ips", "utilization", "subnets"}
    assert all(set(s) >= {"name", "cidr", "role", "ips_needed", "usable_ips"} for s in vnet["subnets"])
    text = calc("plan", "--stack", stack).stdout
    markdown = calc("plan", "--stack", stack, "--format", "markdown").stdout
    for subnet in vnet["subnets"]:
        assert subnet["cidr"] in text and f"`{subnet['cidr']}`" in markdown


def test_prod_plan_fits_azures_hard_limits_without_overrides() -> None:
    doc = json.loads(calc("plan", "--stack", "prod-7500", "--format", "json").stdout)
    assert doc["limits"] == []  # no override of any limit, hard or not
    (vnet,) = doc["vnets"]
    assert vnet["ips_needed"] <= doc["vnet_ip_limit"]["value"] == 65_536
    hub_group = next(g for g in doc["peered_groups"] if g["vnet"] == "hub")
    assert sorted(hub_group["members"]) == ["dev", "hub", "prod-7500"]
    assert hub_group["ips_needed"] <= hub_group["limit"]["value"] == 128_000
    # The hub's group is the sum of every VNet in it, each planned by the same rules.
    plans = {name: json.loads(calc("plan", "--stack", name, "--format", "json").stdout) for name in ("hub", "dev")}
    assert hub_group["ips_needed"] == vnet["ips_needed"] + sum(p["vnets"][0]["ips_needed"] for p in plans.values())
    # Each GPU pool subnet holds (nodes + surge) x (1 + pod IPs): 1,875 + 1% (19) at 1 + 7.
    gpu = [s for s in vnet["subnets"] if s["role"] == "gpu-pool"]
    assert [s["ips_needed"] for s in gpu] == [(1875 + 19) * (1 + 7)] * 4
    assert vnet["utilization"] >= 0.90
    assert doc["warnings"] == []
    text = calc("plan", "--stack", "prod-7500").stdout
    assert f"VNet prod-7500: {vnet['ips_needed']:,} of 65,536 private IPs (vnet-private-ips)" in text
    assert f"peered group of hub (hub + dev + prod-7500): {hub_group['ips_needed']:,} of 128,000" in text


def test_plan_with_more_pod_ips_says_the_vnet_cannot_hold_it(tmp_path: Path) -> None:
    source = (ROOT / "stacks" / "Pulumi.prod-7500.yaml").read_text()
    (tmp_path / "Pulumi.prod-7500.yaml").write_text(
        source.replace("10.64.0.0/16", "10.64.0.0/14")
        .replace("10.65.0.0/22", "10.68.0.0/22")
        .replace("pod_ips: 7", "pod_ips: 26")
    )
    (tmp_path / "Pulumi.hub.yaml").write_text((ROOT / "stacks" / "Pulumi.hub.yaml").read_text())
    done = calc("plan", "--stack", "prod-7500", "--stacks-dir", str(tmp_path), "--format", "json")
    assert done.returncode == 0
    # Its VNet, its own peered group (with the hub) and the hub's (with every spoke) all break.
    assert [w["code"] for w in json.loads(done.stdout)["warnings"]] == [
        "vnet-private-ip-limit",
        "peered-group-ip-limit",
        "peered-group-ip-limit",
    ]


# ---- bad input: exit 2, one line on stderr naming the value and the fix, nothing on stdout ----

SIZE_BAD = [
    (["--plugin", "kubenet", "--nodes", "0"], "--nodes: 0 is not a positive count: use a node count like 50"),
    (["--plugin", "kubenet", "--nodes", "-5"], "--nodes: -5 is not a positive count: use a node count like 50"),
    (["--plugin", "kubenet", "--nodes", "abc"], "--nodes: 'abc' is not a whole number: use a node count like 50"),
    (["--plugin", "kubenet", "--nodes", "2.5"], "--nodes: '2.5' is not a whole number: use a node count like 50"),
    (
        ["--plugin", "kubenet", "--nodes", "5", "--surge", "abc"],
        "--surge: 'abc' is not a count or a percentage: use e.g. 1 or 10%",
    ),
    (
        ["--plugin", "kubenet", "--nodes", "5", "--surge", "150%"],
        "--surge: 150% is over 100%: use a percentage from 0% to 100%",
    ),
    (
        ["--plugin", "kubenet", "--nodes", "5", "--surge", "1.5"],
        "--surge: '1.5' is not a count or a percentage: use e.g. 1 or 10%",
    ),
    (
        ["--plugin", "azure-cni", "--nodes", "5", "--max-pods", "abc"],
        "--max-pods: 'abc' is not a whole number: use 10 to 250",
    ),
    (
        ["--plugin", "azure-cni", "--nodes", "5", "--max-pods", "0"],
        "--max-pods: 0 is not a positive count: use 10 to 250",
    ),
    (
        ["--plugin", "calico", "--nodes", "5"],
        "argument --plugin: invalid choice: 'calico' (choose from 'kubenet', 'azure-cni', 'azure-cni-pod-subnet', "
        "'azure-cni-overlay'): see 'subnet-calc size --help'",
    ),
    (["--plugin", "kubenet"], "the following arguments are required: --nodes: see 'subnet-calc size --help'"),
    (
        ["--plugin", "kubenet", "--nodes", "5", "--colour", "x"],
        "unrecognized arguments: --colour x: see 'subnet-calc --help'",
    ),
    (
        ["--plugin", "kubenet", "--nodes", "5", "--format", "yaml"],
        "argument --format: invalid choice: 'yaml' (choose from 'text', 'json'): see 'subnet-calc size --help'",
    ),
    (["--plugin", "kubenet", "--nodes"], "argument --nodes: expected one argument: see 'subnet-calc size --help'"),
]


def _assert_one_line_error(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr == f"error: {message}\n"


@pytest.mark.parametrize(("args", "message"), SIZE_BAD)
def test_size_bad_input(args: list[str], message: str) -> None:
    _assert_one_line_error(calc("size", *args), message)


def _net(stack: str) -> Callable[[dict[str, dict[str, Any]]], dict[str, Any]]:
    return lambda s: s[stack][f"{P}:network"]


def _pool(s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return s["dev"][f"{P}:cluster"]["gpu_pools"]["h100"]


def _cl(s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return s["dev"][f"{P}:cluster"]


def _set(get: Callable[[dict[str, dict[str, Any]]], dict[str, Any]], **values: Any) -> Edit:
    return lambda s: get(s).update(values)


DEV = f"dev: {P}:"
QUOTAS = ", ".join(row.name for row in DEFAULTS if row.adjustable)

PLAN_BAD: list[tuple[str, Edit, str]] = [
    (
        "host bits",
        _set(_net("dev"), address_space=["10.16.0.1/20"]),
        f"{DEV}network.address_space[0]: 10.16.0.1/20 has host bits set: use 10.16.0.0/20",
    ),
    (
        "link-local",
        _set(_net("dev"), address_space=["169.254.0.0/16"]),
        f"{DEV}network.address_space[0]: 169.254.0.0/16 is inside 169.254.0.0/16, which Azure reserves: "
        "use a private range",
    ),
    (
        "multicast",
        _set(_net("dev"), address_space=["224.1.0.0/16"]),
        f"{DEV}network.address_space[0]: 224.1.0.0/16 is inside 224.0.0.0/4, which Azure reserves: use a private range",
    ),
    (
        "public",
        _set(_net("dev"), address_space=["20.0.0.0/16"]),
        f"{DEV}network.address_space[0]: 20.0.0.0/16 is not private address space: use 10.0.0.0/8, 172.16.0.0/12, "
        "192.168.0.0/16 or 100.64.0.0/10 (or set network.allow_public_ranges: true)",
    ),
    (
        "not a CIDR",
        _set(_net("dev"), address_space=["banana"]),
        f"{DEV}network.address_space[0]: 'banana' is not an IPv4 CIDR: write it like 10.0.0.0/16",
    ),
    (
        "no prefix length",
        _set(_net("dev"), address_space=["10.16.0.0"]),
        f"{DEV}network.address_space[0]: '10.16.0.0' has no prefix length: write it like 10.16.0.0/16",
    ),
    (
        "IPv6",
        _set(_net("dev"), address_space=["fd00::/64"]),
        f"{DEV}network.address_space[0]: 'fd00::/64' is IPv6: this planner lays out IPv4 address space",
    ),
    (
        "own prefixes overlap",
        _set(_net("dev"), address_space=["10.16.0.0/20", "10.16.4.0/22"]),
        f"{DEV}network.address_space: 10.16.0.0/20 overlaps 10.16.4.0/22: list disjoint prefixes",
    ),
    (
        "overlapping spokes",
        lambda s: s.update(prod=cluster("prod", "10.16.8.0/21", service="172.22.0.0/16")),
        f"{DEV}network.address_space: dev's 10.16.0.0/20 overlaps prod's 10.16.8.0/21 in hub's hub-and-spoke "
        "network: give every VNet its own range",
    ),
    (
        "spoke overlaps hub",
        _set(_net("dev"), address_space=["10.0.0.0/20"]),
        f"{DEV}network.address_space: dev's 10.0.0.0/20 overlaps hub's 10.0.0.0/22 in hub's hub-and-spoke network: "
        "give every VNet its own range",
    ),
    (
        "service CIDR overlaps hub",
        _set(_cl, service_cidr="10.0.0.0/16"),
        f"{DEV}cluster.service_cidr: 10.0.0.0/16 overlaps VNet hub's 10.0.0.0/22: use a range outside this VNet "
        "and every VNet peered with it",
    ),
    (
        "service CIDR overlaps own VNet",
        _set(_cl, service_cidr="10.16.0.0/16"),
        f"{DEV}cluster.service_cidr: 10.16.0.0/16 overlaps VNet dev's 10.16.0.0/20: use a range outside this VNet "
        "and every VNet peered with it",
    ),
    (
        "service CIDR refused by AKS",
        _set(_cl, service_cidr="172.31.0.0/16"),
        f"{DEV}cluster.service_cidr: 172.31.0.0/16 is inside 172.31.0.0/16, which AKS refuses for cluster ranges "
        "(Docker bridge and documentation ranges): use another private range",
    ),
    (
        "supernet too small",
        _set(_net("dev"), address_space=["10.16.0.0/26"]),
        f"{DEV}network.address_space: 10.16.0.0/26 (64 addresses) cannot hold the subnets (456 addresses in aligned "
        "blocks; gpu-h100 /24 does not fit): use a larger or an extra address prefix, or lower node counts or pod_ips",
    ),
    (
        "pool larger than a VNet",
        _set(_pool, nodes=5_000_000, pod_ips=250),
        f"{DEV}cluster.gpu_pools.h100: nodes 5,000,000 is more than one VNet can address (65,536 private IPs, a "
        "hard Azure limit): lower it or split the pool across clusters",
    ),
    (
        "pod IPs 0",
        _set(_pool, pod_ips=0),
        f"{DEV}cluster.gpu_pools.h100.pod_ips: 0 is too small: use 1 or more",
    ),
    (
        "pod IPs over a NIC",
        _set(_pool, pod_ips=300),
        f"{DEV}cluster.gpu_pools.h100.pod_ips: 1 + 300 IP configurations exceed the 256 a NIC holds (a hard Azure "
        "limit): use pod_ips 255 or fewer",
    ),
    (
        "max_pods from an older version",
        _set(_pool, max_pods=30),
        f"{DEV}cluster.gpu_pools.h100.max_pods: no longer set by hand: set pod_ips (the NIC's secondary IP "
        "configurations); the kubelet's maxPods is pod_ips plus the host-network pods the cluster runs on the node",
    ),
    (
        "surge 150%",
        _set(_pool, surge="150%"),
        f"{DEV}cluster.gpu_pools.h100.surge: 150% is over 100%: use a percentage from 0% to 100%",
    ),
    (
        "surge abc",
        _set(_pool, surge="abc"),
        f"{DEV}cluster.gpu_pools.h100.surge: surge 'abc' is not a count or a percentage: use e.g. 1 or '10%'",
    ),
    (
        "zero nodes",
        _set(_pool, nodes=0),
        f"{DEV}cluster.gpu_pools.h100.nodes: 0 is too small: use 1 or more",
    ),
    (
        "unknown config key",
        _set(_cl, colour="blue"),
        f"{DEV}cluster.colour: unknown key: remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        "unknown limit override",
        lambda s: s["dev"].update({f"{P}:limits": {"vnet-ips": {"value": 5, "reason": "ticket"}}}),
        f"{DEV}limits.vnet-ips: unknown limit: declare one of the adjustable quotas ({QUOTAS})",
    ),
    (
        "limit override of zero",
        lambda s: s["dev"].update({f"{P}:limits": {"vcpus-regional": {"value": 0, "reason": "ticket"}}}),
        f"{DEV}limits.vcpus-regional.value: 0 is too small: use more than 0",
    ),
    (
        "hard limit override",
        lambda s: s["dev"].update({f"{P}:limits": {"vnet-private-ips": {"value": 262144, "reason": "ticket"}}}),
        f"{DEV}limits.vnet-private-ips: private IP addresses per VNet (65,536) is a hard Azure limit that no "
        "support request raises: remove the override and lower the pools' pod_ips (subnet-calc fit prints the most "
        "that fit) or split the workload across clusters",
    ),
    (
        "pinned outside the space",
        _set(_net("dev"), pinned={"etcd": "10.99.0.0/28"}),
        f"{DEV}network.pinned.etcd: 10.99.0.0/28 is outside the address space 10.16.0.0/20: pin a CIDR inside it "
        "or extend network.address_space",
    ),
    (
        "pinned too small",
        _set(_net("dev"), pinned={"gpu-h100": "10.16.0.0/28"}),
        f"{DEV}network.pinned.gpu-h100: 10.16.0.0/28 has 11 usable addresses but gpu-h100 needs 155: pin a larger CIDR",
    ),
    (
        "pinned unknown subnet",
        _set(_net("dev"), pinned={"gpu-z": "10.16.0.0/24"}),
        f"{DEV}network.pinned.gpu-z: no subnet is called 'gpu-z': use one of control-plane, endpoints, etcd, "
        "gpu-h100, monitoring, nat, system",
    ),
    (
        "pinned with host bits",
        _set(_net("dev"), pinned={"etcd": "10.16.0.1/28"}),
        f"{DEV}network.pinned.etcd: 10.16.0.1/28 has host bits set: use 10.16.0.0/28",
    ),
    (
        "pins overlap",
        _set(_net("dev"), pinned={"etcd": "10.16.0.0/28", "nat": "10.16.0.0/29"}),
        f"{DEV}network.pinned.nat: 10.16.0.0/29 overlaps pinned etcd (10.16.0.0/28): pin disjoint CIDRs",
    ),
    (
        "hub is a cluster stack",
        lambda s: (s.update(other=cluster("other", "10.32.0.0/20")), _cl(s).update(hub_stack="other")),
        f"{DEV}cluster.hub_stack: 'other' is a cluster stack: name the hub stack",
    ),
]


@pytest.mark.parametrize(("edit", "message"), [c[1:] for c in PLAN_BAD], ids=[c[0] for c in PLAN_BAD])
def test_plan_bad_input(tmp_path: Path, edit: Edit, message: str) -> None:
    stacks = write(tmp_path / "stacks", edit)
    _assert_one_line_error(calc("plan", "--stack", "dev", "--stacks-dir", str(stacks)), message)


def test_plan_unknown_stack() -> None:
    _assert_one_line_error(
        calc("plan", "--stack", "nope"),
        "nope: stacks/Pulumi.nope.yaml: no such stack file: use one of dev, dev-addons, hub, images, prod-7500, "
        "prod-7500-addons",
    )


def test_plan_missing_hub(tmp_path: Path) -> None:
    stacks = write(tmp_path / "s", lambda s: s["dev"][f"{P}:cluster"].update(hub_stack="core"))
    _assert_one_line_error(
        calc("plan", "--stack", "dev", "--stacks-dir", str(stacks)),
        f"{DEV}cluster.hub_stack: cannot read hub stack 'core' (core: {stacks}/Pulumi.core.yaml: no such stack "
        "file: use one of dev, hub)",
    )


def test_plan_addons_stack() -> None:
    _assert_one_line_error(
        calc("plan", "--stack", "dev-addons"),
        "dev-addons: an addons stack has no network: plan its cluster stack instead",
    )


def test_plan_bad_format() -> None:
    _assert_one_line_error(
        calc("plan", "--stack", "dev", "--format", "yaml"),
        "argument --format: invalid choice: 'yaml' (choose from 'text', 'json', 'markdown'): "
        "see 'subnet-calc plan --help'",
    )


def test_bad_input_table_is_large_enough() -> None:
    assert len(SIZE_BAD) + len(PLAN_BAD) + 4 >= 25
    assert len(PLAN_BAD) >= 25


# ---- fit: the inverse question under the limits in force ----


def _fit(*args: str) -> dict[str, Any]:
    done = calc("fit", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


@pytest.mark.parametrize(("nodes", "surge"), [(7500, "1%"), (1875, "0"), (50, "1"), (8000, "10%"), (65535, "0")])
def test_fit_prints_the_most_pod_ips_that_fit_one_vnet(nodes: int, surge: str) -> None:
    doc = _fit("--plugin", "azure-cni", "--nodes", str(nodes), "--surge", surge)
    assert set(doc) >= {"plugin", "nodes", "surge_nodes", "pod_ips_per_node", "vnet_ips_needed", "binding_limit"}
    total = nodes + doc["surge_nodes"]
    pods = doc["pod_ips_per_node"]
    # The answer fits, one more does not (or the NIC's 255 binds).
    assert total * (1 + pods) <= 65_536
    assert pods == 255 or total * (2 + pods) > 65_536
    assert doc["vnet_ips_needed"] == (total * (1 + pods) if pods else total)
    binding = "nic-private-ips" if pods == 255 else "vnet-private-ips"
    assert doc["binding_limit"]["name"] == binding


def test_fit_for_the_prod_stack_is_what_the_stack_file_chose() -> None:
    doc = _fit("--plugin", "azure-cni", "--nodes", "7500", "--surge", "1%", "--infiniband", "--stack", "prod-7500")
    declared = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod-7500.yaml").read_text())["config"]
    pools = declared[f"{P}:cluster"]["gpu_pools"]
    assert {p["pod_ips"] for p in pools.values()} == {doc["pod_ips_per_node"]}
    assert doc["binding_limit"] == {"name": "vnet-private-ips", "value": 65_536}
    assert doc["scale_sets"] >= 75  # InfiniBand: one placement group (100 VMs) per set


def test_fit_with_pod_ips_prints_the_most_nodes() -> None:
    doc = _fit("--plugin", "azure-cni", "--pod-ips", "7", "--surge", "1%")
    nodes = doc["max_nodes"]
    assert doc["nodes"] == nodes and doc["pod_ips_per_node"] == 7
    surge = -(-nodes // 100)
    assert (nodes + surge) * 8 <= 65_536 < (nodes + 1 + -(-(nodes + 1) // 100)) * 8


def test_fit_pod_subnet_counts_batches_of_16() -> None:
    doc = _fit("--plugin", "azure-cni-pod-subnet", "--nodes", "1000", "--surge", "0")
    pods = doc["pod_ips_per_node"]
    assert pods % 16 == 0
    assert 1000 + 1000 * pods <= 65_536 < 1000 + 1000 * (pods + 16)


def test_fit_text_names_the_binding_limit() -> None:
    done = calc("fit", "--plugin", "azure-cni", "--nodes", "100000")
    assert done.returncode == 0
    assert "binding limit     vnet-private-ips = 65,536" in done.stdout
    assert "nothing fits" in done.stdout


FIT_BAD = [
    (["--plugin", "azure-cni", "--nodes", "abc"], "--nodes: 'abc' is not a whole number: use a node count like 7500"),
    (["--plugin", "azure-cni", "--nodes", "0"], "--nodes: 0 is not a positive count: use a node count like 7500"),
    (["--plugin", "azure-cni", "--nodes", "٣"], "--nodes: '٣' is not a whole number: use a node count like 7500"),
    (
        ["--plugin", "azure-cni", "--nodes", "5", "--surge", "²"],
        "--surge: '²' is not a count or a percentage: use e.g. 1 or 10%",
    ),
    (
        ["--plugin", "azure-cni", "--pod-ips", "300"],
        "--pod-ips: 1 + 300 IP configurations exceed the 256 a NIC holds: use 255 or fewer",
    ),
    (
        ["--plugin", "azure-cni-pod-subnet", "--pod-ips", "3"],
        "--pod-ips: answers for azure-cni only (not azure-cni-pod-subnet): use --plugin azure-cni",
    ),
    (
        ["--plugin", "azure-cni", "--nodes", "5", "--pod-ips", "3"],
        "argument --pod-ips: not allowed with argument --nodes: see 'subnet-calc fit --help'",
    ),
    (
        ["--plugin", "azure-cni"],
        "one of the arguments --nodes --pod-ips is required: see 'subnet-calc fit --help'",
    ),
    (
        ["--plugin", "kubenet", "--nodes", "5"],
        "argument --plugin: invalid choice: 'kubenet' (choose from 'azure-cni', 'azure-cni-pod-subnet'): "
        "see 'subnet-calc fit --help'",
    ),
    (
        ["--plugin", "azure-cni", "--nodes", "5", "--stack", "nope"],
        "nope: stacks/Pulumi.nope.yaml: no such stack file: use one of dev, dev-addons, hub, images, prod-7500, "
        "prod-7500-addons",
    ),
]


@pytest.mark.parametrize(("args", "message"), FIT_BAD, ids=[" ".join(a) for a, _ in FIT_BAD])
def test_fit_bad_input(args: list[str], message: str) -> None:
    _assert_one_line_error(calc("fit", *args), message)


def test_the_scale_note_quotes_the_tools() -> None:
    """docs/scale.md's figures are what the planner prints today (a changed stack must update the note)."""
    note = (ROOT / "docs" / "scale.md").read_text()
    for pods in (7, 3, 1):
        doc = _fit("--plugin", "azure-cni", "--pod-ips", str(pods), "--surge", "1%", "--stack", "prod-7500")
        assert f"| {pods} | {doc['max_nodes']:,} |" in note
    for nodes, pods in ((7500, 7), (15000, 3)):
        doc = _fit("--plugin", "azure-cni", "--nodes", str(nodes), "--surge", "1%", "--stack", "prod-7500")
        assert doc["pod_ips_per_node"] == pods
    plan = json.loads(calc("plan", "--stack", "prod-7500", "--format", "json").stdout)
    hub = next(g for g in plan["peered_groups"] if g["vnet"] == "hub")
    assert f"| {plan['vnets'][0]['ips_needed']:,} | 65,536 |" in note
    assert f"| {hub['ips_needed']:,} | 128,000 |" in note
    assert f"| {plan['vnets'][0]['utilization']:.1%} |" in note


def test_version_and_missing_stacks_dir() -> None:
    done = calc("--version")
    assert (done.returncode, done.stdout.split()[0]) == (0, "subnet-calc")
    _assert_one_line_error(
        calc("plan", "--stack", "dev", "--stacks-dir", "/nonexistent"),
        "--stacks-dir /nonexistent: no such directory: pass the folder with the Pulumi.<stack>.yaml files",
    )


def test_no_command_names_the_commands() -> None:
    _assert_one_line_error(calc(), "name a command: size, fit or plan: see 'subnet-calc --help'")
