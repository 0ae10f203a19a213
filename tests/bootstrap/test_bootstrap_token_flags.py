"""Render tier: the control plane accepts bootstrap tokens and cleans up the expired ones."""

from __future__ import annotations

import yaml

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import bundle, names


def _command(ctx: BootstrapContext, manifest: str) -> list[str]:
    node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
    pod = yaml.safe_load(node.file(f"manifests/{manifest}.yaml").content)
    return list(pod["spec"]["containers"][0]["command"])


def test_the_apiserver_authenticates_bootstrap_tokens(ctx: BootstrapContext) -> None:
    assert "--enable-bootstrap-token-auth=true" in _command(ctx, "kube-apiserver")


def test_the_controller_manager_deletes_expired_tokens(ctx: BootstrapContext) -> None:
    # tokencleaner is off by default; '*' alone would not start it.
    controllers = next(f for f in _command(ctx, "kube-controller-manager") if f.startswith("--controllers="))
    assert "tokencleaner" in controllers.removeprefix("--controllers=").split(",")
