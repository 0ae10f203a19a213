"""The bootstrap token issuer against dev's real control plane: the first API server host's issuer (its
rendered configuration and client certificate) mints through that host's real kube-apiserver under the
add-ons' real RBAC, whose bootstrap token authenticator and SelfSubjectReviews decide what the issuer
reads back; Key Vault is the stand-in of tests/bootstrap/host/fakes.py (tests/controlplane/issuer.py says how the
tests share the control plane and what they wait on). The API server checks a token's ``expiration``
against the wall clock: a test that needs a token expired, or within the renewal window, mints it with
the issuer's ``now`` that far in the past."""

from __future__ import annotations

import json
import math
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap import pki
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.templating import render
from tests.bootstrap.host.loopback import serve
from tests.bootstrap.host.test_bootstrap_tokens import HOUR, ISSUER_CLIENT, RENEW, TTL, VAULT_BEARER, host_json

from .cluster import ControlPlane
from .issuer import REVIEWS, TOKEN_CLEANER, Cluster, issuer_world, received, until, user, without_issuer_role

LEFT_S = (3, 10, 30)
"""How long the token a test lets expire has left when the test begins (seconds), one try each."""


@pytest.fixture
def cluster(dev_cluster: ControlPlane) -> Iterator[Cluster]:
    with issuer_world(dev_cluster) as world:
        yield world


@pytest.fixture
def no_role(dev_cluster: ControlPlane) -> Iterator[None]:
    with without_issuer_role(dev_cluster):
        yield


# -- one issuer ------------------------------------------------------------------------------------


def test_the_first_run_mints_a_token_per_pool_and_publishes_it(cluster: Cluster) -> None:
    outcomes = cluster.run()
    assert {p: o.action for p, o in outcomes.items()} == {cluster.gpu: "minted", cluster.system: "minted"}
    expires = cluster.now + TTL
    for pool in cluster.pools:
        token = cluster.published(pool)
        current = cluster.vault.current(cluster.secrets[pool])
        assert current is not None
        assert current["attributes"]["exp"] == int(expires)
        assert current["tags"] == {"token-id": token.id, "expiration": bt.rfc3339(expires), "minted-by": "apiserver-0"}
        assert current["contentType"] == "text/plain"
        stored = cluster.tokens()[token.id]
        assert stored["token-secret"] == token.secret and stored["expiration"] == bt.rfc3339(expires)
        # The node's view: the published token authenticates as a node bootstrapper of its pool.
        user_, groups = cluster.api().who(token) or ("", ())
        assert user_ == f"system:bootstrap:{token.id}"
        assert {"system:bootstrappers", bt.NODES_GROUP, bt.pool_group(pool)} <= set(groups)
    assert len(cluster.tokens()) == 2


def test_a_later_run_keeps_a_valid_token(cluster: Cluster) -> None:
    cluster.run()
    first = {p: cluster.published(p) for p in cluster.pools}
    cluster.now += TTL - RENEW - HOUR
    began = time.time()
    outcomes = cluster.run(host="apiserver-1")
    assert {o.action for o in outcomes.values()} == {"kept"}
    assert {p: cluster.published(p) for p in cluster.pools} == first
    assert len(cluster.tokens()) == 2
    # The check used the token itself, not the issuer's certificate (x509 would win on the server): the
    # API server's audit log has one review per pool since the run began, each as that pool's token.
    reviews = until(
        "the run's reviews in the audit log",
        lambda: [
            e for e in cluster.audit() if e["requestURI"] == REVIEWS and received(e) >= began and e["verb"] == "create"
        ],
    )
    assert sorted(user(e) for e in reviews) == sorted(f"system:bootstrap:{t.id}" for t in first.values())


