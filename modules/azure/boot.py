"""A minimal valid cloud-config, for hosts whose role has no bootstrap template (never empty)."""

from __future__ import annotations

import base64


def minimal_cloud_config(hostname: str, role: str) -> str:
    """Base64 cloud-config that sets the hostname and records the role; cloud-init schema-valid."""
    text = (
        "#cloud-config\n"
        f"hostname: {hostname}\n"
        "package_update: true\n"
        "write_files:\n"
        "  - path: /etc/agk/role\n"
        f"    content: {role}\n"
        "    permissions: '0644'\n"
    )
    return base64.b64encode(text.encode()).decode()
