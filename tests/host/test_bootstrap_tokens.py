"""Host tier: the bootstrap token issuer against a stand-in API server (mutual TLS, the add-ons' real
RBAC objects) and a stand-in Key Vault, both on loopback (tests/host/fake_kube.py, fakes.py)."""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from modules.bootstrap import versions
from modules.bootstrap.host import boot, vault
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.pki import SERVER, CaSpec, CertSpec, PkiSpec
from modules.cluster.objects import access
from tests.bootstrap.certs import issue
from tests.host.fake_kube import FakeKube, serve_tls
from tests.host.fakes import FakeVault, token_of
from tests.host.loopback import serve

HOST = Path(__file__).resolve().parents[2] / "modules/bootstrap/host"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600
TTL = bt.TTL_HOURS * HOUR
RENEW = bt.RENEW_BEFORE_HOURS * HOUR
ISSUER_CLIENT = "11111111-2222-3333-4444-555555555555"
VAULT_BEARER = token_of(ISSUER_CLIENT)
SECRETS = {pool: f"{bt.vault_secret_key(pool)}-0a1b2c3d" for pool in ("h100-a", "system")}
"""Pool -> its token's Key Vault secret (the cluster stack adds a digest of the pool identity)."""
POOLS = tuple(SECRETS)


def only(*pools: str) -> dict[str, str]:
    return {p: SECRETS[p] for p in pools}


DOCUMENTED_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")  # kubernetes.io, "Token Format"


@dataclass
class Cluster:
    kube: FakeKube
    kube_url: str
    vault: FakeVault
    vault_url: str
    files: dict[str, Path]
    clock: list[float]

    def config(self, **over: Any) -> bt.IssuerConfig:
        values: dict[str, Any] = {
            "apiserver": self.kube_url,
            "ca_file": str(self.files["ca"]),
            "cert_file": str(self.files["issuer.crt"]),
            "key_file": str(self.files["issuer.key"]),
            "vault_url": self.vault_url,
            "client_id": ISSUER_CLIENT,
            "pools": SECRETS,
            **over,
        }
        return bt.IssuerConfig(**values)

    def api(self, cert: str = "issuer") -> bt.KubeApi:
        return bt.KubeApi(
            self.kube_url, str(self.files["ca"]), str(self.files[f"{cert}.crt"]), str(self.files[f"{cert}.key"])
        )

    def run(self, host: str = "apiserver-0", **over: Any) -> dict[str, bt.Outcome]:
        outcomes = bt.run(
            self.config(**over), self.api(), VAULT_BEARER, now=self.clock[0], host=host, sleep=lambda s: None
        )
        return {o.pool: o for o in outcomes}

    def published(self, pool: str) -> bt.Token:
        current = self.vault.current(SECRETS[pool])
        assert current is not None
        token = bt.Token.parse(current["value"])
        assert token is not None
        return token


def _pki(tmp: Path) -> dict[str, Path]:
    spec = PkiSpec(
        cas=(CaSpec("ca", "test Kubernetes CA"),),
        certs=(
            CertSpec("apiserver", "ca", "kube-apiserver", None, ("localhost",), (IPv4Address("127.0.0.1"),), SERVER),
            CertSpec("issuer", "ca", bt.ISSUER_USER),
            CertSpec("admin", "ca", "admin", "system:masters"),
        ),
        key_pairs=(),
    )
    pems = issue(spec)
    files = {"ca": tmp / "ca.crt"}
    files["ca"].write_text(pems["cert:ca"])
    for name in ("apiserver", "issuer", "admin"):
        for kind, ext in (("cert", "crt"), ("key", "key")):
            path = tmp / f"{name}.{ext}"
            path.write_text(pems[f"{kind}:{name}"])
            files[f"{name}.{ext}"] = path
    return files


