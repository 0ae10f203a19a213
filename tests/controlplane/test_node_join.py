"""A pool node joins dev's real control plane the way a pool node does.

1. The API server host's token issuer (modules/bootstrap/host/bootstrap_tokens.py, its rendered
   configuration, its client certificate) mints the pool's bootstrap token on the real API server and
   publishes it to the pool's Key Vault secret (Key Vault: the stand-in of tests/bootstrap/host/fakes.py).
2. The node's side, with the pool's rendered bootstrap kubeconfig and the token file: kubectl (client-go)
   files a kubelet client CSR as the kubelet's TLS bootstrap does (k8s.io/kubernetes
   pkg/kubelet/certificate/bootstrap: CN ``system:node:<name>``, O ``system:nodes``, signer
   ``kubernetes.io/kube-apiserver-client-kubelet``). The real kube-controller-manager approves it
   (csrapproving, under the add-ons' RBAC) and signs it (csrsigning, with the rendered signing flags).
3. With the signed certificate the node registers its Node with the labels and taints the pool's
   rendered kubelet flags and configuration name, as the kubelet does on its first start (the kubelet
   itself cannot run here: no container runtime; this registration is its stand-in, named so).
4. NodeRestriction (a rendered admission plugin) keeps the node from touching another node.
A token outside the pools' group, or expired, gets nothing.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import shlex
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modules.bootstrap import node_tokens, pki
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.roles import bundle
from tests.bootstrap.host.fakes import FakeVault, token_of
from tests.bootstrap.host.loopback import serve

from .cluster import ControlPlane, _relocate, kubeconfig

POOL = "h100"
ISSUER_CLIENT = "11111111-2222-3333-4444-555555555555"


def issuer(cp: ControlPlane, vault_url: str) -> tuple[bt.IssuerConfig, bt.KubeApi]:
    """The first API server host's issuer, as its timer runs it: the rendered configuration with the
    host's loopback port and files, the vault and identity from host.json (here: the stand-in)."""
    host = cp.hosts[0]
    secrets = {p.name: node_tokens.standin_secret(p.name) for p in cp.ctx.pools}
    text = cp.on_host(node_tokens.issuer_config(cp.ctx, secrets), host)
    config = bt.IssuerConfig.from_json(text, vault_url=vault_url, client_id=ISSUER_CLIENT)
    return config, bt.KubeApi(config.apiserver, config.ca_file, config.cert_file, config.key_file)


def csr_object(request: x509.CertificateSigningRequest, signer: str, usages: list[str]) -> dict[str, Any]:
    """A CertificateSigningRequest object for ``request`` (PEM, base64), to ``kubectl create``."""
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": signer,
            "usages": usages,
        },
    }


