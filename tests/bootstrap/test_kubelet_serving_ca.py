"""Render tier: kubelet serving certificates come from a CA of their own, which only Prometheus' kubelet scrape
and the API servers' calls to kubelets trust and whose key only the API server hosts (kube-controller-manager)
hold.

A kubelet chooses its serving certificate's names from its own Node's status.addresses, which its credential
may write (NodeRestriction lets a node update its own Node). Signed by the cluster CA, such a certificate
naming the API server VIP or kubernetes.default.svc would be trusted by every API server client; signed by
the kubelet serving CA it is trusted by Prometheus' kubelet and cAdvisor jobs, and by the API servers only
where they call a kubelet.
"""

from __future__ import annotations

from typing import Any

import yaml
from cryptography import x509

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.bootstrap.roles.prometheus import prometheus_config

from .certs import issue

KUBELET_JOBS = ("kubernetes-nodes", "kubernetes-cadvisor")
SERVING_CERT, SERVING_KEY = f"cert:{pki.KUBELET_SERVING_CA}", f"key:{pki.KUBELET_SERVING_CA}"


def _flags(node: NodeBundle, manifest: str) -> dict[str, str]:
    pod = yaml.safe_load(node.file(f"manifests/{manifest}.yaml").content)
    command = pod["spec"]["containers"][0]["command"]
    return dict(f.removeprefix("--").split("=", 1) for f in command[1:] if "=" in f)


def _secret_at(node: NodeBundle, path: str) -> str:
    (secret,) = [s.secret for s in node.secrets if s.path == path]
    return secret


def test_the_kubelet_serving_signer_signs_with_its_own_ca(ctx: BootstrapContext) -> None:
    """kube-controller-manager's kubelet-serving signer reads the kubelet serving CA's files; the client signers
    keep the cluster CA; the catch-all --cluster-signing-{cert,key}-file is gone (the per-signer flags may not
    be combined with it: kube-controller-manager reference)."""
    for host in names(ctx, "apiserver"):
        node = bundle(ctx, "apiserver", host)
        flags = _flags(node, "kube-controller-manager")
        assert "cluster-signing-cert-file" not in flags and "cluster-signing-key-file" not in flags, flags
        assert _secret_at(node, flags["cluster-signing-kubelet-serving-cert-file"]) == SERVING_CERT
        assert _secret_at(node, flags["cluster-signing-kubelet-serving-key-file"]) == SERVING_KEY
        for signer in ("kube-apiserver-client", "kubelet-client"):
            assert _secret_at(node, flags[f"cluster-signing-{signer}-cert-file"]) == f"cert:{pki.KUBERNETES_CA}"
            assert _secret_at(node, flags[f"cluster-signing-{signer}-key-file"]) == f"key:{pki.KUBERNETES_CA}"
        # The API servers keep authenticating clients with the cluster CA only.
        assert _secret_at(node, _flags(node, "kube-apiserver")["client-ca-file"]) == f"cert:{pki.KUBERNETES_CA}"


def test_the_api_servers_verify_kubelets_against_the_kubelet_serving_ca(ctx: BootstrapContext) -> None:
    """Logs, exec and the node proxy: unset, the API server verifies no kubelet (the real API server's side is
    tests/controlplane/test_serving_certs.py)."""
    for host in names(ctx, "apiserver"):
        node = bundle(ctx, "apiserver", host)
        assert _secret_at(node, _flags(node, "kube-apiserver")["kubelet-certificate-authority"]) == SERVING_CERT


def test_the_kubelet_serving_ca_is_a_ca_of_its_own(dev: BootstrapContext) -> None:
    spec = pki.pki_spec(dev)
    assert pki.KUBELET_SERVING_CA in [ca.name for ca in spec.cas]
    assert not [c.name for c in spec.certs if c.ca == pki.KUBELET_SERVING_CA]  # only the signer issues from it
    pems = issue(spec, only=set())
    serving = x509.load_pem_x509_certificate(pems[SERVING_CERT].encode())
    cluster = x509.load_pem_x509_certificate(pems[f"cert:{pki.KUBERNETES_CA}"].encode())
    serving.verify_directly_issued_by(serving)  # self-signed: not under the cluster CA
    assert serving.subject != cluster.subject and serving.public_key() != cluster.public_key()


def test_the_kubelet_serving_ca_key_is_on_api_server_hosts_only(ctx: BootstrapContext) -> None:
    """Its key where kube-controller-manager runs and nowhere else; its certificate there and on the Prometheus
    hosts only (no kubelet, etcd member or NAT host trusts it)."""
    holders: dict[str, set[str]] = {SERVING_CERT: set(), SERVING_KEY: set()}
    for role in ROLES:
        for host in names(ctx, role):
            for s in bundle(ctx, role, host).secrets:
                if s.secret in holders:
                    holders[s.secret].add(role)
    assert holders == {SERVING_KEY: {"apiserver"}, SERVING_CERT: {"apiserver", "prometheus"}}
    # On an API server host, in the pki directory kube-controller-manager mounts, owner-only.
    node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
    (key,) = [s for s in node.secrets if s.secret == SERVING_KEY]
    assert key.path.startswith(f"{PATHS.pki}/") and key.mode == "0600"


def _ca_files(config: dict[str, Any]) -> dict[str, set[str]]:
    """Every CA file each scrape job trusts: its own and its service discovery's."""
    out: dict[str, set[str]] = {}
    for job in config["scrape_configs"]:
        tls = [
            job.get("tls_config") or {},
            *((sd.get("tls_config") or {}) for sd in job.get("kubernetes_sd_configs", [])),
        ]
        out[job["job_name"]] = {t["ca_file"] for t in tls if "ca_file" in t}
    return out


def test_prometheus_verifies_kubelets_against_the_kubelet_serving_ca_only(ctx: BootstrapContext) -> None:
    """The kubelet and cAdvisor jobs verify the kubelets' serving certificates against the kubelet serving CA
    (an API server's certificate, from the cluster CA, is no kubelet's); discovery at the API server and every
    other job keep the cluster CA and never trust the kubelet serving CA."""
    for host in ctx.prometheus.hosts:
        node = bundle(ctx, "prometheus", host.name)
        by_secret = {s.secret: s.path for s in node.secrets}
        serving, cluster = by_secret[SERVING_CERT], by_secret[f"cert:{pki.KUBERNETES_CA}"]
        config = yaml.safe_load(prometheus_config(ctx, host))
        for job, cas in _ca_files(config).items():
            if job in KUBELET_JOBS:
                scrape = next(j for j in config["scrape_configs"] if j["job_name"] == job)
                assert scrape["tls_config"]["ca_file"] == serving, (job, scrape["tls_config"])
                (sd,) = scrape["kubernetes_sd_configs"]
                assert sd["tls_config"]["ca_file"] == cluster, (job, sd)
            else:
                assert serving not in cas, (job, cas)
