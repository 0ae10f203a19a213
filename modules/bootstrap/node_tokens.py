"""How pool nodes join with bootstrap tokens, as bundle contents (pure): the API servers' issuer (its
program, configuration, client certificate, unit and timer, the boot step that starts it) and each
pool's bootstrap kubeconfig, token settings and the boot step that waits for the first token.

Two files hold deploy-time facts, the names of the pools' token secrets in the cluster's vault (a
digest of the pool identity's principal id: modules/azure/keyvault.py ``secret_name``): they are
``FactFile`` s (``FACTS``) that the cluster stack fills in (modules/azure/customdata.py bundle_parts ``facts``);
offline (``agk render``, the size check) a stand-in name of the same length stands in.
The vault's URI and the host's identity are in /etc/agk/host.json already and are read from there.
Design and residual risk: docs/bootstrap-tokens.md.
"""

from __future__ import annotations

from collections.abc import Mapping

from modules.bootstrap import pki
from modules.bootstrap.context import PORTS, BootstrapContext
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.host import node_token
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import FactFile, NodeFile, SecretFile, host_program
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render

LIBRARY = ("bootstrap_tokens.py",)
"""Host programs only the API servers need (node_token.py, which the nodes run, is in roles/upkeep.py HOST_PROGRAMS)."""
ISSUER_UNIT = "agk-bootstrap-tokens.service"
ISSUER_TIMER = "agk-bootstrap-tokens.timer"
ISSUER_TIMEOUT_S = 300
ISSUER_SPREAD_S = 120
"""RandomizedDelaySec: the API servers' runs spread over 2 of the timer's 10 minutes."""
ISSUER_FACT = "fact:bootstrap-tokens"
"""The issuer's configuration (/etc/agk/bootstrap-tokens.json): pool -> token secret."""
NODE_FACT = "fact:bootstrap-token"
"""A pool node's token settings (/etc/agk/bootstrap-token.json): its pool's token secret."""
FACTS = (ISSUER_FACT, NODE_FACT)
TOKEN_FILE = f"{PATHS.k8s}/bootstrap-kubelet.token"
"""The bootstrap kubeconfig's ``tokenFile`` (0600, root): written by the host, never in a bundle."""
BOOT_WAIT_S = 30 * 60
"""How long a booting node waits for its pool's first token before it starts the kubelet anyway."""
DIGEST_STANDIN = "0" * 8
"""Offline stand-in for the 8 hex digits keyvault.secret_name appends (same length, so the same size)."""


def token_secret_key(pool: str) -> str:
    """The key the cluster stack names the pool's token secret after (``<key>-<digest>``)."""
    return bt.vault_secret_key(pool)


def standin_secret(pool: str) -> str:
    return f"{token_secret_key(pool)}-{DIGEST_STANDIN}"


def issuer_config(ctx: BootstrapContext, secrets: Mapping[str, str]) -> str:
    """/etc/agk/bootstrap-tokens.json of every API server: ``secrets`` maps each pool to its token secret."""
    if set(secrets) != {p.name for p in ctx.pools}:
        raise KeyError(f"token secrets for {sorted(secrets)}, pools are {sorted(p.name for p in ctx.pools)}")
    config = bt.IssuerConfig(
        apiserver=f"https://127.0.0.1:{PORTS.apiserver}",
        ca_file=f"{PATHS.pki}/ca.crt",
        cert_file=f"{PATHS.pki}/{pki.BOOTSTRAP_TOKEN_ISSUER}.crt",
        key_file=f"{PATHS.pki}/{pki.BOOTSTRAP_TOKEN_ISSUER}.key",
        # Checked here, dropped from the file: the host's own facts (host.json) supply them.
        vault_url="https://from-host-json",
        client_id="from-host-json",
        pools=dict(sorted(secrets.items())),
    )
    return config.to_json()


def node_config(secret: str) -> str:
    """/etc/agk/bootstrap-token.json of a pool's nodes."""
    return node_token.TokenConfig(secret=secret, file=TOKEN_FILE).to_json()


def standin_facts(ctx: BootstrapContext, pool: str | None = None) -> dict[str, str]:
    """The facts' contents with stand-in secret names (for offline rendering and the size check)."""
    out = {ISSUER_FACT: issuer_config(ctx, {p.name: standin_secret(p.name) for p in ctx.pools})}
    if pool is not None:
        out[NODE_FACT] = node_config(standin_secret(pool))
    return out


def apiserver_part(
    ctx: BootstrapContext,
) -> tuple[tuple[NodeFile, ...], tuple[SecretFile, ...], tuple[FactFile, ...], tuple[Step, ...]]:
    """The issuer on an API server: files, secrets (its certificate, key and configuration), boot step."""
    service = render(
        "agk-bootstrap-tokens.service.j2",
        program=f"{host_boot.LIB}/{LIBRARY[0]}",
        config=bt.DEFAULT_CONFIG,
        timeout_s=ISSUER_TIMEOUT_S,
    )
    timer = render(
        "agk-bootstrap-tokens.timer.j2",
        every_minutes=bt.EVERY_MINUTES,
        renew_before_hours=bt.RENEW_BEFORE_HOURS,
        spread_s=ISSUER_SPREAD_S,
    )
    files = (
        NodeFile(PATHS.unit(ISSUER_UNIT), f"systemd/{ISSUER_UNIT}", service),
        NodeFile(PATHS.unit(ISSUER_TIMER), f"systemd/{ISSUER_TIMER}", timer),
        *(host_program(name) for name in LIBRARY),
    )
    secrets = (
        SecretFile(f"{PATHS.pki}/{pki.BOOTSTRAP_TOKEN_ISSUER}.crt", f"cert:{pki.BOOTSTRAP_TOKEN_ISSUER}"),
        SecretFile(f"{PATHS.pki}/{pki.BOOTSTRAP_TOKEN_ISSUER}.key", f"key:{pki.BOOTSTRAP_TOKEN_ISSUER}"),
    )
    facts = (FactFile(bt.DEFAULT_CONFIG, ISSUER_FACT),)
    # After the kubelet, which runs the API server's static pod; the timer's first run comes 2 minutes
    # after boot (OnBootSec) and every 10 minutes after that, so an API server still starting, or the
    # add-ons' Role not there yet, costs one run, not the token.
    return files, secrets, facts, (Step("bootstrap-token-issuer", start(ISSUER_TIMER)),)


def pool_part(ctx: BootstrapContext) -> tuple[tuple[NodeFile, ...], tuple[FactFile, ...], Step]:
    """A pool's bootstrap kubeconfig (``tokenFile``, no secret in it), its token settings, and the boot step
    that copies the first token before the kubelet starts."""
    kubeconfig = render(
        "bootstrap-kubeconfig.j2",
        cluster=ctx.cluster,
        server=ctx.apiserver_url,
        user="kubelet-bootstrap",
        ca_file=f"{PATHS.pki}/ca.crt",
        token_file=TOKEN_FILE,
    )
    rel = PATHS.bootstrap_kubeconfig.removeprefix(PATHS.k8s + "/")
    files = (NodeFile(PATHS.bootstrap_kubeconfig, rel, kubeconfig, "0600"),)
    # Never fails the boot: a node that boots before its pool's first token still starts the kubelet
    # (it retries, Restart=always) and its agk-sync timer, whose runs copy the token once it exists.
    wait = Step(
        "bootstrap-token",
        f"python3 {host_boot.LIB}/sync.py token --deadline {BOOT_WAIT_S} || true",
        tries=1,
    )
    return files, (FactFile(node_token.CONFIG, NODE_FACT),), wait
