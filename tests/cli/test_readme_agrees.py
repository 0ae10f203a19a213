"""The README and the docs it links say what the program does: the exit statuses, dev's plan excerpt and VMs,
prod-7500's address space. When the program changes, these fail and name the line to update."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from .badinput import ROOT, STACKS, agk

# The README and every doc it links, as one text: the chapters moved to docs/ (one topic a file).
README = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def _section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def test_the_exit_status_table_is_the_codes() -> None:
    from agk.errors import EXIT_STATUSES

    rows = re.findall(r"^\| (\d+) \| (.+) \|$", _section("Exit statuses"), flags=re.MULTILINE)
    assert [(int(code), text) for code, text in rows] == [(int(k), v) for k, v in EXIT_STATUSES.items()]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    """dev's plan.md (as `agk plan --format markdown` prints it) and its state.json."""
    out = tmp_path_factory.mktemp("dev-plan")
    done = agk("plan", "--stack", "dev", "--format", "markdown", "--out", str(out))
    assert done.code == 0, done.err
    return done.out, json.loads((out / "dev" / "state.json").read_text())


def _excerpt(after: str) -> list[str]:
    lines = README[README.index(after) :].splitlines()
    start = lines.index("````markdown") + 1
    return lines[start : lines.index("````", start)]


def test_the_plan_md_excerpt_is_what_agk_plan_prints(dev: tuple[str, dict[str, object]]) -> None:
    markdown, _ = dev
    printed = markdown.splitlines()
    at = 0
    for line in _excerpt("An excerpt of `plan.md` for dev"):
        assert line in printed[at:], f"README line {line!r} is not what agk plan prints now (its lines: {printed[:8]})"
        at = printed.index(line, at) + 1


def _vms(state: dict[str, object]) -> Counter[tuple[str, str]]:
    """(role, VM size) -> machines: VMs one each, scale sets by their capacity."""
    found: Counter[tuple[str, str]] = Counter()
    for res in state["deployment"]["resources"]:  # type: ignore[index]
        inputs = res.get("inputs") or {}
        if res["type"] == "azure-native:compute:VirtualMachine":
            found[(inputs["tags"]["agk-role"], inputs["hardwareProfile"]["vmSize"])] += 1
        elif res["type"] == "azure-native:compute:VirtualMachineScaleSet":
            found[(inputs["tags"]["agk-role"], inputs["sku"]["name"])] += inputs["sku"]["capacity"]
    return found


ROLES = {
    "API servers": "apiserver",
    "etcd": "etcd",
    "Prometheus": "prometheus",
    "NAT host": "nat",
    "system nodes": "system-node",
}


def test_the_stack_table_row_for_dev_is_the_plan(dev: tuple[str, dict[str, object]]) -> None:
    row = next(line for line in README.splitlines() if line.startswith("| `dev` |"))
    vms = row.rsplit("|", 2)[-2]
    claimed: Counter[tuple[str, str]] = Counter()
    for count, what, size in re.findall(r"(\d+) (API servers|etcd|Prometheus|NAT host|system nodes) \((\w+)", vms):
        claimed[(ROLES[what], f"Standard_{size}")] += int(count)
    for count, size in re.findall(r"(\d+) × (\w+)", vms):
        claimed[("gpu-node", f"Standard_{size}")] += int(count)
    assert claimed == _vms(dev[1]), f"README's dev row says {vms.strip()!r}"


def test_the_system_pool_is_called_by_its_name(dev: tuple[str, dict[str, object]]) -> None:
    """The plan's system pool is `system` (its subnet `dev-system`); the README never calls the pool otherwise."""
    pools = {
        res["inputs"]["tags"].get("agk-pool")
        for res in dev[1]["deployment"]["resources"]  # type: ignore[index]
        if res["type"] == "azure-native:compute:VirtualMachineScaleSet"
        and res["inputs"]["tags"]["agk-role"] == "system-node"
    }
    assert pools == {"system"}
    assert "`dev-system` pool" not in README and "pool `dev-system`" not in README


