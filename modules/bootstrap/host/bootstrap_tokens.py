"""The pools' kubelet bootstrap tokens: minted on the API server hosts, published to Key Vault.

A pool node joins with a bootstrap token instead of a year-long shared certificate
(kubernetes.io, "Authenticating with Bootstrap Tokens"): a Secret ``bootstrap-token-<id>`` of type
``bootstrap.kubernetes.io/token`` in ``kube-system`` whose ``token-id`` and ``token-secret`` match
``[a-z0-9]{6}\\.[a-z0-9]{16}``, ``usage-bootstrap-authentication: "true"``, ``expiration`` as "an
absolute UTC time using RFC3339" and ``auth-extra-groups`` that "Must start with
system:bootstrappers:". The API server (``--enable-bootstrap-token-auth``) authenticates it as
``system:bootstrap:<id>`` in ``system:bootstrappers`` plus the extra groups, rejects it once expired,
and the controller-manager's ``tokencleaner`` deletes it (both flags are in the static pods).

Every few minutes each API server host runs this program (agk-bootstrap-tokens.timer). For each
pool it reads the pool's Key Vault secret (``pool-<pool>-bootstrap-token-...``); when that holds no
token, a token the API server no longer accepts (revoked: its Secret was deleted), or one expiring
within the renewal window, it creates a fresh token Secret through the local API server
(127.0.0.1, its own client certificate) and publishes the token to the vault with the host's
managed identity. Nodes copy the vault secret into the token file their bootstrap kubeconfig names.

Several API servers run it. A run publishes only when the vault's token needs renewing, and reads
the vault again just before writing: a run that finds another server's fresh token there leaves it.
Two runs that overlap exactly both publish; the last writer wins and both tokens stay valid until
they expire, so a node holding either joins. The issuer never reads, lists or deletes Secrets: it
may only create them (its Role), and the tokencleaner removes what expires.

Runs on the hosts with the standard library only (Python 3.10); imported by the tests as is.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import re
import secrets
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

if __package__:  # the toolkit and the tests import this as modules.bootstrap.host.bootstrap_tokens
    from . import boot, imds, node_token, vault
else:  # a host runs it from /opt/agk/lib, beside the modules it imports
    import boot  # type: ignore[no-redef,import-not-found]
    import imds  # type: ignore[no-redef,import-not-found]
    import node_token  # type: ignore[no-redef,import-not-found]
    import vault  # type: ignore[no-redef,import-not-found]

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
TOKEN_PATTERN = node_token.TOKEN_PATTERN
# k8s.io/cluster-bootstrap token/api: BootstrapGroupPattern. An extra group outside the pattern makes
# the authenticator refuse the whole token.
GROUP_PATTERN = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
SECRET_TYPE = "bootstrap.kubernetes.io/token"
NAMESPACE = "kube-system"

NODES_GROUP = "system:bootstrappers:agk:nodes"
"""Every pool's tokens carry it; the add-ons let it (and only it) file node CSRs."""
ISSUER_USER = "agk:bootstrap-token-issuer"
"""The issuer's client certificate CN; the add-ons' Role lets this user create Secrets in kube-system."""
MANAGED_BY = "agk-bootstrap-token-issuer"

TTL_HOURS = 24
"""kubeadm's default (``kubeadm token create --ttl``, "Default: 24h0m0s")."""
RENEW_BEFORE_HOURS = 12
"""A new token once the published one has less left: a node that read the old one still joins with it."""
EVERY_MINUTES = 10
"""How often the timer runs: how long a pool waits for its first token once the add-ons' RBAC exists."""
DEFAULT_CONFIG = "/etc/agk/bootstrap-tokens.json"
_VAULT_NAME = re.compile(r"\A[0-9a-zA-Z-]{1,127}\Z")


class ConfigError(ValueError):
    """The issuer's configuration file is wrong; the message names the key and the fix."""


class ApiError(Exception):
    """The API server refused a request or could not be reached (``status`` 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def pool_group(pool: str) -> str:
    """The pool's own extra group: the audit log says which pool's token joined a node."""
    return f"system:bootstrappers:agk:pool:{pool}"


def vault_secret_key(pool: str) -> str:
    """What the pool's token secret is called after (the cluster stack names the secret itself)."""
    return f"pool-{pool}-bootstrap-token"


