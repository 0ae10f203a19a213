"""The bootstrap token issuer's world on dev's real control plane, one per test.

The issuer (modules/bootstrap/host/bootstrap_tokens.py) runs as the first API server host's timer runs it:
its rendered configuration (/etc/agk/bootstrap-tokens.json) with that host's loopback port, its client
certificate and the cluster CA, against that host's real kube-apiserver under the add-ons' real RBAC.
Only Key Vault is a stand-in (tests/bootstrap/host/fakes.py ``FakeVault``, on loopback): Azure cannot be reached.

Every test shares the session's control plane, so each gets pools of its own (``h100-a-<tag>``,
``system-<tag>``: the Secrets the issuer creates carry the pool in ``app.kubernetes.io/instance``) and
a Key Vault of its own, and every token Secret of its pools is deleted when it ends.

Two behaviours of the real API server that the tests wait on rather than sleep through:
- The bootstrap token authenticator reads Secrets from an informer (k8s.io/kubernetes
  plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go, ``lister.Get``): a Secret created or
  deleted a moment ago may not be seen yet. ``settle`` and ``revoke`` wait until the API server
  answers as it will.
- kube-apiserver caches a successful token authentication for 10 s (k8s.io/kubernetes
  pkg/kubeapiserver/options/authentication.go ``TokenSuccessCacheTTL: 10 * time.Second``;
  k8s.io/apiserver pkg/authentication/token/cache), per API server and regardless of the Secret: a token
  that authenticated keeps authenticating there for up to 10 s after it is revoked or expires. A test
  that needs a refusal asks a server that has not authenticated the token yet.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from modules.bootstrap import node_tokens
from modules.bootstrap.host import bootstrap_tokens as bt
from tests.bootstrap.host.fakes import FakeVault
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_bootstrap_tokens import ISSUER_CLIENT, VAULT_BEARER

from .cluster import ControlPlane, Host

SECRETS = "/api/v1/namespaces/kube-system/secrets"
REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
TOKEN_CLEANER = "system:serviceaccount:kube-system:token-cleaner"
"""The controller-manager's tokencleaner (``--use-service-account-credentials``: its own service account)."""
DIGEST = "0a1b2c3d"
"""Stands in for the digest the cluster stack appends to a pool's token secret name."""