def start(tmp_path: Path) -> Iterator[Cluster]:
    """The stand-in API server and Key Vault on loopback, the issuer's PKI under ``tmp_path``."""
    files = _pki(tmp_path)
    clock = [NOW]
    kube = FakeKube(access.token_issuer(), now=lambda: clock[0])
    vault = FakeVault(now=lambda: clock[0])
    for name in SECRETS.values():  # Key Vault Secrets Officer on each pool's secret (the cluster stack's grants)
        vault.grant_write(name, ISSUER_CLIENT)
    with serve_tls(kube, files["ca"], files["apiserver.crt"], files["apiserver.key"]) as kube_url, serve(vault) as url:
        yield Cluster(kube, kube_url, vault, url, files, clock)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from start(tmp_path)


# -- the token and its Secret ----------------------------------------------------------------------


def test_tokens_have_the_documented_format_and_round_trip() -> None:
    tokens = {str(bt.Token.generate()) for _ in range(500)}
    assert len(tokens) == 500 and all(DOCUMENTED_TOKEN.match(t) for t in tokens)
    # Every character of the alphabet turns up: the draw is not biased towards a subset.
    assert set("".join(tokens).replace(".", "")) == set(bt.ALPHABET)
    assert all(str(bt.Token.parse(t)) == t for t in tokens)
    for bad in (
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcdef\n",
        "abcdef0123456789abcdefg",
    ):
        assert bt.Token.parse(bad) is None


@pytest.mark.parametrize("minor", versions.SUPPORTED)
def test_the_token_secret_is_the_documented_one_and_a_valid_secret(minor: str) -> None:
    token = bt.Token("abc123", "0123456789abcdef")
    obj = bt.token_secret(token, "h100-a", NOW + 24 * HOUR, "apiserver-0")
    kubernetes_validate.validate(obj, minor, strict=True)
    assert obj["metadata"]["name"] == "bootstrap-token-abc123" and obj["metadata"]["namespace"] == "kube-system"
    assert obj["type"] == "bootstrap.kubernetes.io/token"
    data = obj["stringData"]
    assert (data["token-id"], data["token-secret"], data["usage-bootstrap-authentication"]) == (
        "abc123",
        "0123456789abcdef",
        "true",
    )
    assert "usage-bootstrap-signing" not in data  # it signs no cluster-info ConfigMap
    # "an absolute UTC time using RFC3339"
    assert data["expiration"] == "2027-01-16T08:00:00Z"
    assert dt.datetime.fromisoformat(data["expiration"]).timestamp() == NOW + 24 * HOUR
    groups = data["auth-extra-groups"].split(",")
    assert groups == [bt.NODES_GROUP, "system:bootstrappers:agk:pool:h100-a"]
    assert all(bt.GROUP_PATTERN.match(g) for g in groups)


# -- one issuer ------------------------------------------------------------------------------------


def test_the_first_run_mints_a_token_per_pool_and_publishes_it(cluster: Cluster) -> None:
    outcomes = cluster.run()
    assert {p: o.action for p, o in outcomes.items()} == {"h100-a": "minted", "system": "minted"}
    for pool in POOLS:
        token = cluster.published(pool)
        current = cluster.vault.current(SECRETS[pool])
        assert current is not None
        assert current["attributes"]["exp"] == NOW + TTL
        assert current["tags"] == {
            "token-id": token.id,
            "expiration": bt.rfc3339(NOW + TTL),
            "minted-by": "apiserver-0",
        }
        assert current["contentType"] == "text/plain"
        stored = cluster.kube.bootstrap_tokens()[token.id]
        assert stored["token-secret"] == token.secret and stored["expiration"] == bt.rfc3339(NOW + TTL)
        # The node's view: the published token authenticates as a node bootstrapper of its pool.
        user, groups = cluster.api().who(token) or ("", ())
        assert user == f"system:bootstrap:{token.id}"
        assert {"system:bootstrappers", bt.NODES_GROUP, bt.pool_group(pool)} <= set(groups)
    assert len(cluster.kube.bootstrap_tokens()) == 2