def test_prod_7500s_address_space_is_shown_whole() -> None:
    config = yaml.safe_load((STACKS / "Pulumi.prod-7500.yaml").read_text())["config"]
    spaces = config["azure-gpu-k8s:network"]["address_space"]
    assert spaces == ["10.64.0.0/16", "10.65.0.0/22"]
    assert f"VNet prod-7500 (spoke)  {', '.join(spaces)}  " in README
    for wrong in ("10.64.0.0/14", "10.64.0.0/15"):
        assert wrong not in README


def test_the_render_layout_named_in_the_readme_exists(tmp_path: Path) -> None:
    assert agk("render", "--stack", "dev", "--out", str(tmp_path)).code == 0
    section = _section("Node bootstrap")
    named = re.findall(r"`((?:nodes|manifests)/[A-Za-z0-9_./-]+)`", section)
    assert len(named) >= 4, named
    for rel in named:
        assert (tmp_path / rel).exists(), rel


def test_the_kubernetes_versions_table_is_the_versions_module() -> None:
    from modules.bootstrap import versions

    rows = re.findall(r"^\| \**(1\.\d+)\**(?: \(default\))? \| (.+) \|$", _section("Kubernetes versions"), re.M)
    assert [m for m, _ in rows] == list(versions.SUPPORTED)
    for minor, rest in rows:
        r = versions.release(minor)
        cells = [c.strip() for c in rest.split(" | ")]
        assert cells[0].split()[0] == r.release(), minor
        assert cells[1:6] == [r.end_of_life, r.pause, r.coredns, r.kube_state_metrics, r.gang_scheduler or "none"], (
            minor
        )
        assert cells[6] == f"{r.containerd_min} or newer", minor
        assert ("*unverified*" in cells[0]) == bool(versions.unverified_rows(minor)), minor


def test_the_etcd_boot_names_the_tables_release_and_where_the_image_puts_it() -> None:
    from modules.bootstrap import versions
    from modules.bootstrap.layout import PATHS

    boot = _section("Node boot, role by role")
    etcd = " ".join(boot[boot.index("**etcd, events-etcd**") :].split("\n\n")[0].split())
    assert f"({versions.ETCD}, `versions.ETCD`)" in etcd
    assert f"`{PATHS.etcd_program('etcd')} --config-file {PATHS.etcd_config}`" in etcd
    assert "etcd-server" not in etcd.replace("Ubuntu's `etcd-server` is the 3.4 line", "")


def test_the_restore_runbook_restarts_every_watcher_the_addons_run() -> None:
    """Every Deployment and DaemonSet the add-ons render holds watches (the balloons' pause pods aside) and
    the pool nodes' static pods too: after a restore the runbook restarts each, with a command that reaches it."""
    from modules.bootstrap.roles.parts import POOL_STATIC_PODS
    from modules.cluster.manifests import render_manifests
    from modules.cluster.objects.common import BALLOON_NS
    from tests.cluster.conftest import spec_of

    runbook = _section("etcd backup and restore")
    step = runbook[runbook.index("\n6. ") : runbook.index("\n7. ")]
    objects = render_manifests(spec_of("prod-7500"))
    deployments = {o["metadata"]["namespace"] for o in objects if o["kind"] == "Deployment"} - {BALLOON_NS}
    assert deployments >= {"kube-system", "scheduler-plugins"}
    for ns in deployments:
        assert f"`kubectl -n {ns} rollout restart deployment`" in " ".join(step.split()), ns
    assert any(o["kind"] == "DaemonSet" for o in objects)
    assert '"$ns" rollout restart daemonset' in " ".join(step.split())
    for ref in POOL_STATIC_PODS:
        assert f"crictl ps -q --name {ref.split('/')[1]}" in " ".join(step.split()), ref
    for control in ("kube-apiserver.yaml", "kube-controller-manager.yaml", "kube-scheduler.yaml", "restart kubelet"):
        assert control in step, control