def until(what: str, probe: Callable[[], Any], timeout: float = 15, every: float = 0.05) -> Any:
    """``probe()`` once it is truthy (polled every ``every`` s); an AssertionError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while not (got := probe()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s: {what}"
        time.sleep(every)
    return got


@dataclasses.dataclass
class Cluster:
    """The issuer of dev's first API server host, a Key Vault stand-in and the pools of one test."""

    cp: ControlPlane
    vault: FakeVault
    vault_url: str
    gpu: str
    system: str
    now: float
    """The issuer's clock (``bt.run``'s ``now``): the wall clock when the test began. The API server checks
    a token's expiry against the wall clock; a test moves this to mint tokens that expire when it needs."""
    audit_from: list[int] = dataclasses.field(default_factory=list)
    """Each API server host's audit log size when the test began."""

    @property
    def pools(self) -> tuple[str, str]:
        return (self.gpu, self.system)

    @property
    def secrets(self) -> dict[str, str]:
        """Pool -> its token's Key Vault secret (the cluster stack adds a digest of the pool identity)."""
        return {pool: f"{bt.vault_secret_key(pool)}-{DIGEST}" for pool in self.pools}

    def only(self, *pools: str) -> dict[str, str]:
        return {p: self.secrets[p] for p in pools}

    def host(self, index: int = 0) -> Host:
        return self.cp.hosts[index]

    def audit(self, host: int = 0) -> list[dict[str, Any]]:
        """The audit events of ``host``'s API server since the test began."""
        return audit(self.host(host), self.audit_from[host])

    def config(self, host: int = 0, **over: Any) -> bt.IssuerConfig:
        """The host's rendered issuer configuration (its port and files as laid out here), this test's pools."""
        rendered = node_tokens.issuer_config(
            self.cp.ctx, {p.name: node_tokens.standin_secret(p.name) for p in self.cp.ctx.pools}
        )
        text = self.cp.on_host(rendered, self.host(host))
        config = bt.IssuerConfig.from_json(text, vault_url=self.vault_url, client_id=ISSUER_CLIENT)
        return dataclasses.replace(config, **{"pools": self.secrets, **over})

    def api(self, host: int = 0, cert: str | None = None) -> bt.KubeApi:
        """The issuer's client to ``host``'s API server; ``cert``: another PKI identity's certificate instead."""
        config = self.config(host)
        if cert is None:
            return bt.KubeApi(config.apiserver, config.ca_file, config.cert_file, config.key_file)
        self.cp.context(cert)  # writes the pair under the admin's folder
        home = self.cp.root / "admin"
        return bt.KubeApi(config.apiserver, config.ca_file, str(home / f"{cert}.crt"), str(home / f"{cert}.key"))

    def run(
        self, host: str = "apiserver-0", *, kube: bt.KubeApi | None = None, settle: bool = True, **over: Any
    ) -> dict[str, bt.Outcome]:
        """One issuer run at ``now`` (no waits: the vault's Retry-After is not slept). ``settle``: then wait
        until the API server authenticates each token the run published, as the next run will ask it."""
        config = self.config(**over)
        outcomes = bt.run(config, kube or self.api(), VAULT_BEARER, now=self.now, host=host, sleep=lambda s: None)
        if settle:
            self.settle(*(self.published(o.pool) for o in outcomes if o.action == "minted"))
        return {o.pool: o for o in outcomes}

    def published(self, pool: str) -> bt.Token:
        current = self.vault.current(self.secrets[pool])
        assert current is not None, f"nothing published for {pool}"
        token = bt.Token.parse(current["value"])
        assert token is not None, current
        return token

    def tokens(self) -> dict[str, dict[str, str]]:
        """Token id -> decoded data of every bootstrap token Secret of this test's pools (read as the admin)."""
        code, body = self.cp.call("GET", f"{SECRETS}?{self._selector()}")
        assert code == 200, body
        out = {}
        for s in body["items"]:
            assert s["type"] == bt.SECRET_TYPE, s
            data = {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
            out[data["token-id"]] = data
        return out

    def settle(self, *tokens: bt.Token, host: int = 0) -> None:
        """Wait until ``host``'s API server authenticates every one of ``tokens`` (its informer has the Secret)."""
        api = self.api(host)
        for token in tokens:
            until(f"{self.host(host).name} to authenticate token {token.id}", lambda t=token: api.who(t))

    def revoke(self, token: bt.Token, host: int = 0) -> None:
        """What ``kubectl -n kube-system delete secret bootstrap-token-<id>`` does, then wait until ``host``'s
        API server refuses the token (up to the 10 s success cache if it authenticated it just before)."""
        code, body = self.cp.call("DELETE", f"{SECRETS}/bootstrap-token-{token.id}")
        assert code == 200, body
        api = self.api(host)
        until(f"{self.host(host).name} to refuse revoked token {token.id}", lambda: api.who(token) is None)

    def _selector(self) -> str:
        selector = (
            f"app.kubernetes.io/managed-by={bt.MANAGED_BY},app.kubernetes.io/instance in ({','.join(self.pools)})"
        )
        return urllib.parse.urlencode({"labelSelector": selector})

    def clean(self) -> None:
        """Delete every token Secret of this test's pools (in kube-system, and in default should one get there)."""
        for namespace in ("kube-system", "default"):
            code, body = self.cp.call("DELETE", f"/api/v1/namespaces/{namespace}/secrets?{self._selector()}")
            assert code == 200, body
        assert self.tokens() == {}


@contextmanager
def issuer_world(cp: ControlPlane) -> Iterator[Cluster]:
    """A test's issuer world: its own pools and Key Vault (the issuer may write each pool's secret: the
    cluster stack's Key Vault Secrets Officer grants); its token Secrets are deleted afterwards."""
    tag = secrets.token_hex(3)
    vault = FakeVault()
    with serve(vault) as url:
        logs = [audit_log(h).stat().st_size for h in cp.hosts]
        cluster = Cluster(cp, vault, url, f"h100-a-{tag}", f"system-{tag}", time.time(), logs)
        for name in cluster.secrets.values():
            vault.grant_write(name, ISSUER_CLIENT)
        try:
            yield cluster
        finally:
            cluster.clean()


# -- the audit log: what the real API server says it was asked ------------------------------------


def audit_log(host: Host) -> Path:
    """``host``'s rendered ``--audit-log-path``, as laid out here."""
    return host.root / "var/log/kubernetes/audit/audit.log"


def audit(host: Host, offset: int = 0) -> list[dict[str, Any]]:
    """The events ``host``'s API server wrote to its audit log from byte ``offset`` on (the log backend's
    default mode is blocking: an event is written before the response)."""
    with audit_log(host).open("rb") as f:
        f.seek(offset)
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def received(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()


def user(event: dict[str, Any]) -> str:
    """Who made the request (empty for one that did not authenticate)."""
    return str(event["user"].get("username", ""))


@contextmanager
def without_issuer_role(cp: ControlPlane) -> Iterator[None]:
    """The add-ons' RoleBinding of the issuer deleted (as before the add-ons stack has run), until the block
    ends; then applied again as the add-ons stack applies it (server-side, field manager agk). Each change
    is waited for with a SubjectAccessReview on the first API server, the one the issuer asks."""
    path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/{bt.MANAGED_BY}"
    code, binding = cp.call("GET", path)
    assert code == 200, binding
    kept = {k: binding[k] for k in ("apiVersion", "kind", "roleRef", "subjects")}
    kept["metadata"] = {k: binding["metadata"][k] for k in ("name", "namespace", "labels") if k in binding["metadata"]}
    code, body = cp.call("DELETE", path)
    assert code == 200, body
    until("the issuer to lose its Role", lambda: not may_create_token_secrets(cp))
    try:
        yield
    finally:
        run = cp.kubectl("apply", "--server-side", "--field-manager=agk", "-f", "-", input=json.dumps(kept))
        assert run.returncode == 0, run.stderr
        until("the issuer to have its Role again", lambda: may_create_token_secrets(cp))


def may_create_token_secrets(cp: ControlPlane) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": bt.ISSUER_USER,
            "groups": ["system:authenticated"],  # what the API server adds to a client certificate's user
            "resourceAttributes": {"namespace": "kube-system", "verb": "create", "resource": "secrets"},
        },
    }
    code, body = cp.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert code == 201, body
    return bool(body["status"].get("allowed"))
