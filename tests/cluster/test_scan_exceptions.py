"""The add-ons' answers to Checkov (modules/cluster/scan_exceptions.py): every row names an object both shipped
clusters render, and every answer is an annotation Checkov can read. `make lint` runs Checkov itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from modules.cluster.manifests import render_manifests
from modules.cluster.objects.common import Obj
from modules.cluster.scan_exceptions import ANNOTATION, SKIPS, key_of
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster

STACKS = Path(__file__).resolve().parents[2] / "stacks"


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {s: render_manifests(prepare_cluster(s, load_stack(STACKS, s), STACKS).addons) for s in ("dev", "prod-7500")}


def test_every_row_names_an_object(rendered: dict[str, list[Obj]]) -> None:
    # In some cluster: a feature one stack turns off (workload identity on prod-7500) keeps its rows.
    keys = {key_of(o) for objs in rendered.values() for o in objs}
    wild = {(k, ns) for k, ns, _ in keys}
    stale = [row for row in SKIPS if row not in keys and not (row[2] == "*" and row[:2] in wild)]
    assert not stale, f"scan_exceptions.SKIPS rows that name no object of any cluster: {stale}"


def test_answers_are_annotations_checkov_reads(rendered: dict[str, list[Obj]]) -> None:
    answered = set()
    for objs in rendered.values():
        for obj in objs:
            notes = {k: v for k, v in obj["metadata"].get("annotations", {}).items() if k.startswith(ANNOTATION)}
            for value in notes.values():
                # Checkov: `annotation.split("=")` into exactly (check, comment).
                check, comment = value.split("=")
                assert check.startswith(("CKV_K8S_", "CKV2_K8S_")) and comment, value
            # Never on the pod template: a new annotation there would restart every pod.
            template = obj.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
            assert not any(k.startswith(ANNOTATION) for k in template)
            if notes:
                answered.add(key_of(obj))
    # Every row is written onto its object in some cluster (the wildcard rows onto each object they cover).
    assert {row for row in SKIPS if row[2] != "*"} <= answered
