"""A boot downloads nothing from the internet (issue 21): every host's software comes from its node image.

Every bundle of every shipped stack (each host and pool, every role), the customData each host boots from (stage 0)
and the hub's jump hosts' cloud-config are walked, and every place a boot could reach out is collected: each URL
and each network program's target in the files it writes (comments aside) and in its boot steps, and every
package-manager run (apt reaches the distribution's archive on the internet). Each URL must be inside the
cluster's VNet or one of Azure's platform endpoints (IMDS at 169.254.169.254, the wire server, the private-link
names of the vault and of blob storage that resolve to the VNet's private endpoints), or loopback.

On the main branch before this change the same walk finds the kubelet's pkgs.k8s.io repository, Azure CNI's and
the CNI plugins' GitHub releases, Prometheus' and Alertmanager's, Grafana's apt repository, and apt-get runs.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agk.plan.engine import REPO_ROOT
from modules.azure.boot import minimal_cloud_config
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.userdata import offline_host, render_user_data
from modules.stackplan.config import load_stack, stack_names
from modules.stackplan.prepare import prepare_cluster

STACKS = REPO_ROOT / "stacks"
Net = ipaddress.IPv4Network | ipaddress.IPv6Network
URL = re.compile(r"\b(?:https?|ftp)://[^\s\"'<>)}\]\\,;]+")
PACKAGE_MANAGERS = re.compile(r"(?<![\w.-])(apt-get|apt|dpkg -i|pip3?|snap|wget|go (?:get|install))\s+\S")
PLATFORM = (
    ipaddress.ip_network("169.254.169.254/32"),  # IMDS
    ipaddress.ip_network("168.63.129.16/32"),  # the wire server
    ipaddress.ip_network("127.0.0.0/8"),
)
AUDIENCES = ("https://storage.azure.com/", "https://vault.azure.net")
"""OAuth resource identifiers a host asks IMDS for a token for (modules/bootstrap/host/imds.py): names, not
requests; the token is then used against the private-link names below."""
ENTRA_ISSUER = re.compile(r"https://login\.microsoftonline\.com/[0-9a-f-]{36}/v2\.0")
"""Microsoft Entra ID's token issuer for one tenant. The API server's structured authentication config names it
as a JWT issuer: the API server fetches its discovery document and keys at run time to validate researchers'
tokens (an Azure platform endpoint reached through the NAT), not a download a boot depends on. Accepted only as
an AuthenticationConfiguration's ``jwt[].issuer.url`` (``_issuers``), nowhere else."""
IN_CLUSTER = ".svc.cluster.local"
"""Service names inside the cluster (the service account issuer): resolved by CoreDNS to the service CIDR."""
PRIVATE_LINK = (".vault.azure.net", ".blob.core.windows.net", ".privatelink.vaultcore.azure.net")
"""Names that resolve to the VNet's private endpoints (the vault's and the storage account's: the cluster's
private DNS zones; public access is off on both, modules/azure/keyvault.py and storage.py)."""


def _without_comments(path: str, text: str) -> str:
    """The text a program acts on: shell, systemd, YAML and TOML comment lines dropped (a URL in a comment is
    documentation); Python keeps its string literals (a URL there is used) but drops its comments."""
    out = []
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("#", ";", "//", "Documentation=")) and not stripped.startswith("#!"):
            continue
        if path.endswith(".py") and " # " in line:
            line = line.split(" # ", 1)[0]
        out.append(line)
    return "\n".join(out)


def _docstrings_out(text: str) -> str:
    """A Python program without its docstrings (they cite sources: documentation, not requests)."""
    return re.sub(r'^\s*(?:[rRbBuU]?"""[\s\S]*?""")', "", text, flags=re.MULTILINE)


def _host(url: str) -> str:
    host = url.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host.strip("[]")


def _inside(host: str, vnet: list[Net]) -> bool:
    if host in ("localhost",) or host.endswith((*PRIVATE_LINK, IN_CLUSTER)) or "{" in host or "$" in host:
        # A templated host is filled from host.json or the bundle: the vault's URI and the storage URL, both
        # private-link names (checked where they are made: keyvault.py, storage.py).
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(ip in net for net in (*PLATFORM, *vnet))


