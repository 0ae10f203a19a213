"""Mock-runtime tier: the resources Pulumi would create are exactly the builders' objects."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pulumi
import yaml

from infra.config import parse_config, read_stack_file
from modules.cluster.component import ClusterAddons, ClusterAddonsArgs, object_key
from modules.cluster.manifests import render_manifests
from modules.cluster.spec import AddonsSpec


class Capture(pulumi.runtime.Mocks):
    def __init__(self, outputs: dict[str, Any] | None = None) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []
        self.outputs = outputs or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        if args.typ == "pulumi:pulumi:StackReference":
            return f"{args.name}_id", {**args.inputs, "outputs": self.outputs}
        return f"{args.name}_id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def _ints(value: Any) -> Any:
    """The engine carries numbers as doubles; the builders use ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _k8s(mocks: Capture) -> dict[str, dict[str, Any]]:
    return {r.name: _ints(r.inputs) for r in mocks.resources if r.typ.startswith("kubernetes:")}


@pulumi.runtime.test
def test_captured_resources_equal_the_builders_objects(dev_spec: AddonsSpec) -> Any:
    mocks = Capture()
    pulumi.runtime.set_mocks(mocks, preview=False)
    addons = ClusterAddons("dev", ClusterAddonsArgs(spec=dev_spec))

    def check(keys: list[str]) -> None:
        expected = {f"dev-{object_key(o)}": o for o in render_manifests(dev_spec)}
        captured = _k8s(mocks)
        assert captured == expected
        assert keys == [k.removeprefix("dev-") for k in expected]
        for obj in captured.values():
            if obj["kind"] != "CustomResourceDefinition":
                kubernetes_validate.validate(obj, dev_spec.kubernetes_version, strict=True)
        component = next(r for r in mocks.resources if r.typ == "agk:cluster:ClusterAddons")
        children = [r for r in mocks.resources if r.typ.startswith("kubernetes:")]
        assert component.name == "dev" and len(children) == len(expected)

    return addons.objects.apply(check)


@pulumi.runtime.test
def test_addons_stack_reads_the_cluster_stack(dev_spec: AddonsSpec, stacks_dir: Any) -> Any:
    from infra.addons_stack import build

    mocks = Capture({"addons_spec": dev_spec.to_json(), "kubeconfig": yaml.safe_dump({"apiVersion": "v1"})})
    pulumi.runtime.set_mocks(mocks, preview=False)
    config = parse_config(read_stack_file(stacks_dir / "Pulumi.dev-addons.yaml"))
    outputs = build(config)

    def check(args: list[Any]) -> None:
        objects, teams = args
        ref = next(r for r in mocks.resources if r.typ == "pulumi:pulumi:StackReference")
        provider = next(r for r in mocks.resources if r.typ == "pulumi:providers:kubernetes")
        assert ref.name == "dev-ref" and provider.name == "dev-k8s"
        assert "apiVersion" in provider.inputs["kubeconfig"]
        assert teams == ["research"]
        assert len(objects) == len(render_manifests(dev_spec)) == len(_k8s(mocks))
        assert outputs["cluster_stack"] == "dev"

    return pulumi.Output.all(outputs["objects"], outputs["team_namespaces"]).apply(check)
