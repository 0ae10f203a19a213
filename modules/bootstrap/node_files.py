"""The files a node's bundle carries, as data (pure): a plain file, a secret from the PKI, a deploy-time fact.

The role builders (roles/) and the parts they add on some roles (etcd_backup.py, node_tokens.py) all
make these; they live apart from roles/ so that those parts need not import the roles that use them.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from modules.bootstrap.host import boot as host_boot


@dataclass(frozen=True)
class NodeFile:
    path: str
    """Absolute path on the node."""
    rel: str
    """Where ``agk render`` writes it, under ``DIR/nodes/<role>/``."""
    content: str
    mode: str = "0644"
    boot_only: bool = False
    """Written at first boot only: a boot step removes it, so a later sync must not put it back."""


@dataclass(frozen=True)
class SecretFile:
    path: str
    secret: str
    """PKI secret name (``cert:<name>``, ``key:<name>``, ``pub:<name>``)."""

    @property
    def mode(self) -> str:
        return "0600" if self.secret.startswith("key:") else "0644"


@dataclass(frozen=True)
class FactFile:
    """A file holding a value only a deploy knows (not secret: e.g. the storage account's URL, whose name
    comes from the subscription), filled in by the cluster stack (modules/azure/customdata.py bundle_parts
    ``facts``)."""

    path: str
    fact: str
    mode: str = "0644"


def host_program(name: str) -> NodeFile:
    text = resources.files("modules.bootstrap.host").joinpath(name).read_text()
    return NodeFile(f"{host_boot.LIB}/{name}", f"lib/{name}", text)
