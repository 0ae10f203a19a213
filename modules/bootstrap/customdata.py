"""customData for the VMs: one host's (or pool's) cloud-config with its PKI secrets, base64, secret."""

from __future__ import annotations

import pulumi

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.pki_component import ClusterPki
from modules.bootstrap.roles import Role, bundle
from modules.bootstrap.userdata import encode_custom_data, render_user_data


def custom_data(ctx: BootstrapContext, pki: ClusterPki, role: Role, name: str) -> pulumi.Output[str]:
    """Base64 cloud-config for ``role`` host ``name`` (etcd, events-etcd, apiserver, prometheus, nat:
    a host name such as ``dev-etcd-0``; gpu-node, system-node: a pool name such as ``h100`` or
    ``system``). Secret, since it carries private keys. Raises ``KeyError`` for an unknown name.
    """
    node = bundle(ctx, role, name)
    needed = {s.secret: pki.secrets[s.secret] for s in node.secrets}

    def encode(pems: dict[str, str]) -> str:
        return encode_custom_data(render_user_data(ctx, node, pems), where=f"{role} {name}")

    return pulumi.Output.secret(pulumi.Output.all(**needed).apply(encode))