def _issuers(text: str) -> set[str]:
    """The Entra issuer URLs an API server's AuthenticationConfiguration validates tokens against (ENTRA_ISSUER)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return set()
    if not isinstance(doc, dict) or doc.get("kind") != "AuthenticationConfiguration":
        return set()
    urls = {(jwt.get("issuer") or {}).get("url") for jwt in doc.get("jwt") or []}
    return {u for u in urls if isinstance(u, str) and ENTRA_ISSUER.fullmatch(u)}


def _texts(stack: str) -> Iterator[tuple[str, str, list[Net]]]:
    """(where, text) of everything a host of ``stack`` boots with, and the stack's own address space."""
    config = load_stack(STACKS, stack)
    if config.kind == "hub":
        assert config.hub is not None and config.network is not None
        vnet = [ipaddress.ip_network(c) for c in config.network.address_space]
        for i in range(config.hub.jump_hosts):
            yield f"{stack} jump {i}", minimal_cloud_config(f"{stack}-jump-{i}", "jump"), vnet
        return
    if config.kind != "cluster":
        return
    prep = prepare_cluster(stack, config, STACKS)
    ctx = prep.bootstrap
    vnet = [ipaddress.ip_network(str(c)) for c in ctx.internal_cidrs]
    for role in ROLES:
        for name in names(ctx, role):
            node = bundle(ctx, role, name)
            where = f"{stack} {role} {name}"
            for f in node.files:
                text = _without_comments(f.path, f.content)
                if f.path.endswith(".py"):
                    text = _docstrings_out(text)
                yield f"{where} {f.path}", text, vnet
            for step in node.steps:
                yield f"{where} step {step.name}", step.command, vnet
            for line in node.before_steps:
                yield f"{where} before the steps", line, vnet
            user_data = render_user_data(ctx, node, offline_host(ctx, node))
            yield f"{where} customData", _docstrings_out(_without_comments("user-data.yaml", user_data)), vnet


def reach(stacks: list[str]) -> list[str]:
    """Every place a boot of these stacks would reach outside the VNet and Azure's platform endpoints."""
    found = []
    for stack in stacks:
        for where, text, vnet in _texts(stack):
            issuers = _issuers(text)
            for url in URL.findall(text):
                if url not in AUDIENCES and url not in issuers and not _inside(_host(url), vnet):
                    found.append(f"{where}: {url}")
            for match in PACKAGE_MANAGERS.finditer(text):
                found.append(f"{where}: runs {match.group(1)} (the distribution's archive is on the internet)")
    return sorted(set(found))


def test_the_walk_sees_every_stack_with_hosts() -> None:
    shipped = stack_names(STACKS)
    walked = {where.split(" ", 1)[0] for s in shipped for where, _, _ in _texts(s)}
    assert walked == {"dev", "prod-7500", "hub"}, walked


@pytest.mark.parametrize("stack", ["dev", "prod-7500", "hub"])
def test_a_boot_downloads_nothing_from_the_internet(stack: str) -> None:
    assert reach([stack]) == []


def test_the_walk_finds_a_download(tmp_path: Path) -> None:
    """The walk is not blind: a URL on the internet, or an apt-get in a step, is found where it is."""
    vnet = [ipaddress.ip_network("10.16.0.0/20")]
    assert not _inside("github.com", vnet)
    assert not _inside("10.17.0.4", vnet)
    assert _inside("10.16.3.4", vnet) and _inside("169.254.169.254", vnet)
    assert _inside("dev-keys.vault.azure.net", vnet)
    text = "curl -fsSL https://pkgs.k8s.io/core:/stable:/v1.35/deb/Release.key\n/opt/agk/apt-install.sh kubelet"
    assert URL.findall(_without_comments("x.sh", text)) == ["https://pkgs.k8s.io/core:/stable:/v1.35/deb/Release.key"]
    assert not URL.findall(_without_comments("x.sh", "# see https://kubernetes.io/docs/\n"))
    assert [m.group(1) for m in PACKAGE_MANAGERS.finditer("sh -c 'apt-get -q update'")] == ["apt-get"]
