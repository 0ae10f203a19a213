"""Host tier: a pool node's side of the bootstrap tokens, end to end on loopback: the pool's real bundle
(dev's h100) in the stand-in Key Vault, the node's identity from the stand-in IMDS, an API server issuer
minting into the vault, and kubectl (client-go) authenticating with the bootstrap kubeconfig the bundle
carries and the token file the node wrote (tests/host/fakes.py, fake_kube.py; Azure cannot be reached)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from modules.bootstrap import delivery, node_tokens
from modules.bootstrap.host import boot, bundle, node_token, sync
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle as node_bundle
from tests.bootstrap.conftest import context
from tests.host.fakes import Imds
from tests.host.loopback import serve
from tests.host.test_bootstrap_tokens import SECRETS, Cluster, _whoami, start

POOL = "h100-a"
"""The issuer fixture's pool; the node runs dev's h100 bundle under this pool's token secret."""
POOL_CLIENT = "99999999-8888-7777-6666-555555555555"
BUNDLE_SECRET = "pool-h100-0a1b2c3d"


class Node:
    """A pool node's root directory and a sync runtime whose clock moves only when it waits."""

    def __init__(self, root: Path, cluster: Cluster, imds_url: str) -> None:
        self.root, self.cluster, self.now, self.lines = root, cluster, 0.0, []  # type: ignore[var-annotated]
        self.on_sleep: list[float] = []
        self.rt = sync.Runtime(
            root=str(root),
            systemctl=lambda args: None,
            command=lambda line: None,
            sleep=self.sleep,
            clock=lambda: self.now,
            log=self.lines.append,
            imds_endpoint=imds_url,
        )
        ctx = context("dev")
        pool = node_bundle(ctx, "gpu-node", "h100")
        facts = {node_tokens.NODE_FACT: node_tokens.node_config(SECRETS[POOL])}
        self.doc = delivery.document(pool, delivery.placeholder_pems(pool), facts)
        host = root / boot.HOST_CONFIG.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_text(
            boot.HostConfig("gpu-node", "h100", "dev", cluster.vault_url, BUNDLE_SECRET, POOL_CLIENT).to_json()
        )
        # The pool's bundle, readable by the pool (the cluster stack's reader grants).
        for i, part in enumerate(bundle.split(bundle.encode(self.doc), 3), start=1):
            cluster.vault.put(bundle.part_name(BUNDLE_SECRET, i), part, POOL_CLIENT)

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep.append(seconds)

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def kubeconfig(self) -> Path:
        """The bundle's bootstrap kubeconfig as this root sees it: the fake API server instead of the VIP,
        the fixture's CA; everything else (user, tokenFile) as the node has it."""
        text = self.path(PATHS.bootstrap_kubeconfig).read_text()
        text = text.replace(context("dev").apiserver_url, self.cluster.kube_url)
        text = text.replace(f"{PATHS.pki}/ca.crt", str(self.cluster.files["ca"]))
        text = text.replace(node_tokens.TOKEN_FILE, str(self.path(node_tokens.TOKEN_FILE)))
        out = self.root / "kubeconfig"
        out.write_text(text)
        return out

    def token_step(self, deadline_s: float) -> bool:
        """What the boot step ``sync.py token`` does, with this runtime (main() builds the host's own)."""
        host = boot.HostConfig.load(self.rt.path(boot.HOST_CONFIG))
        config = node_token.TokenConfig.from_json(self.path(node_token.CONFIG).read_text())
        return sync.refresh_token(config, host, self.rt, deadline_s)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """The issuer's world (tests/host/test_bootstrap_tokens.py): API server and vault on loopback."""
    (tmp_path / "issuer").mkdir()
    yield from start(tmp_path / "issuer")


@pytest.fixture
def imds_url() -> Iterator[str]:
    with serve(Imds()) as url:
        yield url


def _pool_secret(cluster: Cluster) -> None:
    """The token secret as the cluster stack creates it: the placeholder, the pool may read it."""
    cluster.vault.put(SECRETS[POOL], node_token.PLACEHOLDER, POOL_CLIENT)


def test_the_boot_step_waits_before_the_kubelet_and_never_stops_the_boot() -> None:
    ctx = context("dev")
    for pool in ctx.pools:
        steps = [s.name for s in node_bundle(ctx, pool.role, pool.name).steps]
        assert steps.index("bootstrap-token") == steps.index("kubelet") - 1, steps
        step = next(s for s in node_bundle(ctx, pool.role, pool.name).steps if s.name == "bootstrap-token")
        assert step.command == f"python3 /opt/agk/lib/sync.py token --deadline {node_tokens.BOOT_WAIT_S} || true"