def test_a_later_run_keeps_a_valid_token(cluster: Cluster) -> None:
    cluster.run()
    first = {p: cluster.published(p) for p in POOLS}
    cluster.clock[0] = NOW + TTL - RENEW - HOUR
    outcomes = cluster.run(host="apiserver-1")
    assert {o.action for o in outcomes.values()} == {"kept"}
    assert {p: cluster.published(p) for p in POOLS} == first
    assert len(cluster.kube.bootstrap_tokens()) == 2
    # The check used the token itself, not the issuer's certificate (x509 would win on the server).
    reviews = [u for m, p, u in cluster.kube.requests if p.endswith("/selfsubjectreviews")]
    assert reviews and all(u.startswith("system:bootstrap:") for u in reviews)


def test_a_token_within_the_renewal_window_is_replaced_and_the_old_one_left_to_expire(cluster: Cluster) -> None:
    cluster.run()
    old = cluster.published("h100-a")
    cluster.clock[0] = NOW + TTL - RENEW  # RENEW left: within the renewal window
    outcomes = cluster.run()
    assert outcomes["h100-a"].action == "minted" and f"within {bt.RENEW_BEFORE_HOURS} h" in outcomes["h100-a"].message
    new = cluster.published("h100-a")
    assert new != old
    current = cluster.vault.current(SECRETS["h100-a"])
    assert current is not None and current["attributes"]["exp"] == NOW + 2 * TTL - RENEW
    # A node that read the old token before the renewal still joins with it until it expires.
    assert cluster.api().who(old) is not None
    cluster.clock[0] = NOW + TTL
    assert cluster.api().who(old) is None and cluster.api().who(new) is not None
    assert not any(m == "DELETE" for m, _, _ in cluster.kube.requests)


def test_a_revoked_token_is_replaced_on_the_next_run(cluster: Cluster) -> None:
    cluster.run()
    revoked = cluster.published("h100-a")
    cluster.kube.revoke(revoked.id)
    outcomes = cluster.run()
    assert outcomes["h100-a"].action == "minted"
    assert f"refuses token {revoked.id}" in outcomes["h100-a"].message
    assert outcomes["system"].action == "kept"
    assert cluster.published("h100-a") != revoked


@pytest.mark.parametrize(
    ("value", "attributes", "reason"),
    [
        ("placeholder: the issuer has not run yet", {"exp": NOW + 99 * HOUR}, "not a bootstrap token"),
        ("abcdef.0123456789abcdef", {}, "without an expiry"),
    ],
)
def test_a_placeholder_or_an_unexpiring_value_is_replaced(
    cluster: Cluster, value: str, attributes: dict[str, Any], reason: str
) -> None:
    cluster.vault.put(SECRETS["h100-a"], value, **attributes)
    outcome = cluster.run()["h100-a"]
    assert outcome.action == "minted" and reason in outcome.message
    assert cluster.published("h100-a") != bt.Token.parse(value)


def test_publishing_keeps_the_tags_pulumi_created_the_secret_with(cluster: Cluster) -> None:
    """A new version carries only the tags it is written with; Pulumi's (ignore_changes) never come back."""
    created = {"agk-role": "security", "owner": "platform"}
    cluster.vault.put(SECRETS["h100-a"], "placeholder: the issuer has not run yet", tags=created)
    assert cluster.run()["h100-a"].action == "minted"
    current = cluster.vault.current(SECRETS["h100-a"])
    assert current is not None and current["tags"] == {
        **created,
        "token-id": cluster.published("h100-a").id,
        "expiration": bt.rfc3339(NOW + TTL),
        "minted-by": "apiserver-0",
    }


