"""Every add-on object of dev and prod-7500 applies to the real API server, and applying again changes nothing.

The objects are what `agk render` writes to ``manifests/`` (the add-ons stack deploys the same list):
CRDs, ValidatingAdmissionPolicies and their bindings, RBAC, PriorityClasses, quotas, NetworkPolicies
and the workloads. ``kubectl apply --server-side`` runs each through the API server's decoding, schema
validation (CRD structural schemas and OpenAPI field validation: ``--validate=strict``) and admission;
``kubectl diff --server-side`` afterwards is the proof that a second apply would change nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agk.render import render_manifests_dir

from .cluster import ControlPlane
from .conftest import prepared, without_kueue_webhooks


def apply(cp: ControlPlane, folder: Path, *extra: str) -> tuple[int, str]:
    argv = ("apply", "--server-side", "--field-manager=agk", "--validate=strict", "-f", str(folder), *extra)
    run = cp.kubectl(*argv)
    if run.returncode != 0 and "ensure CRDs are installed first" in run.stderr:
        # kubectl maps every object before it sends any, so custom resources whose CRD this same apply creates
        # (Kueue's queues) are not mapped yet; Pulumi orders them by dependency. Once the CRDs are established,
        # the same apply again.
        cp.kubectl("wait", "--for=condition=established", "--timeout=120s", "crd", "--all")
        run = cp.kubectl(*argv)
    return run.returncode, run.stdout + run.stderr


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_every_rendered_object_applies_and_a_second_apply_changes_nothing(
    stack: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    cp: ControlPlane = request.getfixturevalue("dev_plane" if stack == "dev" else "prod_plane")
    paths = render_manifests_dir(prepared(stack).addons, tmp_path)
    folder = tmp_path / "manifests"
    removed = without_kueue_webhooks(folder)
    code, out = apply(cp, folder)
    assert code == 0, out
    applied = [line for line in out.splitlines() if line.endswith("serverside-applied")]
    assert len(applied) == len(paths) - len(removed), out
    assert policies(cp), "no ValidatingAdmissionPolicy was rendered"
    assert not [line for line in out.splitlines() if "Warning" in line], out

    diff = cp.kubectl("diff", "--server-side", "--field-manager=agk", "-f", str(folder))
    assert diff.returncode == 0, diff.stdout + diff.stderr  # 1: differences, >1: an error

    # The API server type-checks each policy's CEL against the types it matches, after the write:
    # a field that does not exist or a type mismatch is a warning in status, not a refusal.
    for name in policies(cp):
        status = wait_for(lambda n=name: checked(cp, n), f"type checking of {name}")
        assert not status.get("typeChecking", {}).get("expressionWarnings"), (name, status)


def policies(cp: ControlPlane) -> list[str]:
    got = cp.get("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies")
    return [p["metadata"]["name"] for p in got["items"]]


def checked(cp: ControlPlane, name: str) -> dict[str, Any] | None:
    got = cp.get(f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}")
    status: dict[str, Any] = got.get("status") or {}
    return status if status.get("observedGeneration") == got["metadata"]["generation"] else None


def wait_for(probe: Callable[[], dict[str, Any] | None], what: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (got := probe()) is None:
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.5)
    return got