def test_a_token_within_the_renewal_window_is_replaced_and_the_old_one_left_to_expire(
    dev_cluster: ControlPlane,
) -> None:
    """The first token is minted a lifetime minus ``left`` seconds ago, so it is inside the renewal window
    now and expires ``left`` seconds into the test; that it still joins after the renewal is asked of the
    second API server, and that it is refused once expired of the first, which has never authenticated it
    (its 10 s success cache). A machine too busy to ask before the token expires tries again with longer."""
    for left in LEFT_S:
        with issuer_world(dev_cluster) as cluster:
            if renewal_leaves_the_old_token_to_expire(cluster, left):
                return
    pytest.fail(f"the old token expired before it could be checked, {LEFT_S} s after it was minted")


def renewal_leaves_the_old_token_to_expire(cluster: Cluster, left: int) -> bool:
    """The test above with a first token that expires ``left`` s from now; False when it expired too early."""
    began = cluster.now
    cluster.now = began - TTL + left
    cluster.run(settle=False, pools=cluster.only(cluster.gpu))
    old = cluster.published(cluster.gpu)
    old_expires = int(cluster.now + TTL)
    cluster.now = began
    outcome = cluster.run(settle=False, pools=cluster.only(cluster.gpu))[cluster.gpu]
    assert outcome.action == "minted" and f"within {bt.RENEW_BEFORE_HOURS} h" in outcome.message, outcome
    new = cluster.published(cluster.gpu)
    assert new != old
    current = cluster.vault.current(cluster.secrets[cluster.gpu])
    assert current is not None and current["attributes"]["exp"] == int(began + TTL)
    # A node that read the old token before the renewal still joins with it until it expires.
    second, asked = cluster.api(host=1), []

    def joins() -> bool | str:
        if time.time() >= old_expires:
            return "expired"
        asked.append(time.time())
        return second.who(old) is not None

    if until(f"the second API server to authenticate token {old.id}", joins) == "expired":
        # Refused for a second or more while valid is a failure, not a busy machine (informers lag by ms).
        assert not asked or old_expires - asked[0] < 1, f"the second API server refused token {old.id} while valid"
        return False
    time.sleep(max(0.0, old_expires - time.time()) + 0.05)  # the API server's clock is this machine's
    assert cluster.api().who(old) is None
    cluster.settle(new)
    # Left to expire: the issuer only ever creates; the controller-manager's tokencleaner deletes it.
    path = f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{old.id}"
    until("the tokencleaner to delete the expired token", lambda: cluster.cp.call("GET", path)[0] == 404)
    deletes = until(
        "the tokencleaner's delete in an audit log",
        lambda: [
            e
            for h in range(len(cluster.cp.hosts))
            for e in cluster.audit(h)
            if e["verb"] == "delete" and (e.get("objectRef") or {}).get("name") == f"bootstrap-token-{old.id}"
        ],
    )
    assert {user(e) for e in deletes} == {TOKEN_CLEANER}, deletes
    issuer = [e for e in cluster.audit() if user(e) == bt.ISSUER_USER]
    assert len(issuer) == 2 and {(e["verb"], e["objectRef"]["resource"]) for e in issuer} == {("create", "secrets")}
    return True


def test_a_revoked_token_is_replaced_on_the_next_run(cluster: Cluster) -> None:
    cluster.run(settle=False)  # the token to revoke must not be in the API server's success cache
    revoked = cluster.published(cluster.gpu)
    cluster.settle(cluster.published(cluster.system))
    cluster.revoke(revoked)
    outcomes = cluster.run()
    assert outcomes[cluster.gpu].action == "minted"
    assert f"refuses token {revoked.id}" in outcomes[cluster.gpu].message
    assert outcomes[cluster.system].action == "kept"
    assert cluster.published(cluster.gpu) != revoked