@pytest.mark.parametrize("refused", [True, False])
def test_an_expired_token_is_replaced_whether_key_vault_answers_it_or_refuses_it(
    cluster: Cluster, refused: bool
) -> None:
    """An issuer that was down for a day finds the published token expired; Key Vault may refuse the read."""
    cluster.run()
    old = cluster.published("h100-a")
    cluster.clock[0] = NOW + TTL + HOUR
    cluster.vault.refuse_expired = refused
    outcome = cluster.run(pools=only("h100-a"))["h100-a"]
    reason = "refuses the published version as expired (SecretExpired)" if refused else f"token {old.id} expires at"
    assert outcome.action == "minted" and reason in outcome.message, outcome.message
    assert cluster.published("h100-a") != old
    assert cluster.run(pools=only("h100-a"))["h100-a"].action == "kept"


def test_a_token_that_authenticates_outside_the_node_group_is_replaced(cluster: Cluster) -> None:
    token = bt.Token("zzzzzz", "0123456789abcdef")
    rogue = bt.token_secret(token, "h100-a", NOW + TTL, "someone")
    rogue["stringData"]["auth-extra-groups"] = "system:bootstrappers:other"
    cluster.api().create_secret(rogue)
    cluster.vault.put(SECRETS["h100-a"], str(token), exp=NOW + TTL)
    outcome = cluster.run()["h100-a"]
    assert outcome.action == "minted" and "not as a node bootstrap token of h100-a" in outcome.message