@pytest.mark.realtool
def test_a_booting_node_waits_for_the_first_token_writes_it_and_kubectl_joins_with_it(
    cluster: Cluster, imds_url: str, tmp_path: Path
) -> None:
    cluster.clock[0] = time.time()  # kubectl's requests are answered at the wall clock
    _pool_secret(cluster)
    node = Node(tmp_path / "node", cluster, imds_url)
    sync.apply(node.doc, node.rt)  # the first boot writes every file of the bundle first
    assert not node.path(node_tokens.TOKEN_FILE).exists()
    kubeconfig = node.path(PATHS.bootstrap_kubeconfig).read_text()
    assert "tokenFile: " + node_tokens.TOKEN_FILE in kubeconfig and "token:" not in kubeconfig

    # The issuer runs (its first token) while the node is waiting on the placeholder.
    def mint_on_third_wait(seconds: float) -> None:
        Node.sleep(node, seconds)
        if len(node.on_sleep) == 3:
            assert cluster.run()[POOL].action == "minted"

    node.rt.sleep = mint_on_third_wait
    assert node.token_step(deadline_s=node_tokens.BOOT_WAIT_S)
    waits = [line for line in node.lines if "holds no bootstrap token yet" in line]
    assert len(waits) == 3 and node.on_sleep == [node_token.POLL_S] * 3
    token = cluster.published(POOL)
    written = node.path(node_tokens.TOKEN_FILE)
    assert written.read_text() == f"{token}\n" and written.stat().st_mode & 0o777 == 0o600
    assert f"wrote {node_tokens.TOKEN_FILE} (token {token.id} from {SECRETS[POOL]})" in node.lines
    assert str(token) not in "\n".join(node.lines)  # the secret half never reaches the journal

    run = _whoami(node.kubeconfig())
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)["status"]["userInfo"]
    assert info["username"] == f"system:bootstrap:{token.id}"
    assert bt.NODES_GROUP in info["groups"] and bt.pool_group(POOL) in info["groups"]


@pytest.mark.realtool
def test_each_sync_copies_the_renewed_token(cluster: Cluster, imds_url: str, tmp_path: Path) -> None:
    cluster.clock[0] = time.time()
    _pool_secret(cluster)
    cluster.run()
    node = Node(tmp_path / "node", cluster, imds_url)
    sync.run(node.rt)  # a timer run: the bundle, then the token
    first = cluster.published(POOL)
    assert node.path(node_tokens.TOKEN_FILE).read_text() == f"{first}\n"
    cluster.clock[0] += (bt.TTL_HOURS - bt.RENEW_BEFORE_HOURS) * 3600
    assert cluster.run()[POOL].action == "minted"
    cluster.kube.revoke(first.id)  # the old one no longer joins: only the copy does
    sync.run(node.rt)
    renewed = cluster.published(POOL)
    assert renewed != first and node.path(node_tokens.TOKEN_FILE).read_text() == f"{renewed}\n"
    run = _whoami(node.kubeconfig())
    assert run.returncode == 0 and renewed.id in run.stdout, run.stderr


def test_the_wait_is_bounded_and_says_why(cluster: Cluster, imds_url: str, tmp_path: Path) -> None:
    _pool_secret(cluster)
    node = Node(tmp_path / "node", cluster, imds_url)
    sync.apply(node.doc, node.rt)
    assert not node.token_step(deadline_s=300)
    assert node.now <= 300 and len(node.on_sleep) == 300 // node_token.POLL_S
    assert not node.path(node_tokens.TOKEN_FILE).exists()
    assert node.lines[-1].startswith(f"bootstrap token: secret {SECRETS[POOL]} holds no bootstrap token yet")
    # A timer run is not failed by it: the next one tries again.
    out = sync.run(node.rt)
    assert out.failed == [] and not node.path(node_tokens.TOKEN_FILE).exists()


def test_a_node_cannot_read_another_pools_token(cluster: Cluster, imds_url: str, tmp_path: Path) -> None:
    cluster.vault.put(SECRETS[POOL], node_token.PLACEHOLDER, "some-other-pool")
    node = Node(tmp_path / "node", cluster, imds_url)
    sync.apply(node.doc, node.rt)
    assert not node.token_step(deadline_s=60)
    assert "HTTP 403 Forbidden" in node.lines[-1]
