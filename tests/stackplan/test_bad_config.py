"""Bad cluster config fails with one line naming the key and the fix, before any resource exists."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.errors import AgkError
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.infra.conftest import REPO, STACKS

P = "azure-gpu-k8s:"
Mutation = Callable[[dict[str, Any]], None]


# Public keys made for these tests (ssh-keygen -t rsa -b 1024 / -t ecdsa): Azure refuses both kinds.
RSA_1024 = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDSlv8S46tuQ2HMjKonflXK5FTk6NttSd/7hkFUngEu/l6RmewdlKNSBst+GQ1rbEVzQXBU4ku201yZ0dolvzomTy1YL/d7mCYJhiadDiZPk6vTmGZml8aVKMzYHS8nGFe3qtimV7ULQVG1/SAUvxudptw0lQhsd46Y8bYe3C/rxw=="
ECDSA = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBOsxgWjvhlcX4ptJ9ct62WzdwiescmbJGxR7HkQT7RjIwWi04goXaJ7FBbnWDzQ74aeBDeTFhiwRL878zb1EeEQ="
RSA_2048 = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQDp/aWospHZGGhzcwZ8m0Pet7t8m9gt/jdODcYlarA44y1fcxX/4uAI9DceBAbrn3raCxN/d7Lu4QWybEe0hDEuc0A2q4fDtW45tkNdHbkYE6nE/FaPtrBA740LtGzzNmMT6eh6RouSVPctZ9d0Sj5ofMGZjyZ6yFTizpV39vGOlGYjKSDy5kYgf4DHF+KOZniGzAWO2eIUB5WkfshMTqJ+DlHad4TvHF+Th04avlZ5sqs5jPeEDf27c1G5g0H/XxW19ora0C+sAHCDnt+VIbg6L5Ydw/qqboZlmC9JabPGPA2kAmO473VYgiSqT38CaMzhJqawkRaZOmVmIGY5H59n"


def _set(path: str, value: Any) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        keys = path.split(".")
        if len(keys) == 1:
            config[P + keys[0]] = value
            return
        node = config.setdefault(P + keys[0], {})
        for key in keys[1:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return apply


def _drop(path: str) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        keys = path.split(".")
        if len(keys) == 1:
            del config[P + keys[0]]
            return
        node = config[P + keys[0]]
        for key in keys[1:-1]:
            node = node[key]
        del node[keys[-1]]

    return apply


def _raw(key: str, value: Any) -> Mutation:
    def apply(config: dict[str, Any]) -> None:
        config[key] = value

    return apply


def write_stacks(tmp: Path, mutate: Mutation) -> Path:
    # Clusters boot the images stack's gallery versions: a cluster plan reads its stack file too.
    (tmp / "Pulumi.images.yaml").write_text((STACKS / "Pulumi.images.yaml").read_text())
    for name in ("hub", "dev"):
        doc = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())
        if name == "dev":
            doc = copy.deepcopy(doc)
            mutate(doc["config"])
        (tmp / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc))
    return tmp


CASES: list[tuple[str, Mutation, str]] = [
    (
        "unknown key",
        _set("cluster.gpu_pool", {}),
        "dev: azure-gpu-k8s:cluster.gpu_pool: unknown key: remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        "unknown nested key",
        _set("cluster.etcd.quorum", 3),
        "dev: azure-gpu-k8s:cluster.etcd.quorum: unknown key: remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        "unknown top-level key",
        _raw("azure-gpu-k8s:clustr", {}),
        "dev: azure-gpu-k8s:clustr: unknown key: remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        "unknown namespace",
        _raw("azure-gpu-k8:kind", "cluster"),
        "dev: azure-gpu-k8:kind: unknown config namespace 'azure-gpu-k8': use azure-gpu-k8s:kind",
    ),
    (
        "prometheus shards not dividing its hosts",
        _set("cluster.prometheus", {"count": 3, "shards": 2}),
        "dev: azure-gpu-k8s:cluster.prometheus: shards 2 does not divide count 3: every share needs the same "
        "number of hosts (replicas), so set count to a multiple of shards",
    ),
    (
        "api servers 4",
        _set("cluster.api_servers.count", 4),
        "dev: azure-gpu-k8s:cluster.api_servers.count: 4 API servers is not supported: use 1, 3 or 5",
    ),
    (
        "etcd 4",
        _set("cluster.etcd.count", 4),
        "dev: azure-gpu-k8s:cluster.etcd.count: 4 etcd members is not supported: use 3 or 5 (an odd quorum)",
    ),
    (
        "events etcd 2",
        _set("cluster.events_etcd", {"count": 2}),
        "dev: azure-gpu-k8s:cluster.events_etcd.count: 2 etcd members is not supported: use 3 or 5 (an odd quorum)",
    ),
    (
        "pod IPs over a NIC",
        _set("cluster.gpu_pools.h100.pod_ips", 256),
        "dev: azure-gpu-k8s:cluster.gpu_pools.h100.pod_ips: 1 + 256 IP configurations exceed the 256 a NIC holds "
        "(a hard Azure limit): use pod_ips 255 or fewer",
    ),
    (
        "pod IPs zero",
        _set("cluster.system_pool.pod_ips", 0),
        "dev: azure-gpu-k8s:cluster.system_pool.pod_ips: 0 is too small: use 1 or more",
    ),
    (
        "missing ssh key",
        _set("admin.ssh_public_keys", []),
        "dev: azure-gpu-k8s:admin.ssh_public_keys: no SSH public key: add at least one 'ssh-ed25519 ...' or 'ssh-rsa ...' key",
    ),
    (
        "not an ssh key",
        _set("admin.ssh_public_keys", ["hunter2"]),
        "dev: azure-gpu-k8s:admin.ssh_public_keys: 'hunter2' is not an OpenSSH public key: paste the one line of your *.pub file",
    ),
    (
        "a 1024-bit RSA key",
        _set("admin.ssh_public_keys", [RSA_1024]),
        f"dev: azure-gpu-k8s:admin.ssh_public_keys: {RSA_1024[:40]!r} is a 1024-bit RSA key; Azure needs 2048 bits or"
        " more: use ssh-keygen -t ed25519 (or -t rsa -b 4096)",
    ),
    (
        "an ECDSA key",
        _set("admin.ssh_public_keys", [ECDSA]),
        f"dev: azure-gpu-k8s:admin.ssh_public_keys: {ECDSA[:40]!r}: Azure takes no ECDSA key: use an ssh-ed25519 or"
        " ssh-rsa (2048+) key",
    ),
    (
        "missing admin",
        _drop("admin"),
        "dev: kind is cluster but azure-gpu-k8s:admin is missing: add it to the stack config",
    ),
    (
        "zero nodes",
        _set("cluster.gpu_pools.h100.nodes", 0),
        "dev: azure-gpu-k8s:cluster.gpu_pools.h100.nodes: 0 is too small: use 1 or more",
    ),
    (
        "surge abc",
        _set("cluster.gpu_pools.h100.surge", "abc"),
        "dev: azure-gpu-k8s:cluster.gpu_pools.h100.surge: surge 'abc' is not a count or a percentage: use e.g. 1 or '10%'",
    ),
    (
        "max below nodes",
        _set("cluster.gpu_pools.h100.max_nodes", 2),
        "dev: azure-gpu-k8s:cluster.gpu_pools.h100: max_nodes 2 is below nodes 4: raise max_nodes or lower nodes",
    ),
    (
        "bad pool name",
        _set("cluster.gpu_pools.H100_X", {"vm_size": "Standard_ND96isr_H100_v5", "nodes": 1}),
        "dev: azure-gpu-k8s:cluster.gpu_pools: 'H100_X' is not a valid pool name: use 2-32 lowercase letters, digits and '-', starting with a letter",
    ),
    (
        "unknown vm size",
        _set("cluster.gpu_pools.h100.vm_size", "Standard_ND96_H900"),
        "dev: azure-gpu-k8s:cluster.gpu_pools.h100.vm_size: VM size 'Standard_ND96_H900' is unknown: use one of ...",
    ),
    (
        "etcd storage",
        _set("cluster.etcd.storage", "hdd"),
        "dev: azure-gpu-k8s:cluster.etcd.storage: 'hdd' is not allowed: use 'local-nvme' or 'premium-ssd-v2'",
    ),
    (
        "kubernetes version",
        _set("cluster.kubernetes_version", "1.19"),
        "dev: azure-gpu-k8s:cluster.kubernetes_version: kubernetes_version '1.19' is not supported: use 1.35, 1.36 or 1.37",
    ),
    (
        "label domain under kubernetes.io",
        _set("cluster.label_domain", "node.kubernetes.io"),
        "dev: azure-gpu-k8s:cluster.label_domain: 'node.kubernetes.io' is in the kubernetes.io namespace, which "
        "Kubernetes reserves: the kubelet refuses --node-labels there (NodeRestriction), so no node would start; "
        "use a domain your organisation owns, e.g. gpu.example.com",
    ),
    (
        "label domain k8s.io",
        _set("cluster.label_domain", "k8s.io"),
        "dev: azure-gpu-k8s:cluster.label_domain: 'k8s.io' is in the k8s.io namespace, which Kubernetes reserves: "
        "the kubelet refuses --node-labels there (NodeRestriction), so no node would start; use a domain your "
        "organisation owns, e.g. gpu.example.com",
    ),
    (
        "repair grace period below Azure's",
        _set("cluster.repairs.grace_minutes", 5),
        "dev: azure-gpu-k8s:cluster.repairs.grace_minutes: 5 is too small: use 10 or more",
    ),
    (
        "host bits",
        _set("network.address_space", ["10.16.0.1/20"]),
        "dev: azure-gpu-k8s:network.address_space[0]: 10.16.0.1/20 has host bits set: use 10.16.0.0/20",
    ),
    (
        "overlapping spoke",
        _set("network.address_space", ["10.0.8.0/21"]),
        "dev: azure-gpu-k8s:network.address_space: dev's 10.0.8.0/21 overlaps hub's 10.0.0.0/20 in hub's hub-and-spoke network: give every VNet its own range",
    ),
    (
        "service cidr overlaps hub",
        _set("cluster.service_cidr", "10.0.4.0/22"),
        "dev: azure-gpu-k8s:cluster.service_cidr: 10.0.4.0/22 overlaps VNet hub's 10.0.0.0/20: use a range outside this VNet and every VNet peered with it",
    ),
    (
        "pool bigger than the space",
        _set("cluster.gpu_pools.h100.nodes", 400),
        "dev: azure-gpu-k8s:network.address_space: 10.16.0.0/20 (4,096 addresses) cannot hold the subnets...",
    ),
    (
        "unknown limit",
        _set("limits", {"vnet-ips": {"value": 1, "reason": "x"}}),
        "dev: azure-gpu-k8s:limits.vnet-ips: unknown limit: declare one of the adjustable quotas (vcpus-regional, ...",
    ),
    (
        "hard limit override",
        _set("limits", {"vmss-instances-spg": {"value": 150, "reason": "ticket"}}),
        "dev: azure-gpu-k8s:limits.vmss-instances-spg: VMs per scale set with singlePlacementGroup=true (InfiniBand) "
        "(100) is a hard Azure limit that no support request raises: remove the override and split the pool into "
        "more scale sets",
    ),
    (
        "declared quota too small",
        _set("limits", {"vcpus-standardNDSH100v5Family": {"value": 96, "reason": "ticket"}}),
        "dev: azure-gpu-k8s:limits.vcpus-standardNDSH100v5Family: the plan needs 480 vCPUs at its peak but the "
        "declared quota is 96: request 480 (quota request) or lower the node counts",
    ),
    (
        "public range",
        _set("network.address_space", ["20.16.0.0/20"]),
        "dev: azure-gpu-k8s:network.address_space[0]: 20.16.0.0/20 is not private address space...",
    ),
    (
        "hub is not a hub",
        _set("cluster.hub_stack", "dev"),
        "dev: azure-gpu-k8s:cluster.hub_stack: 'dev' is a cluster stack: name the hub stack",
    ),
    (
        "iops beyond 500 per GiB",
        _set("cluster.etcd", {"count": 3, "disk_gib": 16, "disk_iops": 20000}),
        "dev: azure-gpu-k8s:cluster.etcd: disk_iops 20000 exceeds 500 per GiB of a 16 GiB Premium SSD v2 disk: raise disk_gib to 40 or lower disk_iops",
    ),
    (
        "regional premium v2",
        _set("cluster.api_servers.zones", []),
        "dev: azure-gpu-k8s:cluster: api_servers.zones is empty but etcd uses premium-ssd-v2, which Azure only offers zonal: list the region's zones (e.g. ['1', '2', '3']) or use etcd.storage: local-nvme",
    ),
    (
        "gpu pool called system",
        _set("cluster.gpu_pools.system", {"vm_size": "Standard_ND96isr_H100_v5", "nodes": 1}),
        "dev: azure-gpu-k8s:cluster.gpu_pools: a GPU pool cannot be called 'system': that name is the system pool's; rename it",
    ),
    (
        "balloons beyond pool",
        _set("addons.balloons", {"h100": 9}),
        "dev: azure-gpu-k8s:addons.balloons.h100: 9 replicas exceed pool h100's 4 nodes: lower replicas",
    ),
    (
        "a backup for the events etcd",
        _set("cluster.events_etcd", {"count": 3, "backup": {"enabled": True}}),
        "dev: azure-gpu-k8s:cluster: events_etcd.backup: the events etcd is never backed up (its events expire "
        "within an hour and nothing needs them after a restore): remove it",
    ),
    (
        "a boolean for a count",
        _set("cluster.gpu_pools.a100.nodes", True),
        "dev: azure-gpu-k8s:cluster.gpu_pools.a100.nodes: true is not a number: write a whole number",
    ),
    (
        "a boolean for the API server count",
        _set("cluster.api_servers.count", True),
        "dev: azure-gpu-k8s:cluster.api_servers.count: true is not a number: write a whole number",
    ),
    (
        "more nodes than a VNet addresses",
        _set("cluster.gpu_pools.a100.nodes", 10**12),
        "dev: azure-gpu-k8s:cluster.gpu_pools.a100: nodes 1,000,000,000,000 is more than one VNet can address "
        "(65,536 private IPs, a hard Azure limit): lower it or split the pool across clusters",
    ),
    (
        "a max_nodes no VNet addresses",
        _set("cluster.gpu_pools.a100.max_nodes", 70_000),
        "dev: azure-gpu-k8s:cluster.gpu_pools.a100: max_nodes 70,000 is more than one VNet can address "
        "(65,536 private IPs, a hard Azure limit): lower it or split the pool across clusters",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [(m, e) for _, m, e in CASES], ids=[c[0] for c in CASES])
def test_bad_config_is_one_clear_line(tmp_path: Path, mutate: Mutation, expected: str) -> None:
    stacks = write_stacks(tmp_path, mutate)
    with pytest.raises(AgkError) as err:
        prepare_cluster("dev", load_stack(stacks, "dev"), stacks)
    message = str(err.value)
    assert "\n" not in message
    if expected.endswith("..."):
        assert message.startswith(expected[:-3])
    else:
        assert message == expected


def test_case_table_is_large_enough() -> None:
    assert len(CASES) >= 20


@pytest.mark.parametrize(
    "case", ["api servers 4", "overlapping spoke", "pod IPs over a NIC", "hard limit override", "label domain k8s.io"]
)
def test_agk_plan_refuses_before_any_resource(tmp_path: Path, case: str) -> None:
    _, mutate, expected = next(c for c in CASES if c[0] == case)
    stacks = write_stacks(tmp_path, mutate)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from agk.cli import main; main()",
            "plan",
            "--stack",
            "dev",
            "--stacks-dir",
            str(stacks),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "AGK_STACKS_DIR": str(stacks)},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    # The same line the pure planner raises, the stack named once (never "dev: dev: ...").
    assert len(lines) == 1 and lines[0] == f"error: {expected}", proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_etcd_disk_too_small_for_the_guides_iops() -> None:
    from modules.address_plan.limits import Limits
    from modules.stackplan.pools import plan_pools
    from modules.stackplan.vm_choice import size_cluster

    prod = load_stack(STACKS, "prod-7500").cluster
    assert prod is not None
    small = prod.model_copy(update={"etcd": prod.etcd.model_copy(update={"disk_gib": 16})})
    with pytest.raises(AgkError) as err:
        size_cluster(small, plan_pools(small, Limits.default()))
    assert str(err.value) == (
        "azure-gpu-k8s:cluster.etcd.disk_gib: 16 GiB allows at most 8,000 IOPS on Premium SSD v2 "
        "but 20,000 are planned: raise disk_gib to 40"
    )


# ---- stack files as Pulumi writes them, and mistakes that a single stack does not show ----


def test_stack_files_pulumi_writes_are_accepted(tmp_path: Path) -> None:
    """`pulumi stack init` with the passphrase provider adds `encryptionsalt:` (pulumi.automation's
    StackSettings is the SDK's own model of the file); cloud providers add `secretsprovider` and
    `encryptedkey`; `pulumi config env add` adds `environment`."""
    from pulumi.automation import StackSettings

    for name in ("hub", "dev"):
        doc = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())
        settings = StackSettings(
            secrets_provider="passphrase",
            encryption_salt="v1:Yu6+9u9ZqDQ=:v1:3Qp6Xcd6Pv5f2wzv:dSxkYw==",
            config=doc["config"],
        )
        written = {**settings._serialize(), "environment": ["org/gpu-defaults"], "encryptedkey": "ZXhhbXBsZQ=="}
        (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(written))
    (tmp_path / "Pulumi.images.yaml").write_text((STACKS / "Pulumi.images.yaml").read_text())
    assert set(written) == {"secretsprovider", "encryptionsalt", "config", "environment", "encryptedkey"}
    prep = prepare_cluster("dev", load_stack(tmp_path, "dev"), tmp_path)
    assert prep.config.cluster is not None and prep.config.cluster.name == "dev"


def _write_raw(tmp: Path, dev_text: str) -> Path:
    (tmp / "Pulumi.hub.yaml").write_text((STACKS / "Pulumi.hub.yaml").read_text())
    (tmp / "Pulumi.dev.yaml").write_text(dev_text)
    return tmp


RAW_CASES = [
    (
        "duplicate pool",
        lambda text: text.replace("      h100:\n", "      a100:\n"),
        "dev: {path} line {second}: duplicate key 'a100' (first on line {first}): give each key once",
    ),
    (
        "unknown top-level key",
        lambda text: text + "backend: file://\n",
        "dev: {path}: unknown top-level key 'backend': put settings under 'config:' (Pulumi writes only config, "
        "encryptedkey, encryptionsalt, environment, secretsprovider)",
    ),
    ("empty file", lambda text: "", "dev: {path}: empty: a stack file starts with 'config:'"),
    ("a list", lambda text: "- config\n", "dev: {path}: a list, not a mapping: a stack file starts with 'config:'"),
]


@pytest.mark.parametrize(("case", "edit", "message"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_bad_stack_files_are_one_line(tmp_path: Path, case: str, edit: Callable[[str], str], message: str) -> None:
    text = edit((STACKS / "Pulumi.dev.yaml").read_text())
    stacks = _write_raw(tmp_path, text)
    with pytest.raises(AgkError) as err:
        load_stack(stacks, "dev")
    lines = [n for n, line in enumerate(text.splitlines(), 1) if line == "      a100:"]
    first, second = [*lines, 0, 0][:2]
    assert str(err.value) == message.format(path=stacks / "Pulumi.dev.yaml", first=first, second=second)


def test_non_utf8_and_unreadable_files_are_one_line(tmp_path: Path) -> None:
    stacks = _write_raw(tmp_path, "")
    (stacks / "Pulumi.dev.yaml").write_bytes(b"config:\n  \xff\xfe: 1\n")
    with pytest.raises(AgkError) as err:
        load_stack(stacks, "dev")
    assert str(err.value) == f"dev: {stacks / 'Pulumi.dev.yaml'}: not UTF-8 (byte 10): save the stack file as UTF-8"


NETWORK_CASES: list[tuple[str, Mutation, str]] = [
    (
        "service CIDR over another spoke",
        _set("cluster.service_cidr", "10.64.0.0/16"),
        "dev: azure-gpu-k8s:cluster.service_cidr: 10.64.0.0/16 overlaps VNet prod-7500's 10.64.0.0/16: the hub would "
        "route prod-7500's traffic to dev; use a range outside every VNet of the network",
    ),
    (
        "service CIDR equal to another spoke's",
        _set("cluster.service_cidr", "172.21.0.0/16"),
        "prod-7500: azure-gpu-k8s:cluster.service_cidr: 172.21.0.0/16 overlaps dev's cluster.service_cidr "
        "172.21.0.0/16: the hub routes each cluster's service CIDR to its own NAT host; give every cluster its own range",
    ),
    (
        "two clusters with one name",
        _set("cluster.name", "prod-7500"),
        # The stack being planned (dev, the file edited) is named, not its sibling.
        "dev: azure-gpu-k8s:cluster.name: 'prod-7500' is already the cluster of stack 'prod-7500' on the same hub "
        "(its peering, route and DNS link names would collide): give each cluster its own name",
    ),
    (
        "unknown location",
        _set("location", "eastus3"),
        "dev: azure-gpu-k8s:location: 'eastus3' is not an Azure region: did you mean 'eastus'? (e.g. eastus2)",
    ),
    (
        "bad container name",
        _set("cluster.storage.containers", {"Check_Points": {}}),
        "dev: azure-gpu-k8s:cluster.storage.containers: 'Check_Points' is not a blob container name Azure accepts: "
        "use 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "expected"), NETWORK_CASES, ids=[c[0] for c in NETWORK_CASES])
def test_mistakes_only_the_whole_network_shows(tmp_path: Path, case: str, mutate: Mutation, expected: str) -> None:
    stacks = write_stacks(tmp_path, mutate)
    (stacks / "Pulumi.prod-7500.yaml").write_text((STACKS / "Pulumi.prod-7500.yaml").read_text())
    with pytest.raises(AgkError) as err:
        prepare_cluster("dev", load_stack(stacks, "dev"), stacks)
    assert str(err.value) == expected


def test_a_broken_unrelated_stack_does_not_block(tmp_path: Path) -> None:
    stacks = write_stacks(tmp_path, lambda c: None)
    (stacks / "Pulumi.junk-addons.yaml").write_text("config:\n  azure-gpu-k8s:kind: addons\n  azure-gpu-k8s:x: 1\n")
    assert prepare_cluster("dev", load_stack(stacks, "dev"), stacks).config.cluster is not None


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_stack_file_that_is_not_a_file_is_named_as_such(tmp_path: Path, kind: str) -> None:
    import os

    stacks = write_stacks(tmp_path, lambda c: None)
    path = stacks / "Pulumi.dev.yaml"
    path.unlink()
    if kind == "directory":
        path.mkdir()
        what = "a directory"
    else:
        os.mkfifo(path)
        what = "not a regular file (a FIFO, socket, device or broken link)"
    with pytest.raises(AgkError) as err:
        load_stack(stacks, "dev")
    assert (
        str(err.value) == f"dev: {path}: {what}, not a stack file: replace it with the stack's YAML file or remove it"
    )


def test_yaml_merge_keys_work_as_pulumi_reads_them(tmp_path: Path) -> None:
    # Pulumi's YAML reader (gopkg.in/yaml.v3) honours merge keys; so does the stack reader: the merged
    # keys yield to the pool's own, and a key given twice explicitly is still refused.
    from modules.stackplan.config import parse_yaml

    doc = parse_yaml("a: &a {vm_size: X, nodes: 2}\nb:\n  <<: *a\n  nodes: 5\n", "f")
    assert doc == {"a": {"vm_size": "X", "nodes": 2}, "b": {"vm_size": "X", "nodes": 5}}
    with pytest.raises(AgkError, match=r"^f line 3: duplicate key 'nodes' \(first on line 2\): give each key once$"):
        parse_yaml("b:\n  nodes: 1\n  nodes: 2\n", "f")


def test_rsa_key_length_is_read_from_the_key() -> None:
    from modules.stackplan.config import _rsa_bits

    assert (_rsa_bits(RSA_1024), _rsa_bits(RSA_2048), _rsa_bits(ECDSA), _rsa_bits("ssh-rsa AAAA")) == (
        1024,
        2048,
        None,
        None,
    )
