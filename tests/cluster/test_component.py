"""Mock-runtime tier: the resources Pulumi would create are exactly the builders' objects."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pulumi
import pytest
import yaml

from agk.plan.engine import export_state
from modules.azure.cluster_addons import KUEUE_GROUP, ClusterAddons, ClusterAddonsArgs, object_key, placeholder_warning
from modules.cluster.manifests import render_manifests
from modules.cluster.spec import AddonsSpec
from modules.errors import ConfigError
from modules.stackplan.addresses import cluster_addresses, plan_stack
from modules.stackplan.config import load_stack, parse_config, read_stack_file
from modules.stackplan.prepare import prepare_cluster
from tests.mock_runtime import settled


class Capture(pulumi.runtime.Mocks):
    def __init__(self, outputs: dict[str, Any] | None = None) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []
        self.outputs = outputs or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        if args.typ == "pulumi:pulumi:StackReference":
            return f"{args.name}_id", {**args.inputs, "outputs": self.outputs}
        return f"{args.name}_id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        # The engine answers this builtin from the named stack's last update (here: the mock's outputs).
        if args.token == "pulumi:pulumi:readStackOutputs":
            return {"name": args.args["name"], "outputs": self.outputs}
        return {}


SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value on the wire


def _ints(value: Any) -> Any:
    """The engine carries numbers as doubles; the builders use ints. Secrets arrive wrapped."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict) and SECRET_SIG in value:
        return _ints(value["value"])
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _k8s(mocks: Capture) -> dict[str, dict[str, Any]]:
    return {r.name: _ints(r.inputs) for r in mocks.resources if r.typ.startswith("kubernetes:")}


def test_captured_resources_equal_the_builders_objects(dev_spec: AddonsSpec) -> None:
    mocks = Capture()
    pulumi.runtime.set_mocks(mocks, preview=False)
    addons = ClusterAddons("dev", ClusterAddonsArgs(spec=dev_spec))

    def check(keys: list[str]) -> None:
        expected = {f"dev-{object_key(o)}": o for o in render_manifests(dev_spec)}
        captured = _k8s(mocks)
        assert captured == expected
        assert keys == [k.removeprefix("dev-") for k in expected]
        for obj in captured.values():
            # Custom resources (Kueue's queues) are checked against their CRDs in test_validate.py.
            if obj["kind"] != "CustomResourceDefinition" and not obj["apiVersion"].startswith(f"{KUEUE_GROUP}/"):
                kubernetes_validate.validate(obj, dev_spec.kubernetes_version, strict=True)
        component = next(r for r in mocks.resources if r.typ == "agk:cluster:ClusterAddons")
        children = [r for r in mocks.resources if r.typ.startswith("kubernetes:")]
        assert component.name == "dev" and len(children) == len(expected)

    check(settled(addons.objects))


def _addons_stack(
    mocks: Capture, stacks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], list[str]]:
    from infra.addons_stack import build

    warnings: list[str] = []
    monkeypatch.setenv("AGK_STACKS_DIR", str(stacks_dir))
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warnings.append(message))
    pulumi.runtime.set_mocks(mocks, preview=True)
    config = parse_config(read_stack_file(stacks_dir / "Pulumi.dev-addons.yaml"))
    return build(config), warnings


