"""Host tier: sync.py on the bundles agk renders, after a first boot. The steady state of every role is
"nothing to do": a file a boot step removes stays removed, and a pool's runtime settings wait for a
reimage instead of restarting kubelets under running jobs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.delivery import document, placeholder_facts, placeholder_pems
from modules.bootstrap.host import sync
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.roles.parts import UNBLOCK_STEP
from tests.bootstrap.conftest import context
from tests.bootstrap.host.test_sync import Host


@pytest.fixture(scope="module")
def dev() -> BootstrapContext:
    return context("dev")


def _doc(ctx: BootstrapContext, role: str, name: str) -> dict[str, Any]:
    node = bundle(ctx, role, name)  # type: ignore[arg-type]
    return document(node, placeholder_pems(node), placeholder_facts(ctx, node))


def _booted(host: Host, doc: dict[str, Any]) -> None:
    """What sync.py boot leaves: every file written, then the steps (here only the one that removes a file)."""
    out = sync.Outcome()
    sync._write(doc, [f["path"] for f in doc["files"]], {f["path"]: "boot" for f in doc["files"]}, host.rt, out)
    assert UNBLOCK_STEP.command == f"rm -f {PATHS.policy_rc}"
    os.unlink(host.root / PATHS.policy_rc.lstrip("/"))


# Every role, from the stack that has it (dev has no events etcd).
ROLE_STACKS = [("dev", r) for r in ROLES if r != "events-etcd"] + [("prod-7500", "events-etcd")]


@pytest.mark.parametrize(("stack", "role"), ROLE_STACKS)
def test_after_the_first_boot_a_sync_of_the_same_bundle_does_nothing(stack: str, role: str, tmp_path: Path) -> None:
    ctx = context(stack)
    doc = _doc(ctx, role, names(ctx, role)[0])  # type: ignore[arg-type]
    host = Host(tmp_path)
    _booted(host, doc)
    out = sync.apply(doc, host.rt)
    assert (out.written, out.done, out.deferred, out.failed) == ([], [], [], []), host.lines
    # The service-start denial stays lifted: package upgrades restart their services again.
    assert not (tmp_path / PATHS.policy_rc.lstrip("/")).exists()


def _changed_kubelet(doc: dict[str, Any]) -> dict[str, Any]:
    changed = json.loads(json.dumps(doc))
    for f in changed["files"]:
        if f["path"] == PATHS.kubelet_config:
            f["content"] += "# changed\n"
    return changed


@pytest.mark.parametrize(("role", "applied"), [("gpu-node", False), ("system-node", False), ("apiserver", True)])
def test_a_kubelet_setting_reaches_running_kubelets_only_outside_the_pools(
    dev: BootstrapContext, role: str, applied: bool, tmp_path: Path
) -> None:
    doc = _doc(dev, role, names(dev, role)[0])  # type: ignore[arg-type]
    host = Host(tmp_path)
    _booted(host, doc)
    before = (tmp_path / PATHS.kubelet_config.lstrip("/")).read_text()
    out = sync.apply(_changed_kubelet(doc), host.rt)
    # A pool node keeps the file it booted with (the next reimage brings the new one): not restarted,
    # and not waiting on disk for the next unplanned kubelet restart either.
    assert out.written == ([PATHS.kubelet_config] if applied else [])
    assert ((tmp_path / PATHS.kubelet_config.lstrip("/")).read_text() != before) is applied
    assert (("systemctl", "restart", "kubelet.service") in host.calls) is applied, host.calls