def rfc3339(t: float) -> str:
    # dt.timezone.utc, not dt.UTC: the hosts run Python 3.10.
    return dt.datetime.fromtimestamp(int(t), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017


@dataclass(frozen=True)
class Token:
    id: str
    secret: str

    def __str__(self) -> str:
        return f"{self.id}.{self.secret}"

    @classmethod
    def parse(cls, text: str) -> Token | None:
        m = TOKEN_PATTERN.match(text)
        return cls(m.group(1), m.group(2)) if m else None

    @classmethod
    def generate(cls) -> Token:
        # secrets.choice: uniform over the alphabet, from the OS's CSPRNG (as kubeadm's RandBytes).
        return cls(
            "".join(secrets.choice(ALPHABET) for _ in range(6)), "".join(secrets.choice(ALPHABET) for _ in range(16))
        )


def token_secret(token: Token, pool: str, expires: float, minted_by: str) -> dict[str, Any]:
    """The ``bootstrap.kubernetes.io/token`` Secret of ``token`` (stringData: the API server encodes it)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"bootstrap-token-{token.id}",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "kubelet-bootstrap",
                "app.kubernetes.io/instance": pool,
                "app.kubernetes.io/managed-by": MANAGED_BY,
            },
        },
        "type": SECRET_TYPE,
        "stringData": {
            "description": f"kubelet bootstrap token of pool {pool}, minted on {minted_by}",
            "token-id": token.id,
            "token-secret": token.secret,
            "expiration": rfc3339(expires),
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": f"{NODES_GROUP},{pool_group(pool)}",
        },
    }


@dataclass(frozen=True)
class IssuerConfig:
    """What ``/etc/agk/bootstrap-tokens.json`` holds (the API server's bundle brings it), with the vault
    and the host's identity from /etc/agk/host.json."""

    apiserver: str
    """The local API server, ``https://127.0.0.1:<port>`` (its certificate has the loopback SAN)."""
    ca_file: str
    cert_file: str
    key_file: str
    """The issuer's client certificate (CN ``ISSUER_USER``) and key."""
    vault_url: str
    """``https://<vault>.vault.azure.net`` (reached through its private endpoint)."""
    client_id: str
    """The host's user-assigned identity, allowed to set the pools' token secrets."""
    pools: Mapping[str, str]
    """Pool name -> the Key Vault secret that holds its current token (what its nodes fetch)."""
    ttl_hours: int = TTL_HOURS
    renew_before_hours: int = RENEW_BEFORE_HOURS

    def __post_init__(self) -> None:
        for key in ("apiserver", "ca_file", "cert_file", "key_file", "vault_url", "client_id"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key):
                raise ConfigError(f"{key}: must be a non-empty string")
        for key in ("apiserver", "vault_url"):
            if not getattr(self, key).startswith(("https://", "http://")):
                raise ConfigError(f"{key}: {getattr(self, key)!r} is not a URL: use https://<host>[:port]")
        if not isinstance(self.pools, Mapping) or not self.pools:
            raise ConfigError(f"pools: {self.pools!r}: map each pool to its token's Key Vault secret")
        for pool, secret in self.pools.items():
            if not GROUP_PATTERN.match(pool_group(pool)):
                raise ConfigError(f"pools: {pool!r} cannot name a bootstrap group: use lowercase letters, digits, '-'")
            if not isinstance(secret, str) or not _VAULT_NAME.match(secret):
                raise ConfigError(
                    f"pools.{pool}: {secret!r} is not a Key Vault secret name: use 1-127 letters, digits, '-'"
                )
        if len(set(self.pools.values())) != len(self.pools):
            raise ConfigError("pools: two pools share a Key Vault secret: give each its own")
        for key in ("ttl_hours", "renew_before_hours"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{key}: {value!r}: use a whole number of hours >= 1")
        if self.renew_before_hours >= self.ttl_hours:
            raise ConfigError(
                f"renew_before_hours: {self.renew_before_hours} is not below ttl_hours {self.ttl_hours}: "
                "renew before a token expires (e.g. half its lifetime)"
            )

    HOST_KEYS = ("vault_url", "client_id")
    """Come from the host's facts (/etc/agk/host.json), not from the file: one copy of each."""

    def to_json(self) -> str:
        """The file's content: everything but ``HOST_KEYS``."""
        data = {k: v for k, v in asdict(self).items() if k not in self.HOST_KEYS}
        return json.dumps({**data, "pools": dict(self.pools)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, *, vault_url: str, client_id: str) -> IssuerConfig:
        """The file's ``text`` with the host's vault and identity (``boot.HostConfig``)."""
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ConfigError(f"not JSON ({err}): rewrite it as a JSON object") from None
        if not isinstance(data, dict):
            raise ConfigError('not a JSON object: write {"apiserver": ..., "pools": {...}, ...}')
        fields = {k: f for k, f in cls.__dataclass_fields__.items() if k not in cls.HOST_KEYS}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown key: use only {', '.join(sorted(fields))}")
        missing = sorted(k for k, f in fields.items() if k not in data and f.default is dataclasses.MISSING)
        if missing:
            raise ConfigError(f"{missing[0]}: missing: add it")
        return cls(**data, vault_url=vault_url, client_id=client_id)


class KubeApi:
    """The few API calls the issuer makes, with its client certificate, to one API server."""

    def __init__(self, server: str, ca_file: str, cert_file: str, key_file: str, *, timeout: float = 30) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._issuer = ssl.create_default_context(cafile=ca_file)
        self._issuer.load_cert_chain(cert_file, key_file)
        # Checking a token must not present the issuer's certificate: the API server tries x509 before
        # bearer tokens (pkg/kubeapiserver/authenticator/config.go) and would answer as the issuer.
        self._bearer = ssl.create_default_context(cafile=ca_file)

    def _request(
        self, method: str, path: str, body: Mapping[str, Any], context: ssl.SSLContext, bearer: str | None = None
    ) -> dict[str, Any]:
        request = urllib.request.Request(self.server + path, data=json.dumps(body).encode(), method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        if bearer is not None:
            request.add_header("Authorization", f"Bearer {bearer}")
        handlers = (urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
        try:
            with urllib.request.build_opener(*handlers).open(request, timeout=self.timeout) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as err:
            try:
                status = json.loads(err.read())
                message = f"{status.get('reason', err.reason)}: {status.get('message', '')}"
            except (ValueError, AttributeError, OSError):
                message = str(err.reason)
            raise ApiError(err.code, f"{method} {path}: HTTP {err.code} {message}") from None
        except (OSError, ValueError) as err:
            raise ApiError(0, f"{method} {path}: {type(err).__name__}: {err}") from None

    def create_secret(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /api/v1/namespaces/<ns>/secrets`` as the issuer."""
        return self._request("POST", f"/api/v1/namespaces/{obj['metadata']['namespace']}/secrets", obj, self._issuer)

    def who(self, token: Token) -> tuple[str, tuple[str, ...]] | None:
        """Who the API server takes ``token`` for (a SelfSubjectReview, which every authenticated user
        may create: ``system:basic-user``), or None when it refuses the token (401)."""
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            out = self._request(
                "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review, self._bearer, str(token)
            )
        except ApiError as err:
            if err.status == 401:
                return None
            raise
        user = (out.get("status") or {}).get("userInfo") or {}
        return str(user.get("username", "")), tuple(user.get("groups") or ())


@dataclass(frozen=True)
class Outcome:
    pool: str
    action: str
    """``kept``, ``minted`` (and published), ``left`` (another server published first) or ``failed``."""
    message: str

    @property
    def ok(self) -> bool:
        return self.action != "failed"


def renewal_reason(current: vault.VaultSecret | None, now: float, renew_before_hours: int) -> str | None:
    """Why the published token must be replaced (without asking the API server), or None."""
    if current is None:
        return "no token published yet"
    if current == _refused(current.name):
        return "Key Vault refuses the published version as expired (SecretExpired)"
    token = Token.parse(current.value)
    if token is None:
        return "the published value is not a bootstrap token"
    if current.expires is None:
        return f"token {token.id} was published without an expiry"
    if current.expires - now <= renew_before_hours * 3600:
        return f"token {token.id} expires at {rfc3339(current.expires)}, within {renew_before_hours} h"
    return None


def _accepted(kube: KubeApi, token: Token, pool: str) -> str | None:
    """Why the API server's view of ``token`` calls for a new one, or None when it accepts it as the pool's."""
    who = kube.who(token)
    if who is None:
        return f"the API server refuses token {token.id} (its Secret was deleted or has expired)"
    user, groups = who
    if user != f"system:bootstrap:{token.id}" or NODES_GROUP not in groups or pool_group(pool) not in groups:
        return f"token {token.id} authenticates as {user} {list(groups)}, not as a node bootstrap token of {pool}"
    return None


def _published(
    config: IssuerConfig, name: str, bearer: str, sleep: Callable[[float], None]
) -> vault.VaultSecret | None:
    """The pool's published version. One that Key Vault refuses as expired (``vault.SecretExpired``) reads
    as an expired version with no value, so it is replaced like any expired token, not a failed run
    forever. Defensive: the REST docs say a get works outside the exp window, but a user expected
    the 403 their text describes (Azure/AzureKeyVault#19); a refused read has no tags to keep."""
    try:
        return vault.read(config.vault_url, name, bearer, sleep=sleep)
    except vault.SecretExpired:
        return _refused(name)


def _refused(name: str) -> vault.VaultSecret:
    return vault.VaultSecret(name=name, value="", expires=0)


def issue(
    config: IssuerConfig,
    pool: str,
    kube: KubeApi,
    bearer: str,
    *,
    now: float,
    host: str,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """One pool: keep the published token, or mint and publish a new one."""
    name = config.pools[pool]
    try:
        current = _published(config, name, bearer, sleep)
        reason = renewal_reason(current, now, config.renew_before_hours)
        if reason is None:
            assert current is not None
            published = Token.parse(current.value)
            assert published is not None
            reason = _accepted(kube, published, pool)
            if reason is None:
                return Outcome(pool, "kept", f"token {published.id} valid until {rfc3339(current.expires or 0)}")
        expires = now + config.ttl_hours * 3600
        for _ in range(3):
            token = Token.generate()
            try:
                kube.create_secret(token_secret(token, pool, expires, host))
                break
            except ApiError as err:
                if err.status != 409:  # 409: that id exists already; draw another
                    raise
        else:
            raise ApiError(409, f"three token ids in a row exist already in {NAMESPACE}")
        latest = _published(config, name, bearer, sleep)
        changed = latest is not None and (current is None or latest.value != current.value)
        if changed and renewal_reason(latest, now, config.renew_before_hours) is None:
            assert latest is not None
            other = Token.parse(latest.value)
            return Outcome(
                pool,
                "left",
                f"another API server published token {other.id if other else '?'} first; "
                f"token {token.id} stays unused until it expires",
            )
        # A write replaces the tags with the new version's: keep those Pulumi created the secret with
        # (cost, owner, role), which its ignore_changes never puts back.
        read = [v for v in (latest, current) if v is not None and v != _refused(name)]
        kept = dict(read[0].tags) if read else {}
        vault.write(
            config.vault_url,
            name,
            str(token),
            bearer,
            expires=int(expires),
            tags={**kept, "token-id": token.id, "expiration": rfc3339(expires), "minted-by": host},
            sleep=sleep,
        )
        return Outcome(pool, "minted", f"token {token.id} valid until {rfc3339(expires)} ({reason})")
    except ApiError as err:
        hint = ""
        if err.status == 403:
            hint = f": the add-ons' Role {MANAGED_BY} (create secrets in {NAMESPACE} for {ISSUER_USER}) is missing"
        return Outcome(pool, "failed", f"{err}{hint}")
    except vault.VaultError as err:
        return Outcome(pool, "failed", f"Key Vault {config.vault_url}: {err}")


def run(
    config: IssuerConfig,
    kube: KubeApi,
    bearer: str,
    *,
    now: float | None = None,
    host: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Outcome]:
    when = time.time() if now is None else now
    name = host or socket.gethostname()
    return [issue(config, pool, kube, bearer, now=when, host=name, sleep=sleep) for pool in config.pools]


def main(argv: Sequence[str] | None = None, *, imds_endpoint: str = imds.ENDPOINT) -> int:
    parser = argparse.ArgumentParser(description="Mint and publish the pools' kubelet bootstrap tokens.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"issuer configuration (default {DEFAULT_CONFIG})")
    parser.add_argument(
        "--host-config",
        default=boot.HOST_CONFIG,
        help=f"the vault and the host's identity (default {boot.HOST_CONFIG})",
    )
    args = parser.parse_args(argv)
    try:
        host = boot.HostConfig.load(args.host_config)
    except (OSError, ValueError, TypeError) as err:
        reason = err.strerror if isinstance(err, OSError) else str(err)
        print(f"error: {args.host_config}: {reason}: the host's facts come from its customData", file=sys.stderr)
        return 2
    try:
        with open(args.config, encoding="utf-8") as f:
            config = IssuerConfig.from_json(f.read(), vault_url=host.vault, client_id=host.client_id)
    except OSError as err:
        print(f"error: {args.config}: {err.strerror}: write the issuer configuration there", file=sys.stderr)
        return 2
    except ConfigError as err:
        print(f"error: {args.config}: {err}", file=sys.stderr)
        return 2
    try:
        kube = KubeApi(config.apiserver, config.ca_file, config.cert_file, config.key_file)
    except (OSError, ssl.SSLError) as err:
        print(
            f"error: issuer certificate {config.cert_file}, key {config.key_file}, CA {config.ca_file}: {err}",
            file=sys.stderr,
        )
        return 1
    try:
        bearer = imds.token(imds.VAULT, config.client_id, endpoint=imds_endpoint)
    except imds.TokenError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    outcomes = run(config, kube, bearer)
    for o in outcomes:
        line = f"pool {o.pool}: {o.action}: {o.message}"
        print(line if o.ok else f"error: {line}", file=sys.stdout if o.ok else sys.stderr)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
