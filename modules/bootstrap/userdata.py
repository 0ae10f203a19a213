"""A node bundle plus its PKI secrets as one cloud-config document (pure)."""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping
from dataclasses import dataclass

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import NodeBundle
from modules.bootstrap.templating import render
from modules.errors import AgkError

AZURE_CUSTOM_DATA_LIMIT = 65_535
"""Azure's customData limit: 64 KB of base64 text (osProfile.customData)."""


@dataclass(frozen=True)
class _WriteFile:
    path: str
    mode: str
    content: str


def placeholder_secrets(bundle: NodeBundle) -> dict[str, str]:
    """Stand-ins for offline rendering (``agk render``): real PEMs exist only at deploy."""
    return {
        s.secret: f"# {s.secret}: issued by ClusterPki and delivered in customData at deploy\n" for s in bundle.secrets
    }


def render_user_data(ctx: BootstrapContext, bundle: NodeBundle, secrets: Mapping[str, str]) -> str:
    """The ``#cloud-config`` document for ``bundle``; ``secrets`` maps PKI secret names to PEM text."""
    missing = [s.secret for s in bundle.secrets if s.secret not in secrets]
    if missing:
        raise AgkError(f"{bundle.role} {bundle.name}: no PKI secret {missing[0]!r}: issue it in ClusterPki")
    files = [_WriteFile(f.path, f.mode, f.content) for f in bundle.files]
    files += [_WriteFile(s.path, s.mode, secrets[s.secret]) for s in bundle.secrets]
    return render(
        "user-data.yaml.j2",
        role=bundle.role,
        name=bundle.name,
        cluster=ctx.cluster,
        hostname=bundle.hostname or "",
        packages=bundle.packages,
        disk=bundle.disk,
        files=files,
        runcmd=bundle.runcmd,
    )


def encode_custom_data(user_data: str, *, where: str) -> str:
    """base64 for osProfile.customData, gzipped (cloud-init detects it) only when plain is too big."""
    plain = base64.b64encode(user_data.encode()).decode()
    if len(plain) <= AZURE_CUSTOM_DATA_LIMIT:
        return plain
    packed = base64.b64encode(gzip.compress(user_data.encode(), mtime=0)).decode()
    if len(packed) > AZURE_CUSTOM_DATA_LIMIT:
        raise AgkError(
            f"{where}: user-data is {len(packed):,} base64 bytes even gzipped, over Azure's "
            f"{AZURE_CUSTOM_DATA_LIMIT:,}: move files out of cloud-init (e.g. into the image)"
        )
    return packed
