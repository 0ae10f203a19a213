"""Real-tool tier: every object validated by kubernetes-validate (strict) for the declared version."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from modules.bootstrap import versions
from modules.cluster.config import AddonsConfig
from modules.cluster.manifests import render_examples, render_manifests
from modules.cluster.objects import gang, health
from modules.cluster.spec import AddonsSpec


def _strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (the API server would silently prune them)."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for key, value in node.items():
                if key != "metadata":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


def _validate(spec: AddonsSpec, objs: list[dict[str, Any]]) -> int:
    crds = {
        (o["spec"]["group"], v["name"], o["spec"]["names"]["kind"]): v["schema"]["openAPIV3Schema"]
        for o in objs
        if o["kind"] == "CustomResourceDefinition"
        for v in o["spec"]["versions"]
    }
    for obj in objs:
        group, _, version = obj["apiVersion"].rpartition("/")
        if (group, version, obj["kind"]) in crds:
            jsonschema.Draft202012Validator(_strict(crds[group, version, obj["kind"]])).validate(obj)
        else:
            kubernetes_validate.validate(obj, spec.kubernetes_version, strict=True)
    return len(objs)


@pytest.mark.parametrize("which", ["dev_spec", "prod_spec"])
def test_every_object_is_valid_for_the_declared_version(which: str, request: pytest.FixtureRequest) -> None:
    spec: AddonsSpec = request.getfixturevalue(which)
    objs = render_manifests(spec)
    examples = render_examples(spec)
    assert _validate(spec, objs + examples) == len(objs) + len(examples) > 30


@pytest.mark.parametrize("minor", versions.SUPPORTED)
def test_every_object_is_valid_for_every_supported_minor(minor: str, make_spec: Callable[..., AddonsSpec]) -> None:
    # Strict schemas of that minor (kubernetes-validate ships 1.35 to 1.37); the gang scheduler only
    # where the versions table has one within the skew rule.
    gang = versions.TABLE[minor].gang_scheduler is not None
    unverified = versions.unverified_rows(minor)
    if unverified:
        # A minor whose kubelet (or other row) has no published sha256 yet cannot be planned: the nodes' images
        # could not be verified. The plan says which rows, and nothing is rendered for it.
        with pytest.raises(versions.Unverified) as refused:
            make_spec("dev", version=minor, addons=AddonsConfig(gang={"enabled": gang}))
        assert any(f"{a.name} {a.version}" in str(refused.value) for a in unverified), str(refused.value)
        return
    spec = make_spec("dev", version=minor, addons=AddonsConfig(gang={"enabled": gang}))
    assert spec.kubernetes_version == minor
    objs = render_manifests(spec)
    examples = render_examples(spec)
    assert _validate(spec, objs + examples) == len(objs) + len(examples) > 30


def test_a_wrong_field_is_caught(dev_spec: AddonsSpec) -> None:
    obj = next(o for o in render_manifests(dev_spec) if o["kind"] == "DaemonSet")
    obj["spec"]["template"]["spec"]["tolerationz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, dev_spec.kubernetes_version, strict=True)
    group = gang.example(dev_spec, dev_spec.teams[0])[0]
    group["spec"]["minMembers"] = 3
    crd = gang.podgroup_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(_strict(crd)).validate(group)


def test_mutating_policy_only_where_the_version_has_it(dev_spec: AddonsSpec, spec_135: AddonsSpec) -> None:
    def kinds(spec: AddonsSpec) -> set[str]:
        return {o["kind"] for o in render_manifests(spec)}

    assert "MutatingAdmissionPolicy" not in kinds(spec_135)
    assert {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds(dev_spec)  # 1.36, the default


def test_object_names_are_unique(prod_spec: AddonsSpec) -> None:
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in render_manifests(prod_spec)]
    assert len(keys) == len(set(keys))


def test_scheduler_config_enables_coscheduling(dev_spec: AddonsSpec) -> None:
    name = f"{dev_spec.gang.scheduler_name}-config"
    cm = next(o for o in render_manifests(dev_spec) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    profile = config["profiles"][0]
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert profile["schedulerName"] == dev_spec.gang.scheduler_name
    assert profile["plugins"]["multiPoint"] == {
        "enabled": [{"name": "Coscheduling"}],
        "disabled": [{"name": "PrioritySort"}],
    }


@pytest.mark.parametrize(
    ("line", "fatal"),
    [
        ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", True),
        ("NVRM: Xid (PCI:0001:00:00.0): 48, pid=9, An uncorrectable double bit error", True),
        ("NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, Graphics Engine Exception", False),
        ("NVRM: Xid (PCI:0000:3b:00): 119, pid=1, Timeout waiting for GSP", True),
        ("NVRM: Xid (PCI:0000:3b:00): 1190, pid=1, not an XID we list", False),
    ],
)
def test_xid_rule_matches_kernel_lines(dev_spec: AddonsSpec, line: str, fatal: bool) -> None:
    # node-problem-detector uses Go's RE2; this pattern uses only syntax RE2 and Python share.
    rule = health.xid_monitor(dev_spec)["rules"][0]["pattern"]
    assert bool(re.fullmatch(rule, line)) is fatal