@pytest.mark.parametrize(
    ("value", "attributes", "reason"),
    [
        ("placeholder: the issuer has not run yet", {"exp": 99 * HOUR}, "not a bootstrap token"),
        ("abcdef.0123456789abcdef", {}, "without an expiry"),
    ],
)
def test_a_placeholder_or_an_unexpiring_value_is_replaced(
    cluster: Cluster, value: str, attributes: dict[str, Any], reason: str
) -> None:
    attributes = {k: cluster.now + v for k, v in attributes.items()}
    cluster.vault.put(cluster.secrets[cluster.gpu], value, **attributes)
    outcome = cluster.run()[cluster.gpu]
    assert outcome.action == "minted" and reason in outcome.message
    assert cluster.published(cluster.gpu) != bt.Token.parse(value)


def test_publishing_keeps_the_tags_pulumi_created_the_secret_with(cluster: Cluster) -> None:
    """A new version carries only the tags it is written with; Pulumi's (ignore_changes) never come back."""
    created = {"agk-role": "security", "owner": "platform"}
    cluster.vault.put(cluster.secrets[cluster.gpu], "placeholder: the issuer has not run yet", tags=created)
    assert cluster.run()[cluster.gpu].action == "minted"
    current = cluster.vault.current(cluster.secrets[cluster.gpu])
    assert current is not None and current["tags"] == {
        **created,
        "token-id": cluster.published(cluster.gpu).id,
        "expiration": bt.rfc3339(cluster.now + TTL),
        "minted-by": "apiserver-0",
    }


@pytest.mark.parametrize("refused", [True, False])
def test_an_expired_token_is_replaced_whether_key_vault_answers_it_or_refuses_it(
    cluster: Cluster, refused: bool
) -> None:
    """An issuer that was down for a day finds the published token expired; Key Vault may refuse the read.
    The token was minted a lifetime and an hour ago: expired for the API server and the vault alike."""
    began = cluster.now
    cluster.now = began - TTL - HOUR
    cluster.run(settle=False)
    old = cluster.published(cluster.gpu)
    cluster.now = began
    cluster.vault.refuse_expired = refused
    outcome = cluster.run(pools=cluster.only(cluster.gpu))[cluster.gpu]
    reason = "refuses the published version as expired (SecretExpired)" if refused else f"token {old.id} expires at"
    assert outcome.action == "minted" and reason in outcome.message, outcome.message
    assert cluster.published(cluster.gpu) != old
    assert cluster.api().who(old) is None  # the API server refuses it too
    assert cluster.run(pools=cluster.only(cluster.gpu))[cluster.gpu].action == "kept"


def test_a_token_that_authenticates_outside_the_node_group_is_replaced(cluster: Cluster) -> None:
    token = bt.Token.generate()
    rogue = bt.token_secret(token, cluster.gpu, cluster.now + TTL, "someone")
    rogue["stringData"]["auth-extra-groups"] = "system:bootstrappers:other"
    cluster.api().create_secret(rogue)
    cluster.settle(token)  # it does authenticate, as system:bootstrap:<id> in system:bootstrappers:other
    cluster.vault.put(cluster.secrets[cluster.gpu], str(token), exp=cluster.now + TTL)
    outcome = cluster.run()[cluster.gpu]
    assert outcome.action == "minted" and f"not as a node bootstrap token of {cluster.gpu}" in outcome.message
    assert "system:bootstrappers:other" in outcome.message


