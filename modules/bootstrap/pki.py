"""The cluster's PKI as data: which CAs and certificates exist, their subjects, SANs, usages, lifetimes.

One spec drives both the Pulumi component (``modules.azure.pki.ClusterPki``,
pulumi-tls) and the tests' issuer (``cryptography``), so the tests prove the deployed PKI.
Keys are ECDSA P-256: small PEMs keep every user-data far under Azure's customData limit.

Secrets are named ``cert:<name>``, ``key:<name>`` (and ``pub:service-account``); renderers ask
for them by these names and never see how they were made.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from ipaddress import IPv4Address
from typing import Literal

from modules.bootstrap import encryption
from modules.bootstrap.context import BootstrapContext, EtcdCluster
from modules.bootstrap.host.bootstrap_tokens import ISSUER_USER

Usage = Literal["digital_signature", "key_encipherment", "server_auth", "client_auth", "cert_signing", "crl_signing"]

CA_HOURS = 10 * 365 * 24
LEAF_HOURS = 365 * 24
RENEWAL_RUN_DAYS = 7
"""The scheduled renewal (.github/workflows/renew-certificates.yml) runs weekly."""
EARLY_RENEWAL_HOURS = 45 * 24
"""pulumi-tls replaces a certificate at the first `pulumi up` within this long of its notAfter. 45 days is
two renewal runs before CertificateExpiresSoon (30 days, monitoring.CERT_WARN_DAYS): the alert means two
runs in a row did not renew it."""
STAGGER_DAYS = 8
"""Lifetimes of one group's hosts (etcd members, API servers) differ by this much, more than the renewal
run's period, so no weekly run renews two members of one quorum; and so the leaves do not all expire, and
renew, on one day."""
STAGGER_SLOTS = 5
"""Slots the shared client certificates cycle through (as many as the largest group's members)."""


def lifetime_hours(slot: int) -> int:
    """A leaf's lifetime for stagger slot ``slot`` (a host's index in its group, or a shared
    certificate's place modulo STAGGER_SLOTS)."""
    return LEAF_HOURS + (slot % STAGGER_SLOTS) * STAGGER_DAYS * 24


SERVER: tuple[Usage, ...] = ("digital_signature", "key_encipherment", "server_auth")
CLIENT: tuple[Usage, ...] = ("digital_signature", "key_encipherment", "client_auth")
PEER: tuple[Usage, ...] = ("digital_signature", "key_encipherment", "server_auth", "client_auth")
CA_USAGES: tuple[Usage, ...] = ("digital_signature", "cert_signing", "crl_signing")

ETCD_CA = "etcd-ca"
KUBERNETES_CA = "kubernetes-ca"
FRONT_PROXY_CA = "front-proxy-ca"
KUBELET_SERVING_CA = "kubelet-serving-ca"
"""kube-controller-manager's ``kubernetes.io/kubelet-serving`` signer, and nothing else's. Kubelets choose
their serving certificates' names from their own Node's status.addresses, which a node credential may write
(NodeRestriction lets a node update its own Node); signed by the Kubernetes CA, an approved request naming
the API server's VIP or kubernetes.default.svc would be trusted by every API server client. Only Prometheus'
kubelet scrape and the API servers' calls to kubelets (``--kubelet-certificate-authority``) trust this CA, so
such a certificate lets one pass for a kubelet, no more."""
SERVICE_ACCOUNT = "service-account"
"""Signs service-account tokens (ECDSA P-256) on a cluster without workload identity."""
SERVICE_ACCOUNT_RSA = "service-account-rsa"
"""Signs them instead once ``cluster.identity`` is set: RSA (``KEY_PAIR_ALGORITHMS``), because Entra accepts only
RSA signatures on the federated tokens of workload identity (modules/identity/oidc.py says where that is written).
The ECDSA key then stays a verification key of the API servers (its public half only), so tokens the cluster issued
before keep working. Only then: an RSA key pair is 2 KB more of every API server's bundle."""
RSA_BITS = 2048
KEY_PAIR_ALGORITHMS: dict[str, str] = {SERVICE_ACCOUNT_RSA: "RSA"}
"""Bare key pairs that are not ECDSA P-256, by name; pulumi-tls and the tests' issuer both read this."""
APISERVER_ETCD_CLIENT = "apiserver-etcd-client"
APISERVER_KUBELET_CLIENT = "apiserver-kubelet-client"
FRONT_PROXY_CLIENT = "front-proxy-client"
CONTROLLER_MANAGER = "controller-manager"
SCHEDULER = "scheduler"
KUBE_PROXY = "kube-proxy"
PROMETHEUS = "prometheus"
ETCD_HEALTHCHECK = "etcd-healthcheck-client"
BOOTSTRAP_TOKEN_ISSUER = "bootstrap-token-issuer"
"""The API servers' token issuer (host/bootstrap_tokens.py): the add-ons' Role lets it create Secrets."""
ADMIN = "admin"
"""The break-glass cluster-admin client whose kubeconfig the cluster stack exports (secret)."""


def signing_key(ctx: BootstrapContext) -> str:
    """The key pair that signs service-account tokens (the other, if any, only verifies)."""
    return SERVICE_ACCOUNT_RSA if ctx.identity else SERVICE_ACCOUNT


@dataclass(frozen=True)
class CaSpec:
    name: str
    common_name: str
    validity_hours: int = CA_HOURS


@dataclass(frozen=True)
class CertSpec:
    name: str
    ca: str
    common_name: str
    organization: str | None = None
    """One O= (pulumi-tls takes one); Kubernetes reads it as the user's group."""
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[IPv4Address, ...] = ()
    usages: tuple[Usage, ...] = CLIENT
    validity_hours: int = LEAF_HOURS


@dataclass(frozen=True)
class PkiSpec:
    cas: tuple[CaSpec, ...]
    certs: tuple[CertSpec, ...]
    key_pairs: tuple[str, ...]
    """Bare key pairs (the service-account signing key): ``key:<name>`` and ``pub:<name>``."""
    encryption_keys: tuple[str, ...] = ()
    """Seeds of the Secret encryption keys (Ed25519 keys, ``encryption.seed_secret``) and, when there are
    any, the EncryptionConfiguration built from them (``encryption.CONFIG_SECRET``)."""

    def cert(self, name: str) -> CertSpec:
        for c in self.certs:
            if c.name == name:
                return c
        raise KeyError(name)

    def secret_names(self) -> tuple[str, ...]:
        names = [f"{kind}:{ca.name}" for ca in self.cas for kind in ("cert", "key")]
        names += [f"{kind}:{c.name}" for c in self.certs for kind in ("cert", "key")]
        names += [f"{kind}:{k}" for k in self.key_pairs for kind in ("key", "pub")]
        names += [encryption.seed_secret(k) for k in self.encryption_keys]
        names += [encryption.CONFIG_SECRET] if self.encryption_keys else []
        return tuple(names)


LOOPBACK = IPv4Address("127.0.0.1")


def etcd_server_cert(name: str) -> str:
    return f"etcd-server-{name}"


def etcd_peer_cert(name: str) -> str:
    return f"etcd-peer-{name}"


def apiserver_cert(name: str) -> str:
    return f"apiserver-{name}"


def _etcd_certs(etcd: EtcdCluster) -> list[CertSpec]:
    certs = []
    for i, m in enumerate(etcd.members):
        # Loopback in both: local etcdctl health checks, and etcd's peer listener checks the
        # connecting peer's IP against its certificate's SANs.
        names = (m.name, "localhost")
        ips = (m.ip, LOOPBACK)
        hours = lifetime_hours(i)  # one member's two certificates renew together: one restart
        certs.append(CertSpec(etcd_server_cert(m.name), ETCD_CA, m.name, None, names, ips, SERVER, hours))
        certs.append(CertSpec(etcd_peer_cert(m.name), ETCD_CA, m.name, None, names, ips, PEER, hours))
    return certs


def pki_spec(ctx: BootstrapContext) -> PkiSpec:
    """Every CA, certificate and key pair the cluster's hosts receive."""
    cas = (
        CaSpec(ETCD_CA, f"{ctx.cluster} etcd CA"),
        CaSpec(KUBERNETES_CA, f"{ctx.cluster} Kubernetes CA"),
        CaSpec(FRONT_PROXY_CA, f"{ctx.cluster} front-proxy CA"),
        CaSpec(KUBELET_SERVING_CA, f"{ctx.cluster} kubelet serving CA"),
    )
    certs = _etcd_certs(ctx.etcd)
    if ctx.events_etcd is not None:
        certs += _etcd_certs(ctx.events_etcd)
    svc = "kubernetes.default.svc"
    api_names = ("kubernetes", "kubernetes.default", svc, f"{svc}.{ctx.cluster_domain}", "localhost")
    for i, h in enumerate(ctx.control_plane.apiservers):
        certs.append(
            CertSpec(
                apiserver_cert(h.name),
                KUBERNETES_CA,
                "kube-apiserver",
                None,
                (h.name, *api_names),
                (h.ip, ctx.apiserver_vip, ctx.apiserver_service_ip, LOOPBACK),
                SERVER,
                lifetime_hours(i),
            )
        )
    shared = [
        CertSpec(APISERVER_ETCD_CLIENT, ETCD_CA, "kube-apiserver-etcd-client"),
        CertSpec(ETCD_HEALTHCHECK, ETCD_CA, "kube-etcd-healthcheck-client"),
        CertSpec(APISERVER_KUBELET_CLIENT, KUBERNETES_CA, "kube-apiserver-kubelet-client", "system:masters"),
        CertSpec(FRONT_PROXY_CLIENT, FRONT_PROXY_CA, "front-proxy-client"),
        CertSpec(CONTROLLER_MANAGER, KUBERNETES_CA, "system:kube-controller-manager"),
        CertSpec(SCHEDULER, KUBERNETES_CA, "system:kube-scheduler"),
        CertSpec(KUBE_PROXY, KUBERNETES_CA, "system:kube-proxy"),
        CertSpec(PROMETHEUS, KUBERNETES_CA, "prometheus", f"{ctx.label_domain}:monitoring"),
        CertSpec(BOOTSTRAP_TOKEN_ISSUER, KUBERNETES_CA, ISSUER_USER),
        # The addons stack's Kubernetes provider authenticates with this one.
        CertSpec(ADMIN, KUBERNETES_CA, f"{ctx.cluster}-admin", "system:masters"),
    ]
    certs += [replace(c, validity_hours=lifetime_hours(n)) for n, c in enumerate(shared)]
    # No pool certificate: kubelets join with their pool's bootstrap token (docs/bootstrap-tokens.md),
    # and their node certificates come from the controller-manager's signer (NodeRestriction holds).
    return PkiSpec(
        cas=cas,
        certs=tuple(certs),
        key_pairs=(SERVICE_ACCOUNT, SERVICE_ACCOUNT_RSA) if ctx.identity else (SERVICE_ACCOUNT,),
        encryption_keys=ctx.control_plane.encryption_keys,
    )