class PoolNode:
    """A pool node's files (from the pool's bundle) under ``root``; kubectl as the node would be."""

    def __init__(self, cp: ControlPlane, root: Path, name: str, island: str) -> None:
        self.cp, self.root, self.name, self.island = cp, root, name, island
        self.node = bundle(cp.ctx, "gpu-node", POOL)
        self.ca = root / "ca.crt"
        self.ca.write_text(cp.pems[f"cert:{pki.KUBERNETES_CA}"])

    def bootstrap_kubeconfig(self, token: str) -> Path:
        """The bundle's bootstrap kubeconfig, its server moved to loopback and its files under ``root``."""
        token_file = self.root / node_tokens.TOKEN_FILE.lstrip("/")
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token)
        text = _relocate(self.cp.loopback(self.node.file("bootstrap-kubelet.kubeconfig").content), self.root)
        (self.root / "etc/kubernetes/pki").mkdir(parents=True, exist_ok=True)
        (self.root / "etc/kubernetes/pki/ca.crt").write_text(self.ca.read_text())
        out = self.root / "bootstrap.kubeconfig"
        out.write_text(text)
        return out

    def tls_bootstrap(self, bootstrap: Path, timeout: float = 60) -> tuple[Path, Path]:
        """File the kubelet's client CSR with the bootstrap credential; wait for the signed certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{self.name}"),
            ]
        )
        request = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
        csr = csr_object(request, "kubernetes.io/kube-apiserver-client-kubelet", ["digital signature", "client auth"])
        made = self.cp.kubectl("create", "-f", "-", "-o", "name", kubeconfig=bootstrap, input=json.dumps(csr))
        assert made.returncode == 0, made.stderr
        name = made.stdout.strip()
        deadline = time.monotonic() + timeout
        while True:
            got = self.cp.kubectl("get", name, "-o", "json", kubeconfig=bootstrap)
            assert got.returncode == 0, got.stderr
            status = json.loads(got.stdout).get("status", {})
            if status.get("certificate"):
                break
            assert time.monotonic() < deadline, f"{name} not signed: {status}"
            time.sleep(0.5)
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        assert conditions["Approved"]["reason"] == "AutoApproved", conditions
        crt, pem_key = self.root / "kubelet-client.crt", self.root / "kubelet-client.key"
        crt.write_bytes(base64.b64decode(status["certificate"]))
        pem_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            )
        )
        return crt, pem_key

    def kubeconfig(self, cert: tuple[Path, Path]) -> Path:
        return kubeconfig(self.root / "kubelet.kubeconfig", self.cp.url, self.ca, cert=cert)

    def labels(self) -> dict[str, str]:
        """``--node-labels`` of the pool's kubelet unit, ``${AGK_NODE_LABELS}`` as node-identity.sh writes it."""
        unit = self.node.file("systemd/kubelet.service.d/10-agk.conf").content
        (start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=/")]
        (line,) = [w for w in shlex.split(start.replace("${AGK_NODE_LABELS}", "AGK")) if w.startswith("--node-labels=")]
        out = dict(item.split("=", 1) for item in line.removeprefix("--node-labels=").split(",") if item != "AGK")
        identity = self.node.file("node-identity.sh").content
        key = re.search(r"AGK_NODE_LABELS '([^']+)'", identity)
        assert key is not None, "node-identity.sh no longer writes AGK_NODE_LABELS"
        out[key.group(1)] = self.island
        return out

    def registration(self) -> dict[str, Any]:
        """The Node the kubelet creates: its standard labels, the unit's labels, registerWithTaints, and
        the uninitialized taint ``--cloud-provider=external`` adds (kubelet_node_status.go initialNode)."""
        config = yaml.safe_load(self.node.file("kubelet/config.yaml").content)
        taints = list(config.get("registerWithTaints") or [])
        if "--cloud-provider=external" in self.node.file("systemd/kubelet.service.d/10-agk.conf").content:
            taints.append(
                {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
            )
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels | self.labels()},
            "spec": {"taints": taints},
        }