def test_a_taken_token_id_is_drawn_again(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = bt.Token("aaaaaa", "0123456789abcdef")
    cluster.api().create_secret(bt.token_secret(taken, "system", NOW + HOUR, "someone"))
    draws = iter([taken, bt.Token("bbbbbb", "0123456789abcdef")])
    monkeypatch.setattr(bt.Token, "generate", classmethod(lambda cls: next(draws)))
    outcome = cluster.run(pools=only("h100-a"))["h100-a"]
    assert outcome.action == "minted" and cluster.published("h100-a").id == "bbbbbb"


# -- failures: nothing half-done -------------------------------------------------------------------


def test_without_the_issuer_role_nothing_is_published_and_the_error_names_the_role(cluster: Cluster) -> None:
    cluster.kube.rbac = []
    outcomes = cluster.run()
    assert {o.action for o in outcomes.values()} == {"failed"}
    message = outcomes["h100-a"].message
    assert "HTTP 403 Forbidden" in message and bt.MANAGED_BY in message and bt.ISSUER_USER in message
    assert cluster.vault.current(SECRETS["h100-a"]) is None


def test_the_role_lets_the_issuer_create_secrets_only_in_kube_system(cluster: Cluster) -> None:
    obj = bt.token_secret(bt.Token("cccccc", "0123456789abcdef"), "x", NOW + HOUR, "h")
    obj["metadata"]["namespace"] = "default"
    with pytest.raises(bt.ApiError) as err:
        cluster.api().create_secret(obj)
    assert err.value.status == 403
    # The admin's certificate is not the issuer: the Role binds one user.
    with pytest.raises(bt.ApiError) as err:
        cluster.api("admin").create_secret(bt.token_secret(bt.Token("dddddd", "0123456789abcdef"), "x", NOW, "h"))
    assert err.value.status == 403


def test_an_unreachable_api_server_publishes_nothing(cluster: Cluster) -> None:
    outcomes = bt.run(
        cluster.config(apiserver="https://127.0.0.1:1"),
        bt.KubeApi("https://127.0.0.1:1", *(str(cluster.files[k]) for k in ("ca", "issuer.crt", "issuer.key"))),
        VAULT_BEARER,
        now=NOW,
        host="h",
    )
    assert {o.action for o in outcomes} == {"failed"}
    assert "ConnectionRefusedError" in outcomes[0].message or "Connection refused" in outcomes[0].message
    assert cluster.vault.current(SECRETS["h100-a"]) is None


def test_a_review_that_says_nothing_mints_nothing(cluster: Cluster) -> None:
    cluster.run()
    cluster.kube.fail["/apis/authentication.k8s.io/v1/selfsubjectreviews"] = (500, "InternalError")
    before = len(cluster.kube.bootstrap_tokens())
    outcome = cluster.run(pools=only("h100-a"))["h100-a"]
    assert outcome.action == "failed" and "HTTP 500" in outcome.message
    assert len(cluster.kube.bootstrap_tokens()) == before


def test_the_vault_refuses_a_request_without_the_identity_token(cluster: Cluster) -> None:
    outcomes = bt.run(cluster.config(), cluster.api(), "someone-elses-token", now=NOW, host="h")
    assert {o.action for o in outcomes} == {"failed"}
    assert "HTTP 401 Unauthorized" in outcomes[0].message
    assert cluster.kube.bootstrap_tokens() == {}


def test_vault_throttling_is_waited_out(cluster: Cluster) -> None:
    cluster.vault.throttle = 2
    waits: list[float] = []
    outcomes = bt.run(
        cluster.config(pools=only("h100-a")), cluster.api(), VAULT_BEARER, now=NOW, host="h", sleep=waits.append
    )
    assert outcomes[0].action == "minted" and waits == [1.0, 1.0]  # Retry-After


# -- several API servers ---------------------------------------------------------------------------


def test_a_server_that_finds_a_fresh_token_after_minting_leaves_it(cluster: Cluster) -> None:
    """apiserver-1 runs completely while apiserver-0 is between minting and publishing."""

    def other_server(obj: dict[str, Any]) -> None:
        if obj["metadata"]["labels"]["app.kubernetes.io/instance"] == "h100-a" and cluster.kube.on_create:
            cluster.kube.on_create = None
            assert cluster.run(host="apiserver-1", pools=only("h100-a"))["h100-a"].action == "minted"

    cluster.kube.on_create = other_server
    outcome = cluster.run(host="apiserver-0", pools=only("h100-a"))["h100-a"]
    assert outcome.action == "left" and "another API server published" in outcome.message
    published = cluster.published("h100-a")
    current = cluster.vault.current(SECRETS["h100-a"])
    assert current is not None and current["tags"]["minted-by"] == "apiserver-1"
    assert len(cluster.kube.bootstrap_tokens()) == 2 and cluster.api().who(published) is not None


def test_two_servers_that_overlap_exactly_both_publish_and_either_token_joins(cluster: Cluster) -> None:
    """Both read the vault, both mint, both read again before either writes: the last writer wins."""
    barrier = threading.Barrier(2, timeout=60)

    def line_up(name: str) -> None:
        barrier.wait()

    cluster.vault.on_get = line_up
    results: dict[str, bt.Outcome] = {}

    def server(host: str) -> None:
        results[host] = cluster.run(host=host, pools=only("h100-a"))["h100-a"]

    threads = [threading.Thread(target=server, args=(h,)) for h in ("apiserver-0", "apiserver-1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert {o.action for o in results.values()} == {"minted"}
    tokens = cluster.kube.bootstrap_tokens()
    assert len(tokens) == 2
    assert cluster.published("h100-a").id in tokens
    for data in tokens.values():  # a node that fetched either version joins
        assert cluster.api().who(bt.Token(data["token-id"], data["token-secret"])) is not None
    # The next runs settle on the published token.
    cluster.vault.on_get = None
    for host in ("apiserver-0", "apiserver-1", "apiserver-2"):
        assert cluster.run(host=host, pools=only("h100-a"))["h100-a"].action == "kept"
    assert len(cluster.kube.bootstrap_tokens()) == 2


def test_five_servers_a_day_mint_two_tokens_per_pool(cluster: Cluster) -> None:
    """Every server runs hourly for 24 h: one token per renewal, not one per run."""
    for minute in range(0, 24 * 60, 60):
        cluster.clock[0] = NOW + minute * 60
        for server in range(5):
            outcomes = cluster.run(host=f"apiserver-{server}")
            assert all(o.ok for o in outcomes.values())
    # One token per pool every TTL - RENEW (24 h / 12 h = 2), whichever server gets there first.
    assert len(cluster.kube.bootstrap_tokens()) == math.ceil(24 * HOUR / (TTL - RENEW)) * len(POOLS)


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


def host_json(tmp: Path, vault_url: str = "https://kv.vault.azure.net/") -> str:
    """The API server's /etc/agk/host.json: the issuer takes the vault and its identity from there."""
    path = tmp / "host.json"
    path.write_text(
        boot.HostConfig("apiserver", "apiserver-0", "dev", vault_url, "apiserver-0-x", ISSUER_CLIENT).to_json()
    )
    return str(path)


def test_the_program_runs_from_its_configuration_file(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bootstrap-tokens.json"
    path.write_text(cluster.config().to_json())
    assert cluster.vault_url not in path.read_text() and ISSUER_CLIENT not in path.read_text()  # host.json's
    host = host_json(tmp_path, cluster.vault_url)
    cluster.clock[0] = time.time()  # main() takes the wall clock
    imds = FakeImds()
    with serve(imds) as imds_url:
        assert bt.main(["--config", str(path), "--host-config", host], imds_endpoint=imds_url) == 0
    out = capsys.readouterr()
    assert out.err == ""
    lines = out.out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["pool h100-a", "pool system"]
    assert all(": minted: token " in line for line in lines)
    # The identity the vault grants is the configured one; no token secret reaches the journal.
    assert imds.calls[0]["client_id"] == ["11111111-2222-3333-4444-555555555555"]
    assert imds.calls[0]["resource"] == ["https://vault.azure.net"]
    for pool in POOLS:
        assert cluster.published(pool).secret not in out.out
    with serve(imds) as imds_url:
        assert bt.main(["--config", str(path), "--host-config", host], imds_endpoint=imds_url) == 0
    assert all(": kept: " in line for line in capsys.readouterr().out.splitlines())


def test_a_failed_pool_fails_the_run(cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.kube.rbac = []
    path = tmp_path / "c.json"
    path.write_text(cluster.config(pools=only("h100-a")).to_json())
    with serve(FakeImds()) as imds_url:
        assert (
            bt.main(
                ["--config", str(path), "--host-config", host_json(tmp_path, cluster.vault_url)], imds_endpoint=imds_url
            )
            == 1
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: pool h100-a: failed: POST /api/v1/namespaces/kube-system/secrets: HTTP 403"
    )


GOOD = {
    "apiserver": "https://127.0.0.1:6443",
    "ca_file": "/etc/kubernetes/pki/ca.crt",
    "cert_file": "/etc/kubernetes/pki/i.crt",
    "key_file": "/etc/kubernetes/pki/i.key",
    "pools": {"h100-a": "pool-h100-a-bootstrap-token-0a1b2c3d"},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"poolz": ["x"]},
            "poolz: unknown key: use only apiserver, ca_file, cert_file, key_file, pools, renew_before_hours, ttl_hours",
        ),
        (
            {"vault_url": "https://kv.vault.azure.net"},  # host.json has it: one copy
            "vault_url: unknown key: use only apiserver, ca_file, cert_file, key_file, pools, renew_before_hours, ttl_hours",
        ),
        ({"ca_file": None}, "ca_file: must be a non-empty string"),
        ({"apiserver": "127.0.0.1:6443"}, "apiserver: '127.0.0.1:6443' is not a URL: use https://<host>[:port]"),
        ({"pools": {}}, "pools: {}: map each pool to its token's Key Vault secret"),
        ({"pools": ["h100-a"]}, "pools: ['h100-a']: map each pool to its token's Key Vault secret"),
        ({"pools": {"H100": "s"}}, "pools: 'H100' cannot name a bootstrap group: use lowercase letters, digits, '-'"),
        ({"pools": {"a": "s_1"}}, "pools.a: 's_1' is not a Key Vault secret name: use 1-127 letters, digits, '-'"),
        ({"pools": {"a": "s", "b": "s"}}, "pools: two pools share a Key Vault secret: give each its own"),
        ({"ttl_hours": 0}, "ttl_hours: 0: use a whole number of hours >= 1"),
        ({"ttl_hours": "24"}, "ttl_hours: '24': use a whole number of hours >= 1"),
        (
            {"ttl_hours": 12},
            "renew_before_hours: 12 is not below ttl_hours 12: renew before a token expires (e.g. half its lifetime)",
        ),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**GOOD, **change}))
    assert bt.main(["--config", str(path), "--host-config", host_json(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"error: {path}: {message}\n"


def test_a_missing_key_or_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "key_file"}))
    host = host_json(tmp_path)
    assert bt.main(["--config", str(path), "--host-config", host]) == 2
    assert capsys.readouterr().err == f"error: {path}: key_file: missing: add it\n"
    assert bt.main(["--config", str(path), "--host-config", str(tmp_path / "none.json")]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'none.json'}: No such file or directory: the host's facts come from its customData\n"
    )
    assert bt.main(["--config", str(tmp_path / "nope.json"), "--host-config", host]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'nope.json'}: No such file or directory: write the issuer configuration there\n"
    )