def test_a_taken_token_id_is_drawn_again(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    taken, fresh = bt.Token.generate(), bt.Token.generate()
    cluster.api().create_secret(bt.token_secret(taken, cluster.system, cluster.now + HOUR, "someone"))
    draws = iter([taken, fresh])
    monkeypatch.setattr(bt.Token, "generate", classmethod(lambda cls: next(draws)))
    outcome = cluster.run(pools=cluster.only(cluster.gpu))[cluster.gpu]
    assert outcome.action == "minted" and cluster.published(cluster.gpu) == fresh
    assert cluster.tokens()[taken.id]["auth-extra-groups"].endswith(bt.pool_group(cluster.system))  # untouched


# -- failures: nothing half-done -------------------------------------------------------------------


def test_without_the_issuer_role_nothing_is_published_and_the_error_names_the_role(
    cluster: Cluster, no_role: None
) -> None:
    outcomes = cluster.run()
    assert {o.action for o in outcomes.values()} == {"failed"}
    message = outcomes[cluster.gpu].message
    assert "HTTP 403 Forbidden" in message and bt.MANAGED_BY in message and bt.ISSUER_USER in message
    assert cluster.vault.current(cluster.secrets[cluster.gpu]) is None
    assert cluster.tokens() == {}


def test_the_role_lets_the_issuer_create_secrets_only_in_kube_system(cluster: Cluster) -> None:
    obj = bt.token_secret(bt.Token.generate(), cluster.gpu, cluster.now + HOUR, "h")
    obj["metadata"]["namespace"] = "default"
    with pytest.raises(bt.ApiError) as err:
        cluster.api().create_secret(obj)
    assert err.value.status == 403
    # Another identity of the cluster's PKI is not the issuer: the Role binds one user. (Not the admin's:
    # system:masters passes every authorization check on the real API server.)
    other = cluster.api(cert=pki.KUBE_PROXY)
    with pytest.raises(bt.ApiError) as err:
        other.create_secret(bt.token_secret(bt.Token.generate(), cluster.gpu, cluster.now, "h"))
    assert err.value.status == 403 and 'User "system:kube-proxy" cannot create resource "secrets"' in str(err.value)
    assert cluster.tokens() == {}


@contextmanager
def failing_apiserver(cluster: Cluster) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A stand-in for an API server that answers every request 500 InternalError (the real one cannot be
    made to), with the first API server host's serving certificate: its URL and what it was asked."""
    asked: list[tuple[str, str]] = []

    class Request(BaseHTTPRequestHandler):
        def _do(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append((self.command, self.path))
            status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500}
            data = json.dumps({**status, "reason": "InternalError", "message": "stand-in"}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _do

        def log_message(self, *args: Any) -> None:
            pass

    pki_dir = cluster.host().root / "etc/kubernetes/pki"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki_dir / "apiserver.crt", pki_dir / "apiserver.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Request)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_port}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_review_that_says_nothing_mints_nothing(cluster: Cluster) -> None:
    """The one run here not against the real API server: kube-apiserver cannot be made to answer a
    SelfSubjectReview with 500, so the second run asks ``failing_apiserver`` (a stand-in). The first run,
    on the real server, published the token the second must check."""
    cluster.run()
    before = (cluster.tokens(), cluster.vault.current(cluster.secrets[cluster.gpu]))
    with failing_apiserver(cluster) as (url, asked):
        config = cluster.config(apiserver=url, pools=cluster.only(cluster.gpu))
        kube = bt.KubeApi(url, config.ca_file, config.cert_file, config.key_file)
        (outcome,) = bt.run(config, kube, VAULT_BEARER, now=cluster.now, host="apiserver-0", sleep=lambda s: None)
    assert outcome.action == "failed" and "HTTP 500" in outcome.message
    assert asked == [("POST", REVIEWS)]  # the review, and no Secret after it
    assert (cluster.tokens(), cluster.vault.current(cluster.secrets[cluster.gpu])) == before


def test_the_vault_refuses_a_request_without_the_identity_token(cluster: Cluster) -> None:
    outcomes = bt.run(cluster.config(), cluster.api(), "someone-elses-token", now=cluster.now, host="h")
    assert {o.action for o in outcomes} == {"failed"}
    assert "HTTP 401 Unauthorized" in outcomes[0].message
    assert cluster.tokens() == {}


def test_vault_throttling_is_waited_out(cluster: Cluster) -> None:
    cluster.vault.throttle = 2
    waits: list[float] = []
    outcomes = bt.run(
        cluster.config(pools=cluster.only(cluster.gpu)),
        cluster.api(),
        VAULT_BEARER,
        now=cluster.now,
        host="h",
        sleep=waits.append,
    )
    # Retry-After (1 s) is the floor of each wait, full jitter on top (vault.backoff: up to 1 s, then 2 s).
    assert outcomes[0].action == "minted" and len(waits) == 2, waits
    assert 1.0 <= waits[0] <= 2.0 and 1.0 <= waits[1] <= 3.0, waits
    assert list(cluster.tokens()) == [cluster.published(cluster.gpu).id]


# -- several API servers ---------------------------------------------------------------------------


def test_a_server_that_finds_a_fresh_token_after_minting_leaves_it(cluster: Cluster) -> None:
    """apiserver-1 runs completely while apiserver-0 is between minting and publishing (right after its
    Secret is created, before it reads the vault again)."""

    class Interleaved(bt.KubeApi):
        ran = False

        def create_secret(self, obj: Any) -> dict[str, Any]:
            out = super().create_secret(obj)
            if not Interleaved.ran:
                Interleaved.ran = True
                assert cluster.run(host="apiserver-1", pools=cluster.only(cluster.gpu))[cluster.gpu].action == "minted"
            return out

    config = cluster.config()
    kube = Interleaved(config.apiserver, config.ca_file, config.cert_file, config.key_file)
    outcome = cluster.run(host="apiserver-0", kube=kube, pools=cluster.only(cluster.gpu))[cluster.gpu]
    assert outcome.action == "left" and "another API server published" in outcome.message
    published = cluster.published(cluster.gpu)
    current = cluster.vault.current(cluster.secrets[cluster.gpu])
    assert current is not None and current["tags"]["minted-by"] == "apiserver-1"
    assert len(cluster.tokens()) == 2 and cluster.api().who(published) is not None


def test_two_servers_that_overlap_exactly_both_publish_and_either_token_joins(cluster: Cluster) -> None:
    """Both read the vault, both mint, both read again before either writes: the last writer wins."""
    barrier = threading.Barrier(2, timeout=60)

    def line_up(name: str) -> None:
        barrier.wait()

    cluster.vault.on_get = line_up
    results: dict[str, bt.Outcome] = {}

    def server(host: str) -> None:
        results[host] = cluster.run(host=host, pools=cluster.only(cluster.gpu), settle=False)[cluster.gpu]

    threads = [threading.Thread(target=server, args=(h,)) for h in ("apiserver-0", "apiserver-1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {o.action for o in results.values()} == {"minted"}
    tokens = cluster.tokens()
    assert len(tokens) == 2
    assert cluster.published(cluster.gpu).id in tokens
    # A node that fetched either version joins.
    cluster.settle(*(bt.Token(data["token-id"], data["token-secret"]) for data in tokens.values()))
    # The next runs settle on the published token.
    cluster.vault.on_get = None
    for host in ("apiserver-0", "apiserver-1", "apiserver-2"):
        assert cluster.run(host=host, pools=cluster.only(cluster.gpu))[cluster.gpu].action == "kept"
    assert len(cluster.tokens()) == 2


def test_five_servers_a_day_mint_two_tokens_per_pool(cluster: Cluster) -> None:
    """Every server runs hourly for 24 h: one token per renewal, not one per run."""
    began = cluster.now
    for minute in range(0, 24 * 60, 60):
        cluster.now = began + minute * 60
        for server in range(5):
            outcomes = cluster.run(host=f"apiserver-{server}")
            assert all(o.ok for o in outcomes.values())
    # One token per pool every TTL - RENEW (24 h / 12 h = 2), whichever server gets there first.
    assert len(cluster.tokens()) == math.ceil(24 * HOUR / (TTL - RENEW)) * len(cluster.pools)


# -- the program -----------------------------------------------------------------------------------


class FakeImds:
    def __init__(self) -> None:
        self.calls: list[dict[str, list[str]]] = []

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> Any:
        self.calls.append(query)
        if headers.get("Metadata") != "true":
            return 400, {}, {"error": "invalid_request"}
        return 200, {}, {"access_token": VAULT_BEARER, "expires_on": "1"}


def test_the_program_runs_from_its_configuration_file(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bootstrap-tokens.json"
    path.write_text(cluster.config().to_json())
    assert cluster.vault_url not in path.read_text() and ISSUER_CLIENT not in path.read_text()  # host.json's
    host = host_json(tmp_path, cluster.vault_url)
    imds = FakeImds()
    with serve(imds) as imds_url:  # main() takes the wall clock, as the API server does
        assert bt.main(["--config", str(path), "--host-config", host], imds_endpoint=imds_url) == 0
    out = capsys.readouterr()
    assert out.err == ""
    lines = out.out.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"pool {cluster.gpu}", f"pool {cluster.system}"]
    assert all(": minted: token " in line for line in lines)
    # The identity the vault grants is the configured one; no token secret reaches the journal.
    assert imds.calls[0]["client_id"] == ["11111111-2222-3333-4444-555555555555"]
    assert imds.calls[0]["resource"] == ["https://vault.azure.net"]
    for pool in cluster.pools:
        assert cluster.published(pool).secret not in out.out
    cluster.settle(*(cluster.published(p) for p in cluster.pools))
    with serve(imds) as imds_url:
        assert bt.main(["--config", str(path), "--host-config", host], imds_endpoint=imds_url) == 0
    assert all(": kept: " in line for line in capsys.readouterr().out.splitlines())


def test_a_failed_pool_fails_the_run(
    cluster: Cluster, no_role: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.json"
    path.write_text(cluster.config(pools=cluster.only(cluster.gpu)).to_json())
    with serve(FakeImds()) as imds_url:
        assert (
            bt.main(
                ["--config", str(path), "--host-config", host_json(tmp_path, cluster.vault_url)], imds_endpoint=imds_url
            )
            == 1
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"error: pool {cluster.gpu}: failed: POST /api/v1/namespaces/kube-system/secrets: HTTP 403"
    )


def test_kubectl_joins_with_the_published_token_through_the_token_file(cluster: Cluster, tmp_path: Path) -> None:
    """client-go (kubectl) loads the bootstrap kubeconfig, reads tokenFile and is the pool's bootstrapper;
    a renewed token in the same file works without touching the kubeconfig; a revoked one is refused.
    The revoked one is a third token, which the API server has not authenticated yet: one that did stays
    accepted there for the 10 s of its success cache (tests/controlplane/issuer.py)."""
    cp = cluster.cp
    cluster.run()
    token_file = tmp_path / "bootstrap-token"
    # As the node's sync writes it: the vault secret's value (a trailing newline is tolerated too).
    token_file.write_text(str(cluster.published(cluster.gpu)) + "\n")
    ca = tmp_path / "ca.crt"
    ca.write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    kubeconfig = tmp_path / "bootstrap-kubelet.kubeconfig"
    kubeconfig.write_text(
        render(
            "bootstrap-kubeconfig.j2",
            cluster="dev",
            server=cp.url,
            user="kubelet-bootstrap",
            ca_file=str(ca),
            token_file=str(token_file),
        )
    )
    before = kubeconfig.read_text()
    run = cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)["status"]["userInfo"]
    assert info["username"] == f"system:bootstrap:{cluster.published(cluster.gpu).id}"
    assert bt.NODES_GROUP in info["groups"] and bt.pool_group(cluster.gpu) in info["groups"]

    cluster.now += TTL - RENEW
    assert cluster.run()[cluster.gpu].action == "minted"
    token_file.write_text(str(cluster.published(cluster.gpu)))
    run = cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    assert run.returncode == 0 and cluster.published(cluster.gpu).id in run.stdout, run.stderr
    assert kubeconfig.read_text() == before

    cluster.now += TTL - RENEW
    assert cluster.run(settle=False)[cluster.gpu].action == "minted"
    token_file.write_text(str(cluster.published(cluster.gpu)))
    cluster.revoke(cluster.published(cluster.gpu))
    run = cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    assert run.returncode != 0 and "Unauthorized" in run.stderr, run.stdout + run.stderr