def patch_as(cp: ControlPlane, cert: tuple[Path, Path], path: str, body: Any) -> tuple[int, Any]:
    """A merge patch with a node's client certificate, nothing read first."""
    ctx = ssl.create_default_context(cafile=str(cp.root / "admin" / "ca.crt"))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(
        cp.url + path,
        data=json.dumps(body).encode(),
        method="PATCH",
        headers={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(scope="module")
def vault() -> Any:
    store = FakeVault()
    for pool in ("h100", "a100"):
        store.grant_write(node_tokens.standin_secret(pool), ISSUER_CLIENT)
    with serve(store) as url:
        yield store, url


def token_secret(token: bt.Token, groups: str, expires: dt.datetime) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": f"bootstrap-token-{token.id}", "namespace": "kube-system"},
        "stringData": {
            "token-id": token.id,
            "token-secret": token.secret,
            "usage-bootstrap-authentication": "true",
            "auth-extra-groups": groups,
            "expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def test_a_pool_node_joins_with_the_issued_token_and_registers_as_rendered(
    dev_cluster: ControlPlane, vault: Any, tmp_path: Path
) -> None:
    store, url = vault
    config, api = issuer(dev_cluster, url)
    outcomes = {o.pool: o for o in bt.run(config, api, token_of(ISSUER_CLIENT), host=dev_cluster.hosts[0].name)}
    assert outcomes[POOL].ok and outcomes[POOL].action == "minted", outcomes
    published = store.current(node_tokens.standin_secret(POOL))
    assert published is not None
    token = bt.Token.parse(published["value"])
    assert token is not None

    # The issuer's Secret, as the real API server stores it (the token authenticator reads this).
    code, secret = dev_cluster.call("GET", f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token.id}")
    assert code == 200 and secret["type"] == "bootstrap.kubernetes.io/token"
    assert base64.b64decode(secret["data"]["auth-extra-groups"]).decode().split(",")[0] == bt.NODES_GROUP

    node = PoolNode(dev_cluster, tmp_path, "dev-h100-000000", island="dev-h100-00")
    bootstrap = node.bootstrap_kubeconfig(str(token))
    who = dev_cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=bootstrap)
    assert who.returncode == 0, who.stderr
    user = json.loads(who.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:bootstrap:{token.id}"
    assert {"system:bootstrappers", bt.NODES_GROUP, bt.pool_group(POOL)} <= set(user["groups"])

    cert = node.tls_bootstrap(bootstrap)
    signed = x509.load_pem_x509_certificate(cert[0].read_bytes())
    ca = x509.load_pem_x509_certificate(dev_cluster.pems[f"cert:{pki.KUBERNETES_CA}"].encode())
    assert signed.issuer == ca.subject  # the controller-manager's --cluster-signing-kubelet-client-cert-file
    as_node = node.kubeconfig(cert)
    me = json.loads(dev_cluster.kubectl("auth", "whoami", "-o", "json", kubeconfig=as_node).stdout)
    assert me["status"]["userInfo"]["username"] == f"system:node:{node.name}"

    wanted = node.registration()
    made = dev_cluster.kubectl("create", "-f", "-", "-o", "json", kubeconfig=as_node, input=json.dumps(wanted))
    assert made.returncode == 0, made.stderr  # NodeRestriction admits every label the pool's kubelet sets
    stored = json.loads(made.stdout)
    assert wanted["metadata"]["labels"].items() <= stored["metadata"]["labels"].items()
    assert {(t["key"], t["effect"]) for t in stored["spec"]["taints"]} >= {
        (f"{dev_cluster.ctx.label_domain}/preflight", "NoSchedule"),
        ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule"),
    }
    assert stored["metadata"]["labels"][f"{dev_cluster.ctx.label_domain}/preflight"] == "pending"

    # NodeRestriction: a node may change its own Node, never another's.
    (tmp_path / "other").mkdir()
    other = PoolNode(dev_cluster, tmp_path / "other", "dev-h100-000001", island="dev-h100-00")
    peer = dev_cluster.kubectl("create", "-f", "-", input=json.dumps(other.registration()))
    assert peer.returncode == 0, peer.stderr
    own = dev_cluster.kubectl("annotate", "node", node.name, "agk.test/self=ok", kubeconfig=as_node)
    assert own.returncode == 0, own.stderr
    # A write straight to the other Node (kubectl would read it first, which the Node authorizer refuses too).
    code, body = patch_as(dev_cluster, cert, f"/api/v1/nodes/{other.name}", {"metadata": {"labels": {"x": "y"}}})
    assert code == 403 and f'node "{node.name}" is not allowed to modify node "{other.name}"' in body["message"], body
    restricted = dev_cluster.kubectl(
        "label", "node", node.name, "node-restriction.kubernetes.io/forged=yes", kubeconfig=as_node
    )
    assert restricted.returncode != 0 and "is not allowed to modify labels" in restricted.stderr, restricted.stderr
    for name in (node.name, other.name):
        dev_cluster.kubectl("delete", "node", name, "--wait=false")


def test_a_token_outside_the_pools_group_files_no_csr(dev_cluster: ControlPlane, tmp_path: Path) -> None:
    token = bt.Token.generate()
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    code, body = dev_cluster.call(
        "POST", "/api/v1/namespaces/kube-system/secrets", token_secret(token, "system:bootstrappers:other", expires)
    )
    assert code == 201, body
    node = PoolNode(dev_cluster, tmp_path, "dev-h100-000009", island="dev-h100-00")
    bootstrap = node.bootstrap_kubeconfig(str(token))
    assert dev_cluster.kubectl("auth", "whoami", kubeconfig=bootstrap).returncode == 0  # it authenticates ...
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "outside-the-group"},
        "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]},
    }
    refused = dev_cluster.kubectl("create", "-f", "-", kubeconfig=bootstrap, input=json.dumps(csr))
    assert refused.returncode != 0 and "Forbidden" in refused.stderr, refused.stderr  # ... and may do nothing
    dev_cluster.call("DELETE", f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token.id}")


def test_an_expired_token_does_not_authenticate(dev_cluster: ControlPlane, tmp_path: Path) -> None:
    token = bt.Token.generate()
    expired = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    code, body = dev_cluster.call(
        "POST", "/api/v1/namespaces/kube-system/secrets", token_secret(token, bt.NODES_GROUP, expired)
    )
    assert code == 201, body
    node = PoolNode(dev_cluster, tmp_path, "dev-h100-000010", island="dev-h100-00")
    refused = dev_cluster.kubectl("auth", "whoami", kubeconfig=node.bootstrap_kubeconfig(str(token)))
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr, refused.stderr
