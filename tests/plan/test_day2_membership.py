"""Membership and version changes (issue 20, item 6), on the real program planned twice.

Before issue 20: growing etcd from 3 to 5 members passed review with "0 etcd members lost" though the new
members were rendered with `initial-cluster-state: new` and could never join; a shrinking Prometheus data
disk passed review although Azure refuses to shrink a disk; a Kubernetes 1.35 -> 1.36 bump passed though the
pinned images' containerd cannot run 1.36; and allowing every etcd member's replacement raised no warning.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agk.cli import app
from agk.plan.diff import resources_of
from agk.review import ChangeSet, allowances, review
from agk.stack_export import parse

from .changed_stacks import Edit, both, cluster, diff, export, line, stack_folder


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return export(stack_folder(tmp_path_factory.mktemp("base")))


def _verdicts(folder: Path, found: Any, head: dict[str, Any]) -> list[Any]:
    changes = ChangeSet(found, allowances.read(folder, "dev"), "stacks/Pulumi.dev.yaml")
    return review([parse(head, "dev", "x")], None, [changes]).violations


def _by_name(state: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in resources_of(state) if r["urn"].rsplit("::", 1)[-1] == name)


def test_growing_etcd_is_refused_with_the_steps(tmp_path: Path, base: dict[str, Any]) -> None:
    folder = stack_folder(tmp_path / "stacks", edit=lambda c: cluster(c)["etcd"].__setitem__("count", 5))
    head = export(folder)
    found, radius = diff(base, head)
    assert {line(c) for c in found.changes if c.type.endswith(":VirtualMachine") and c.action == "create"} == {
        "create VirtualMachine dev-etcd-3 []",
        "create VirtualMachine dev-etcd-4 []",
    }
    assert radius.as_json()["etcd_members"] == 0
    (refused,) = [v for v in _verdicts(folder, found, head) if v.policy == "etcd-membership-change"]
    assert refused.enforcement == "mandatory"
    assert refused.message.startswith(
        "etcd grows from 3 to 5 members (dev-etcd-3, dev-etcd-4 created): the program renders a member for a new"
        " cluster (initial-cluster-state: new), so it never joins the running one. Add one member per update:"
        " `etcdctl member add <name> --peer-urls=https://<ip>:2380`"
    )
    # The running members' configuration names the new peers: each restarts etcd, gated, by its sync (and its
    # sync timer moves: the members of a role are 60/n minutes apart).
    etcd = {r.host: r for r in radius.restarts if r.role == "etcd"}
    assert sorted(etcd) == [f"dev-etcd-{i}" for i in range(3)]
    assert all("restart etcd.service" in r.actions and r.how == "sync" for r in etcd.values())


def test_a_disk_that_would_shrink_is_refused_with_the_fix(tmp_path: Path, base: dict[str, Any]) -> None:
    """The base as if Prometheus' data disk had been deployed at 256 GiB; the plan asks for 128 again."""
    old = copy.deepcopy(base)
    disks = _by_name(old, "dev-prometheus-0")["inputs"]["storageProfile"]["dataDisks"]
    disks[0]["diskSizeGB"] = 256
    found, _ = diff(old, base)
    (vm,) = [c for c in found.changes if c.name == "dev-prometheus-0"]
    assert vm.refused == ("storageProfile.dataDisks[].diskSizeGB",)
    report = review([parse(base, "dev", "x")], None, [ChangeSet(found, [], "stacks/Pulumi.dev.yaml")])
    (refused,) = [v for v in report.violations if v.policy == "no-change-azure-refuses"]
    assert "a disk never shrinks: keep the size deployed (set cluster.prometheus.data_disk_gib to it)" in (
        refused.message
    )


def _minor(minor: str) -> Edit:
    def edit(config: dict[str, Any]) -> None:
        cluster(config)["kubernetes_version"] = minor
        # A scheduler-plugins release within 1.36's skew, so the gang check passes.
        config.setdefault("azure-gpu-k8s:addons", {}).setdefault("gang", {})["image_tag"] = "v0.35.7"

    return edit


def _images_build(folder: Path, minor: str) -> Path:
    """The images stack builds ``minor`` too (a cluster boots the images stack's release; it is deployed first)."""
    path = folder / "Pulumi.images.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["azure-gpu-k8s:image_build"]["kubernetes_version"] = minor
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


def test_a_minor_the_pinned_images_cannot_run_is_refused_at_plan_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hosts boot gallery images that install the versions table's containerd (2.3 today, fine for 1.36):
    # an image table still on containerd 1.7 is what 1.36 cannot run.
    from dataclasses import replace

    from modules.bootstrap import versions

    old = replace(versions.ARTIFACTS["containerd"], version="1.7.28")
    monkeypatch.setitem(versions.ARTIFACTS, "containerd", old)
    folder = _images_build(stack_folder(tmp_path / "stacks", edit=_minor("1.36")), "1.36")
    result = CliRunner().invoke(app, ["plan", "--stack", "dev", "--stacks-dir", str(folder)])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith(
        "error: dev: azure-gpu-k8s:cluster.kubernetes_version: Kubernetes 1.36 needs containerd 2.2 or newer, but"
        " the node images install containerd 1.7.28"
    )


def test_a_minor_bump_shows_the_hosts_it_restarts_and_the_sets_to_roll(tmp_path: Path, base: dict[str, Any]) -> None:
    # A cluster deployed on 1.35 moves to the default 1.36 (the node images' containerd 2.3 runs both).
    old = export(_images_build(stack_folder(tmp_path / "stacks", edit=_minor("1.35")), "1.35"))
    found, radius = diff(old, base)
    restarted = {r.host: r for r in radius.restarts}
    # The hosts boot the new release's gallery image: a fixed host cannot take it in place, so it is replaced
    # (down until the new one boots), and the scale sets roll onto it.
    for i in range(3):
        assert restarted[f"dev-apiserver-{i}"].actions == ("VM replaced: down until the new one boots",)
    assert {r["name"] for r in radius.as_json()["scale_sets_to_roll"]} == {"a100-00", "h100-00", "system-00"}
    assert {c.name for c in found.changes if c.action == "replace" and "storageProfile.imageReference" in c.keys} >= {
        "dev-apiserver-0",
        "dev-etcd-0",
    }


def test_allowing_every_etcd_member_to_be_replaced_warns(tmp_path: Path, base: dict[str, Any]) -> None:
    old = copy.deepcopy(base)
    for i in range(3):
        _by_name(old, f"dev-etcd-{i}")["inputs"]["location"] = "westus3"

    def allow(config: dict[str, Any]) -> None:
        config["azure-gpu-k8s:changes"] = {
            "allow": [{"name": f"dev-etcd-{i}", "action": "replace", "reason": "OPS-9 move region"} for i in range(3)]
        }

    folder = stack_folder(tmp_path / "stacks", edit=both(allow))
    found, _ = diff(old, base)
    violations = _verdicts(folder, found, base)
    (warning,) = [v for v in violations if v.policy == "allowance-takes-quorum"]
    assert warning.enforcement == "advisory"
    assert warning.message.startswith(
        "azure-gpu-k8s:changes allows 3 of 3 etcd members to be replaced or deleted in one update"
    )
