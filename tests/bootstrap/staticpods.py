"""What a static pod needs from its host: the paths its flags, config files and kubeconfigs name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names

_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
# Component configuration kinds whose clientConnection names a kubeconfig.
_CONFIG_KINDS = ("KubeSchedulerConfiguration", "KubeProxyConfiguration")


@dataclass(frozen=True)
class Volume:
    name: str
    host_path: str
    mount_path: str
    type: str


@dataclass(frozen=True)
class StaticPod:
    node: NodeBundle
    name: str
    pod: dict[str, Any]

    @property
    def volumes(self) -> tuple[Volume, ...]:
        spec = self.pod["spec"]
        host = {v["name"]: v["hostPath"] for v in spec["volumes"]}
        out = []
        for c in spec["containers"]:
            for m in c.get("volumeMounts", []):
                hp = host[m["name"]]
                out.append(Volume(m["name"], hp["path"], m["mountPath"], hp.get("type", "")))
        return tuple(out)

    def node_text(self, path: str) -> str | None:
        for f in self.node.files:
            if f.path == path:
                return f.content
        return None

    def referenced(self) -> dict[str, str]:
        """Every absolute path the pod's flags name, and what names it (flag, config or kubeconfig)."""
        out: dict[str, str] = {}
        for c in self.pod["spec"]["containers"]:
            for arg in c.get("command", []) + c.get("args", []):
                value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
                if _PATH.match(value):
                    out.setdefault(value, f"flag {arg.split('=', 1)[0]}")
        for path in list(out):
            self._follow(path, out)
        return out

    def kubeconfigs(self) -> tuple[str, ...]:
        return tuple(p for p, why in self.referenced().items() if self._is_kubeconfig(p))

    def _is_kubeconfig(self, path: str) -> bool:
        text = self.node_text(path)
        return text is not None and (yaml.safe_load(text) or {}).get("kind") == "Config"

    def _follow(self, path: str, out: dict[str, str]) -> None:
        text = self.node_text(path)
        if text is None or not path.endswith((".yaml", ".kubeconfig", ".conf")):
            return
        doc = yaml.safe_load(text) or {}
        if doc.get("kind") in _CONFIG_KINDS:
            kubeconfig = doc["clientConnection"]["kubeconfig"]
            out.setdefault(kubeconfig, f"{path} clientConnection.kubeconfig")
            self._follow(kubeconfig, out)
        if doc.get("kind") == "Config":
            for cluster in doc["clusters"]:
                out.setdefault(cluster["cluster"]["certificate-authority"], f"{path} certificate-authority")
            for user in doc["users"]:
                out.setdefault(user["user"]["client-certificate"], f"{path} client-certificate")
                out.setdefault(user["user"]["client-key"], f"{path} client-key")


def static_pods(ctx: BootstrapContext) -> list[StaticPod]:
    """Every static pod of every role's first host (hosts of a role share the same manifests)."""
    pods = []
    for role in ROLES:
        hosts = names(ctx, role)
        if not hosts:
            continue
        for pool_or_host in hosts if role in ("gpu-node", "system-node") else hosts[:1]:
            node = bundle(ctx, role, pool_or_host)
            for f in node.files:
                if f.path.startswith(PATHS.manifests + "/"):
                    pod = yaml.safe_load(f.content)
                    pods.append(StaticPod(node, f"{role}/{pool_or_host}/{pod['metadata']['name']}", pod))
    return pods


def under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")
