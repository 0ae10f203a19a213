"""The admin kubeconfig the cluster stack exports (as a secret) for its `<cluster>-addons` stack."""

from __future__ import annotations

import base64

import yaml


def _b64(pem: str) -> str:
    return base64.b64encode(pem.encode()).decode()


def admin_kubeconfig(cluster: str, server: str, ca_pem: str, cert_pem: str, key_pem: str) -> str:
    """A self-contained kubeconfig (certificates inline) for ``server``."""
    user = f"{cluster}-admin"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [
            {"name": user, "user": {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}}
        ],
        "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
        "current-context": f"{user}@{cluster}",
    }
    return yaml.safe_dump(doc, sort_keys=False)