def test_the_configuration_round_trips() -> None:
    config = bt.IssuerConfig.from_json(json.dumps(GOOD), vault_url="https://kv.vault.azure.net/", client_id="c")
    assert config.ttl_hours == bt.TTL_HOURS and config.renew_before_hours == bt.RENEW_BEFORE_HOURS
    assert bt.IssuerConfig.from_json(config.to_json(), vault_url=config.vault_url, client_id="c") == config


@pytest.mark.parametrize("module", ["bootstrap_tokens.py", "vault.py", "node_token.py"])
def test_host_modules_parse_as_python_3_10(module: str) -> None:
    """The oldest host image's Python (3.10) must accept the file; 3.11-only modules are not imported."""
    source = (HOST / module).read_text()
    tree = ast.parse(source, feature_version=(3, 10))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
    }
    assert not imported & {"tomllib", "modules", "tests"}, imported
    assert not any(isinstance(n, ast.Attribute) and n.attr == "UTC" for n in ast.walk(tree))  # datetime.UTC: 3.11


def test_the_vault_client_reads_and_writes_through_the_7_4_data_plane(cluster: Cluster) -> None:
    name = "pool-x-bootstrap-token"
    cluster.vault.grant_write(name, ISSUER_CLIENT)
    assert vault.read(cluster.vault_url, name, VAULT_BEARER) is None
    written = vault.write(cluster.vault_url, name, "v1", VAULT_BEARER, expires=123, tags={"a": "b"})
    assert (written.value, written.expires, dict(written.tags)) == ("v1", 123, {"a": "b"})
    vault.write(cluster.vault_url, name, "v2", VAULT_BEARER)
    read = vault.read(cluster.vault_url, name, VAULT_BEARER)
    assert (
        read is not None
        and read.value == "v2"
        and read.expires is None
        and read.id.startswith("https://vault/secrets/")
    )
    with pytest.raises(vault.VaultError, match=r"^PUT secret bad_name: HTTP 400 BadParameter"):
        vault.write(cluster.vault_url, "bad_name", "v", VAULT_BEARER, sleep=lambda s: None)
    # Secrets Officer on one secret is no grant on another.
    with pytest.raises(vault.VaultError, match=r"^PUT secret other: HTTP 403 Forbidden: .*setSecret"):
        vault.write(cluster.vault_url, "other", "v", VAULT_BEARER, sleep=lambda s: None)


