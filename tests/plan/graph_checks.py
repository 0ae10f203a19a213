"""Checks every planned graph must pass, whatever program produced it."""

from __future__ import annotations

import re
from typing import Any

URN = re.compile(
    r"^urn:pulumi:(?P<stack>[^:]+)::(?P<project>[^:]+)::(?P<type>[^:]+:[^:]+:[^:$]+(\$[^:]+:[^:]+:[^:$]+)*)::(?P<name>.+)$"
)


def check_graph(state: dict[str, Any], stack: str, project: str) -> None:
    assert state["version"] == 3
    resources = state["deployment"]["resources"]
    urns = [r["urn"] for r in resources]
    assert len(urns) == len(set(urns)), "duplicate URNs"
    assert resources[0]["type"] == "pulumi:pulumi:Stack"
    assert resources[0]["urn"] == f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"
    seen: set[str] = set()
    for res in resources:
        match = URN.match(res["urn"])
        assert match, res["urn"]
        assert (match["stack"], match["project"]) == (stack, project)
        assert match["type"].split("$")[-1] == res["type"]
        assert "pulumi:pulumi:Stack$" not in res["urn"], "the root stack's type is never part of a URN"
        # Export order: everything a resource points at comes before it.
        for ref in [res.get("parent"), *res.get("dependencies", [])]:
            if ref:
                assert ref in seen, f"{res['urn']} -> {ref}"
        if res.get("parent") and not res["parent"].endswith(f"pulumi:pulumi:Stack::{project}-{stack}"):
            parent_type = URN.match(res["parent"])["type"]  # type: ignore[index]
            assert match["type"] == f"{parent_type}${res['type']}"
        if res.get("provider"):
            provider_urn, _, provider_id = res["provider"].rpartition("::")
            assert provider_urn in seen and provider_id
            provider = next(r for r in resources if r["urn"] == provider_urn)
            assert provider["id"] == provider_id and provider["type"].startswith("pulumi:providers:")
        if res["custom"] and not res["type"].startswith("pulumi:providers:"):
            assert res.get("provider"), f"{res['urn']} has no provider"
        seen.add(res["urn"])
