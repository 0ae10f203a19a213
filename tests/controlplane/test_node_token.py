"""A pool node's side of the bootstrap tokens on dev's real control plane: the pool's real bundle (dev's
h100, with the cluster's PKI) in the stand-in Key Vault, the node's identity from the stand-in IMDS
(tests/bootstrap/host/fakes.py; Azure cannot be reached), the first API server host's issuer minting on the real
API server (tests/controlplane/issuer.py), and kubectl (client-go) authenticating there with the
bootstrap kubeconfig the bundle carries and the token file the node wrote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from modules.bootstrap import node_tokens
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.host import node_token, sync
from modules.bootstrap.layout import PATHS
from tests.bootstrap.host.fakes import Imds
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_node_token import Node, pool_secret

from .cluster import ControlPlane, _relocate
from .issuer import Cluster, issuer_world


@pytest.fixture
def cluster(dev_cluster: ControlPlane) -> Iterator[Cluster]:
    with issuer_world(dev_cluster) as world:
        yield world


@pytest.fixture
def imds_url() -> Iterator[str]:
    with serve(Imds()) as url:
        yield url


def pool_node(cluster: Cluster, root: Path, imds_url: str) -> Node:
    """dev's h100 bundle with the cluster's certificates, its token settings naming the test's GPU pool's secret."""
    return Node(root, cluster.vault, cluster.vault_url, imds_url, cluster.secrets[cluster.gpu], cluster.cp.pems)


def kubeconfig(cluster: Cluster, node: Node) -> Path:
    """The bootstrap kubeconfig the node's sync wrote, as this machine reaches the cluster: the VIP on its
    loopback port, the paths it names under the node's root; everything else (user, tokenFile) as written."""
    text = node.path(PATHS.bootstrap_kubeconfig).read_text()
    out = node.root / "kubeconfig"
    out.write_text(_relocate(cluster.cp.loopback(text), node.root))
    return out


def whoami(cluster: Cluster, node: Node) -> dict[str, object]:
    run = cluster.cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig(cluster, node))
    assert run.returncode == 0, run.stderr
    info: dict[str, object] = json.loads(run.stdout)["status"]["userInfo"]
    return info


def test_a_booting_node_waits_for_the_first_token_writes_it_and_kubectl_joins_with_it(
    cluster: Cluster, imds_url: str, tmp_path: Path
) -> None:
    pool_secret(cluster.vault, cluster.secrets[cluster.gpu])
    node = pool_node(cluster, tmp_path / "node", imds_url)
    sync.apply(node.doc, node.rt)  # the first boot writes every file of the bundle first
    assert not node.path(node_tokens.TOKEN_FILE).exists()
    written_kubeconfig = node.path(PATHS.bootstrap_kubeconfig).read_text()
    assert "tokenFile: " + node_tokens.TOKEN_FILE in written_kubeconfig and "token:" not in written_kubeconfig

    # The issuer runs (its first token) while the node is waiting on the placeholder.
    def mint_on_third_wait(seconds: float) -> None:
        Node.sleep(node, seconds)
        if len(node.on_sleep) == 3:
            assert cluster.run()[cluster.gpu].action == "minted"

    node.rt.sleep = mint_on_third_wait
    assert node.token_step(deadline_s=node_tokens.BOOT_WAIT_S)
    waits = [line for line in node.lines if "holds no bootstrap token yet" in line]
    assert len(waits) == 3 and node.on_sleep == [node_token.POLL_S] * 3
    token = cluster.published(cluster.gpu)
    written = node.path(node_tokens.TOKEN_FILE)
    assert written.read_text() == f"{token}\n" and written.stat().st_mode & 0o777 == 0o600
    secret = cluster.secrets[cluster.gpu]
    assert f"wrote {node_tokens.TOKEN_FILE} (token {token.id} from {secret})" in node.lines
    assert str(token) not in "\n".join(node.lines)  # the secret half never reaches the journal

    info = whoami(cluster, node)
    assert info["username"] == f"system:bootstrap:{token.id}"
    groups = info["groups"]
    assert isinstance(groups, list) and bt.NODES_GROUP in groups and bt.pool_group(cluster.gpu) in groups


def test_each_sync_copies_the_renewed_token(cluster: Cluster, imds_url: str, tmp_path: Path) -> None:
    pool_secret(cluster.vault, cluster.secrets[cluster.gpu])
    cluster.run(settle=False)  # the first token is revoked below: the API server must not have cached it
    node = pool_node(cluster, tmp_path / "node", imds_url)
    sync.run(node.rt)  # a timer run: the bundle, then the token
    first = cluster.published(cluster.gpu)
    assert node.path(node_tokens.TOKEN_FILE).read_text() == f"{first}\n"
    cluster.now += (bt.TTL_HOURS - bt.RENEW_BEFORE_HOURS) * 3600
    assert cluster.run()[cluster.gpu].action == "minted"
    cluster.revoke(first)  # the old one no longer joins: only the copy does
    sync.run(node.rt)
    renewed = cluster.published(cluster.gpu)
    assert renewed != first and node.path(node_tokens.TOKEN_FILE).read_text() == f"{renewed}\n"
    assert whoami(cluster, node)["username"] == f"system:bootstrap:{renewed.id}"