@pytest.mark.realtool
def test_systemd_accepts_the_issuer_units(tmp_path: Path) -> None:
    from modules.bootstrap.templating import render
    from tests.bootstrap.conftest import tool

    analyze = tool("systemd-analyze")
    service = render(
        "agk-bootstrap-tokens.service.j2",
        program="/opt/agk/lib/bootstrap_tokens.py",
        config=bt.DEFAULT_CONFIG,
        timeout_s=300,
    )
    timer = render(
        "agk-bootstrap-tokens.timer.j2",
        every_minutes=bt.EVERY_MINUTES,
        renew_before_hours=bt.RENEW_BEFORE_HOURS,
        spread_s=60,
    )
    (tmp_path / "agk-bootstrap-tokens.service").write_text(service)
    (tmp_path / "agk-bootstrap-tokens.timer").write_text(timer)
    run = subprocess.run(
        [
            analyze,
            "verify",
            "--man=no",
            str(tmp_path / "agk-bootstrap-tokens.timer"),
            str(tmp_path / "agk-bootstrap-tokens.service"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout + run.stderr
    assert (
        "ExecStart=/usr/bin/python3 /opt/agk/lib/bootstrap_tokens.py --config /etc/agk/bootstrap-tokens.json" in service
    )
    assert f"OnUnitActiveSec={bt.EVERY_MINUTES}min" in timer


def _whoami(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    from tests.bootstrap.conftest import tool

    return subprocess.run(
        [tool("kubectl"), "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


@pytest.mark.realtool
def test_kubectl_joins_with_the_published_token_through_the_token_file(cluster: Cluster, tmp_path: Path) -> None:
    """client-go (kubectl) loads the bootstrap kubeconfig, reads tokenFile and is the pool's bootstrapper;
    a renewed token in the same file works without touching the kubeconfig; a revoked one is refused."""
    from modules.bootstrap.templating import render

    cluster.clock[0] = time.time()  # kubectl's requests are answered at the wall clock
    cluster.run()
    token_file = tmp_path / "bootstrap-token"
    # As the node's sync writes it: the vault secret's value (a trailing newline is tolerated too).
    token_file.write_text(str(cluster.published("h100-a")) + "\n")
    kubeconfig = tmp_path / "bootstrap-kubelet.kubeconfig"
    kubeconfig.write_text(
        render(
            "bootstrap-kubeconfig.j2",
            cluster="dev",
            server=cluster.kube_url,
            user="kubelet-bootstrap",
            ca_file=str(cluster.files["ca"]),
            token_file=str(token_file),
        )
    )
    before = kubeconfig.read_text()
    run = _whoami(kubeconfig)
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)["status"]["userInfo"]
    assert info["username"] == f"system:bootstrap:{cluster.published('h100-a').id}"
    assert bt.NODES_GROUP in info["groups"] and bt.pool_group("h100-a") in info["groups"]

    cluster.clock[0] += TTL - RENEW
    assert cluster.run()["h100-a"].action == "minted"
    token_file.write_text(str(cluster.published("h100-a")))
    run = _whoami(kubeconfig)
    assert run.returncode == 0 and cluster.published("h100-a").id in run.stdout, run.stderr
    assert kubeconfig.read_text() == before

    cluster.kube.revoke(cluster.published("h100-a").id)
    run = _whoami(kubeconfig)
    assert run.returncode != 0 and "Unauthorized" in run.stderr


def test_the_program_runs_as_the_hosts_run_it(tmp_path: Path) -> None:
    """From /opt/agk/lib as a script, beside the host library, importing nothing of the toolkit."""
    from modules.bootstrap.roles import HOST_PROGRAMS

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("bootstrap_tokens.py", *HOST_PROGRAMS):
        (lib / name).write_text((HOST / name).read_text())
    config = tmp_path / "bootstrap-tokens.json"
    config.write_text(json.dumps({**GOOD, "ttl_hours": 6}))
    run = subprocess.run(
        [
            sys.executable,
            "-E",
            "-s",
            str(lib / "bootstrap_tokens.py"),
            "--config",
            str(config),
            "--host-config",
            host_json(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (run.returncode, run.stdout) == (2, "")
    assert (
        run.stderr
        == f"error: {config}: renew_before_hours: 12 is not below ttl_hours 6: renew before a token expires (e.g. half its lifetime)\n"
    )