def test_addons_stack_builds_from_the_cluster_stack_file(stacks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = prepare_cluster("dev", load_stack(stacks_dir, "dev"), stacks_dir).addons
    ids = {
        "tenant_id": "11111111-1111-1111-1111-111111111111",
        "subscription_id": "22222222-2222-2222-2222-222222222222",
        "controller_client_id": "33333333-3333-3333-3333-333333333333",
        "remediation_client_id": "44444444-4444-4444-4444-444444444444",
    }
    mocks = Capture(
        {"addons_spec": spec.to_json(), "kubeconfig": yaml.safe_dump({"apiVersion": "v1"}), "cloud_ids": ids}
    )
    outputs, warnings = _addons_stack(mocks, stacks_dir, monkeypatch)
    deployed = replace(spec, cloud=replace(spec.cloud, **ids))

    def check(args: list[Any]) -> None:
        objects, teams, current = args
        assert current is True
        ref = next(r for r in mocks.resources if r.typ == "pulumi:pulumi:StackReference")
        provider = next(r for r in mocks.resources if r.typ == "pulumi:providers:kubernetes")
        assert ref.name == "dev-ref" and provider.name == "dev-k8s"
        assert "apiVersion" in provider.inputs["kubeconfig"]
        assert teams == ["research"]
        assert objects == [object_key(o) for o in render_manifests(deployed)]
        assert outputs["cluster_stack"] == "dev"
        # The deployed cluster stack's identities fill the last placeholders: nothing to warn about.
        assert spec.placeholders and not deployed.placeholders and warnings == []
        secret = _k8s(mocks)["dev-addons-secret-kube-system-azure-cloud-provider"]
        azure = json.loads(secret["stringData"]["azure.json"])
        assert (azure["tenantId"], azure["userAssignedIdentityID"]) == (ids["tenant_id"], ids["controller_client_id"])
        svc = _k8s(mocks)["dev-addons-service-kube-system-kube-dns"]
        assert svc["spec"]["clusterIP"] == "172.20.0.10"

    check(settled(pulumi.Output.all(outputs["objects"], outputs["team_namespaces"], outputs["cluster_stack_current"])))


@pytest.mark.parametrize("exported", ["older", "none"])
def test_addons_stack_warns_when_the_cluster_stack_is_behind(
    exported: str, stacks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = prepare_cluster("dev", load_stack(stacks_dir, "dev"), stacks_dir).addons
    ref_outputs: dict[str, Any] = {"kubeconfig": "apiVersion: v1"}
    if exported == "older":  # exported by an older toolkit: no DNS in it
        ref_outputs["addons_spec"] = {k: v for k, v in spec.to_json().items() if k != "dns"}
    mocks = Capture(ref_outputs)
    outputs, warnings = _addons_stack(mocks, stacks_dir, monkeypatch)

    def check(args: list[Any]) -> None:
        objects, current = args
        assert current is False
        # Nothing the objects are built from comes through the reference, so all of them exist.
        assert objects == [object_key(o) for o in render_manifests(spec)] and len(_k8s(mocks)) == len(objects)
        stale = [w for w in warnings if w != placeholder_warning("dev-addons", spec)]
        assert len(stale) == 1
        assert stale[0].startswith("dev: its exported addons_spec differs from its stack file: run `pulumi up")

    check(settled(pulumi.Output.all(outputs["objects"], outputs["cluster_stack_current"])))


def test_addons_stack_refuses_a_non_cluster_stack(stacks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.addons_stack import cluster_spec

    monkeypatch.setenv("AGK_STACKS_DIR", str(stacks_dir))
    with pytest.raises(ConfigError) as err:
        cluster_spec("hub")
    assert str(err.value) == ("azure-gpu-k8s:addons_stack.cluster_stack: 'hub' is a hub stack: name a cluster stack")


def test_addons_stack_spec_equals_the_cluster_stacks_export(stacks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the add-ons stack computes from the file is what `pulumi up --stack dev` exports."""
    from infra.addons_stack import cluster_spec, matches

    doc = export_state("dev", stacks_dir)
    stack = next(r for r in doc["deployment"]["resources"] if r["type"] == "pulumi:pulumi:Stack")
    exported = stack["outputs"]["addons_spec"]
    monkeypatch.setenv("AGK_STACKS_DIR", str(stacks_dir))
    spec = cluster_spec("organization/azure-gpu-k8s/dev")
    assert AddonsSpec.from_json(exported) == spec
    assert matches(exported, spec)
    assert spec.dns.service_ip == str(cluster_addresses(plan_stack(stacks_dir, "dev")).dns_service_ip)


def test_cluster_domain_is_the_kubelets(stacks_dir: Path) -> None:
    prep = prepare_cluster("prod-7500", load_stack(stacks_dir, "prod-7500"), stacks_dir)
    assert prep.addons.dns.cluster_domain == prep.bootstrap.cluster_domain
    assert prep.addons.dns.service_ip == str(prep.bootstrap.dns_service_ip)
