"""Host tier: a pool node's side of the bootstrap tokens where no API server is needed: the pool's real
bundle (dev's h100) in the stand-in Key Vault, the node's identity from the stand-in IMDS (tests/bootstrap/host/fakes.py;
Azure cannot be reached). A node that joins with the token its issuer minted on the real API server is in
tests/controlplane/test_node_token.py."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from modules.bootstrap import delivery, node_tokens
from modules.bootstrap.host import boot, bundle, node_token, sync
from modules.bootstrap.roles import bundle as node_bundle
from tests.bootstrap.conftest import context
from tests.bootstrap.host.fakes import FakeVault, Imds
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_bootstrap_tokens import SECRETS

POOL = "h100-a"
"""The pool whose token secret the node reads; the node runs dev's h100 bundle under it."""
POOL_CLIENT = "99999999-8888-7777-6666-555555555555"
BUNDLE_SECRET = "pool-h100-0a1b2c3d"


class Node:
    """A pool node's root directory and a sync runtime whose clock moves only when it waits: dev's h100
    bundle (with ``pems``, or the offline placeholders) whose token settings name ``token_secret``, in the
    vault at ``vault_url``."""

    def __init__(
        self,
        root: Path,
        vault: FakeVault,
        vault_url: str,
        imds_url: str,
        token_secret: str,
        pems: Mapping[str, str] | None = None,
    ) -> None:
        self.root, self.now, self.lines = root, 0.0, []  # type: ignore[var-annotated]
        self.token_secret = token_secret
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
        pool = node_bundle(context("dev"), "gpu-node", "h100")
        facts = {node_tokens.NODE_FACT: node_tokens.node_config(token_secret)}
        issued = delivery.placeholder_pems(pool) if pems is None else {s.secret: pems[s.secret] for s in pool.secrets}
        self.doc = delivery.document(pool, issued, facts)
        host = root / boot.HOST_CONFIG.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_text(boot.HostConfig("gpu-node", "h100", "dev", vault_url, BUNDLE_SECRET, POOL_CLIENT).to_json())
        # The pool's bundle, readable by the pool (the cluster stack's reader grants).
        for i, part in enumerate(bundle.split(bundle.encode(self.doc), 3), start=1):
            vault.put(bundle.part_name(BUNDLE_SECRET, i), part, POOL_CLIENT)

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_sleep.append(seconds)

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def token_step(self, deadline_s: float) -> bool:
        """What the boot step ``sync.py token`` does, with this runtime (main() builds the host's own)."""
        host = boot.HostConfig.load(self.rt.path(boot.HOST_CONFIG))
        config = node_token.TokenConfig.from_json(self.path(node_token.CONFIG).read_text())
        return sync.refresh_token(config, host, self.rt, deadline_s)


@pytest.fixture
def kv() -> Iterator[tuple[FakeVault, str]]:
    store = FakeVault()
    with serve(store) as url:
        yield store, url


@pytest.fixture
def imds_url() -> Iterator[str]:
    with serve(Imds()) as url:
        yield url


def pool_secret(vault: FakeVault, name: str) -> None:
    """The token secret as the cluster stack creates it: the placeholder, the pool may read it."""
    vault.put(name, node_token.PLACEHOLDER, POOL_CLIENT)


def make(tmp_path: Path, kv: tuple[FakeVault, str], imds_url: str) -> Node:
    return Node(tmp_path / "node", kv[0], kv[1], imds_url, SECRETS[POOL])


def test_the_boot_step_waits_before_the_kubelet_and_never_stops_the_boot() -> None:
    ctx = context("dev")
    for pool in ctx.pools:
        steps = [s.name for s in node_bundle(ctx, pool.role, pool.name).steps]
        assert steps.index("bootstrap-token") == steps.index("kubelet") - 1, steps
        step = next(s for s in node_bundle(ctx, pool.role, pool.name).steps if s.name == "bootstrap-token")
        assert step.command == f"python3 /opt/agk/lib/sync.py token --deadline {node_tokens.BOOT_WAIT_S} || true"


def test_the_wait_is_bounded_and_says_why(kv: tuple[FakeVault, str], imds_url: str, tmp_path: Path) -> None:
    pool_secret(kv[0], SECRETS[POOL])
    node = make(tmp_path, kv, imds_url)
    sync.apply(node.doc, node.rt)
    assert not node.token_step(deadline_s=300)
    assert node.now <= 300 and len(node.on_sleep) == 300 // node_token.POLL_S
    assert not node.path(node_tokens.TOKEN_FILE).exists()
    assert node.lines[-1].startswith(f"bootstrap token: secret {SECRETS[POOL]} holds no bootstrap token yet")
    # A timer run is not failed by it: the next one tries again.
    out = sync.run(node.rt)
    assert out.failed == [] and not node.path(node_tokens.TOKEN_FILE).exists()


def test_a_node_cannot_read_another_pools_token(kv: tuple[FakeVault, str], imds_url: str, tmp_path: Path) -> None:
    kv[0].put(SECRETS[POOL], node_token.PLACEHOLDER, "some-other-pool")
    node = make(tmp_path, kv, imds_url)
    sync.apply(node.doc, node.rt)
    assert not node.token_step(deadline_s=60)
    assert "HTTP 403 Forbidden" in node.lines[-1]
