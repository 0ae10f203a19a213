"""A host's two deliveries as Pulumi outputs: its bundle (the Key Vault secret's value, secret) and its
customData (the stable bootstrap that fetches it; nothing secret, so a plan can show and compare it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pulumi

from modules.azure.pki import ClusterPki
from modules.bootstrap import delivery
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.delivery import document, encode
from modules.bootstrap.host.boot import HostConfig
from modules.bootstrap.roles import Role, bundle
from modules.bootstrap.userdata import encode_custom_data, render_user_data


def bundle_parts(
    ctx: BootstrapContext,
    pki: ClusterPki,
    role: Role,
    name: str,
    facts: Mapping[str, pulumi.Input[str]] | None = None,
) -> list[pulumi.Output[str]]:
    """The values of the ``PARTS`` Key Vault secrets of ``role`` host ``name`` (a pool name for pools),
    Pulumi secrets: they hold private keys. ``facts`` fills the bundle's fact files (values only a
    deploy knows). Raises ``KeyError`` for an unknown name or a missing fact; the encoding refuses a
    bundle that does not fit."""
    node = bundle(ctx, role, name)
    given = facts or {}
    absent = [f.fact for f in node.facts if f.fact not in given]
    if absent:
        raise KeyError(f"{role} {name}: the bundle needs deploy-time value {absent[0]!r}")
    pems = pulumi.Output.all(**{s.secret: pki.secrets[s.secret] for s in node.secrets})
    known = pulumi.Output.all(**{f.fact: given[f.fact] for f in node.facts})

    # Encoded once; each secret takes its part.
    encoded = pulumi.Output.all(pems, known).apply(lambda both: encode(document(node, both[0], both[1])))

    def part(index: int) -> Callable[[list[str]], str]:
        return lambda parts: parts[index]

    return [pulumi.Output.secret(encoded.apply(part(i))) for i in range(delivery.PARTS)]


def custom_data(
    ctx: BootstrapContext,
    role: Role,
    name: str,
    *,
    vault_uri: pulumi.Input[str],
    secret_name: pulumi.Input[str],
    client_id: pulumi.Input[str],
    after: Sequence[pulumi.Input[Any]] = (),
) -> pulumi.Output[str]:
    """Base64 cloud-config of the machine(s) booting as ``name``. ``after``: outputs of what must exist
    before the machine first boots (its read grant, the vault's private endpoint and DNS): the VM or
    scale set that takes this customData depends on them."""
    node = bundle(ctx, role, name)

    def encoded(values: list[Any]) -> str:
        host = HostConfig(role, name, ctx.cluster, str(values[0]), str(values[1]), str(values[2]))
        return encode_custom_data(render_user_data(ctx, node, host), where=f"{role} {name}")

    return pulumi.Output.all(vault_uri, secret_name, client_id, *after).apply(encoded)
