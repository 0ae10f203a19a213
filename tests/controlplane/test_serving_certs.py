"""Kubelet serving certificates on dev's real control plane, and what Prometheus may do at a kubelet.

1. A pool node gets its identity as in test_node_join.py: a bootstrap token in the pools' group, the
   kubelet's client CSR, approved and signed by the real kube-controller-manager.
2. As that node, its kubelet's serving CSR (signer ``kubernetes.io/kubelet-serving``, CN
   ``system:node:<name>``, O ``system:nodes``, the Node's addresses as subjectAltNames; what a kubelet with
   ``serverTLSBootstrap: true`` files) is approved by the add-ons' kubelet-serving-approver, the rendered
   Deployment's pod (created by the real ReplicaSet controller, bound by the real scheduler to a kwok system
   node) run by the container stand-in under its service account and memory limit, and signed by the real
   controller-manager's csrsigning controller with the kubelet serving CA
   (``--cluster-signing-kubelet-serving-cert-file``), not the cluster CA: no API server client trusts it.
3. The same node asking for an address that is not its own gets no certificate, nor does anyone but the node
   asking for its name: the approver denies them with the reason, and nothing signs them. A node asking for
   another node's name is refused by the API server itself (NodeRestriction), before any approver.
4. The kubelets authorize Prometheus through the API server (SubjectAccessReview, webhook mode): the real
   RBAC lets Prometheus' identity get nodes/metrics and nothing through nodes/proxy.
5. The API server reads a pod's logs from its kubelet (a TLS stand-in on loopback) only while the kubelet serves
   a certificate from the kubelet serving CA (``--kubelet-certificate-authority``).
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ipaddress
import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modules.bootstrap import pki
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.cluster.objects import serving_certs
from modules.cluster.scripts import approve_serving

from .cluster import ControlPlane
from .conftest import Nodes
from .containers import Running, wait_pods
from .test_node_join import PoolNode, csr_object, patch_as, token_secret

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NAME, PEER = "dev-h100-0000s0", "dev-h100-0000s1"
ADDRESS, OTHER = "10.16.64.40", "10.16.64.41"


@pytest.fixture(scope="module")
def approver(dev_cluster: ControlPlane, dev_nodes: Nodes) -> Iterator[Running]:
    """The rendered approver Deployment's pod, its container running as the kubelet would run it."""
    (pod,) = wait_pods(dev_cluster, serving_certs.NS, f"app.kubernetes.io/name={serving_certs.APP}", 1)
    run = dev_nodes.runtime.start(pod, "approve")
    yield run
    run.stop()


@pytest.fixture(scope="module")
def node(dev_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PoolNode, Path]]:
    """A pool node with its own client certificate, registered, its addresses in its status (as its kubelet
    reports them): the node and its kubeconfig."""
    token = bt.Token.generate()
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    code, body = dev_cluster.call(
        "POST", "/api/v1/namespaces/kube-system/secrets", token_secret(token, bt.NODES_GROUP, expires)
    )
    assert code == 201, body
    pool_node = PoolNode(dev_cluster, tmp_path_factory.mktemp("serving-node"), NAME, island="dev-h100-00")
    cert = pool_node.tls_bootstrap(pool_node.bootstrap_kubeconfig(str(token)))
    as_node = pool_node.kubeconfig(cert)
    made = dev_cluster.kubectl("create", "-f", "-", kubeconfig=as_node, input=json.dumps(pool_node.registration()))
    assert made.returncode == 0, made.stderr
    addresses = [{"type": "InternalIP", "address": ADDRESS}, {"type": "Hostname", "address": NAME}]
    code, body = patch_as(dev_cluster, cert, f"/api/v1/nodes/{NAME}/status", {"status": {"addresses": addresses}})
    assert code == 200, body  # NodeRestriction: a node may write its own status
    yield pool_node, as_node
    dev_cluster.kubectl("delete", "node", NAME, "--wait=false")
    dev_cluster.call("DELETE", f"/api/v1/namespaces/kube-system/secrets/bootstrap-token-{token.id}")


def file_csr(
    cp: ControlPlane, kubeconfig: Path, cn: str, dns: list[str], ips: list[str]
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """File a kubelet serving CSR with ``kubeconfig`` (as a kubelet's certificate manager does: ECDSA P-256,
    O=system:nodes, the addresses as subjectAltNames): kubectl's result and the key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"), x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    )
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    csr = csr_object(request, approve_serving.SIGNER, ["digital signature", "server auth"])
    return cp.kubectl("create", "-f", "-", "-o", "name", kubeconfig=kubeconfig, input=json.dumps(csr)), key


def serving_csr(cp: ControlPlane, kubeconfig: Path, cn: str, dns: list[str], ips: list[str]) -> tuple[str, Any]:
    """``file_csr``, which must be accepted: the CSR's name and the key."""
    made, key = file_csr(cp, kubeconfig, cn, dns, ips)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().rsplit("/", 1)[-1], key


def settled(cp: ControlPlane, name: str, approver: Running, timeout: float = 60) -> dict[str, Any]:
    """The CSR once it is denied, or approved and signed (the approver must stay up meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        csr: dict[str, Any] = cp.get(f"{CSRS}/{name}")
        status = csr.get("status", {})
        types = {c["type"] for c in status.get("conditions") or []}
        if "Denied" in types or status.get("certificate"):
            return csr
        assert approver.alive(), approver.output()[-3000:]
        assert time.monotonic() < deadline, (csr, approver.output()[-3000:])
        time.sleep(0.5)


def logged(approver: Running, line: str, timeout: float = 10) -> bool:
    """Whether the approver printed ``line`` (it prints after the API server took its decision)."""
    deadline = time.monotonic() + timeout
    while line not in approver.output():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def condition(csr: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in csr.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def test_a_nodes_serving_csr_is_approved_and_signed_by_the_kubelet_serving_ca(
    dev_cluster: ControlPlane, approver: Running, node: tuple[PoolNode, Path]
) -> None:
    _, as_node = node
    name, key = serving_csr(dev_cluster, as_node, f"system:node:{NAME}", [NAME], [ADDRESS])
    csr = settled(dev_cluster, name, approver)
    approved = condition(csr, "Approved")
    assert approved is not None and approved["reason"] == approve_serving.REASON, csr["status"]
    assert csr["spec"]["username"] == f"system:node:{NAME}"  # filed with the node's own identity
    cert = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
    serving_ca = x509.load_pem_x509_certificate(dev_cluster.pems[f"cert:{pki.KUBELET_SERVING_CA}"].encode())
    cert.verify_directly_issued_by(serving_ca)  # the controller-manager's kubelet-serving signer's own CA
    cluster_ca = x509.load_pem_x509_certificate(dev_cluster.pems[f"cert:{pki.KUBERNETES_CA}"].encode())
    with pytest.raises((ValueError, InvalidSignature)):  # what API server clients trust does not vouch for it
        cert.verify_directly_issued_by(cluster_ca)
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [NAME]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == [ADDRESS]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert logged(approver, f"approved {name}"), approver.output()


@pytest.mark.parametrize(
    ("case", "filer", "cn", "ips", "reason"),
    [
        ("an address that is not the node's", "node", f"system:node:{NAME}", [ADDRESS, OTHER], "not node"),
        # Filed by a cluster admin (system:masters may create any CSR): a well-formed request for the node's
        # name and addresses, but not from the node.
        ("another identity asking for the node's name", "admin", f"system:node:{NAME}", [ADDRESS], "not a node"),
        ("another identity asking for another node's name", "admin", f"system:node:{PEER}", [ADDRESS], "not a node"),
    ],
)
def test_a_serving_csr_for_anything_else_gets_no_certificate(
    dev_cluster: ControlPlane,
    approver: Running,
    node: tuple[PoolNode, Path],
    case: str,
    filer: str,
    cn: str,
    ips: list[str],
    reason: str,
) -> None:
    _, as_node = node
    name, _ = serving_csr(dev_cluster, as_node if filer == "node" else dev_cluster.admin, cn, [NAME], ips)
    csr = settled(dev_cluster, name, approver)
    denied = condition(csr, "Denied")
    assert denied is not None and reason in denied["message"], (case, csr["status"])
    assert condition(csr, "Approved") is None and not csr["status"].get("certificate"), case
    assert logged(approver, f"denied {name}"), approver.output()


def test_a_node_cannot_even_file_a_serving_csr_for_another_nodes_name(
    dev_cluster: ControlPlane, node: tuple[PoolNode, Path]
) -> None:
    """The API server refuses it before any approver sees it: NodeRestriction admits a node's kubelet-serving
    or kubelet client CSR only with CN=system:node:<its name> (k8s.io/kubernetes v1.35.8
    plugin/pkg/admission/noderestriction/admission.go, admitCSR). The approver checks the CN all the same
    (``approve_serving.check``): it does not rely on an admission plugin being on."""
    _, as_node = node
    made, _ = file_csr(dev_cluster, as_node, f"system:node:{PEER}", [NAME], [ADDRESS])
    assert made.returncode != 0 and f"can only create a node CSR with CN=system:node:{NAME}" in made.stderr, made


def test_the_approver_stays_within_its_memory_limit(approver: Running) -> None:
    assert approver.alive() and not approver.oom_killed(), approver.output()[-3000:]
    assert approver.limit is not None and approver.peak_bytes() < approver.limit
    print(f"kubelet-serving-approver peak {approver.peak_bytes() / 2**20:.1f} MiB of {approver.limit / 2**20:.0f} MiB")


def access_review(cp: ControlPlane, subresource: str) -> bool:
    """Whether the API server lets Prometheus' certificate identity get ``nodes/<subresource>`` of a node: the
    SubjectAccessReview a kubelet in webhook mode sends for a request to it (kubernetes.io, Kubelet
    authentication/authorization), with the user and groups the API server gives that certificate."""
    spec = pki.pki_spec(cp.ctx).cert(pki.PROMETHEUS)
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": spec.common_name,
            "groups": [spec.organization, "system:authenticated"],
            "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": subresource, "name": NAME},
        },
    }
    code, body = cp.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert code == 201, body
    return bool(body["status"].get("allowed"))


def test_kubelets_let_prometheus_read_metrics_and_nothing_through_the_proxy(dev_cluster: ControlPlane) -> None:
    # /metrics, /metrics/cadvisor and /metrics/resource map to nodes/metrics; exec, attach, logs and every
    # other kubelet path to nodes/proxy (or nodes/log), which Prometheus no longer needs.
    assert access_review(dev_cluster, "metrics")
    assert not access_review(dev_cluster, "proxy")
    assert not access_review(dev_cluster, "log")


# --- The API server's side: it calls a kubelet (logs, exec, the node proxy) only if the kubelet's serving
# certificate is the kubelet serving CA's (--kubelet-certificate-authority). ---

LOOPBACK = "127.0.0.1"
STANDIN_NODE, LOG_POD = "kubelet-tls-standin", "kubelet-tls-probe"
LOG_LINE = "a line the kubelet stand-in serves\n"


class StandInKubelet(http.server.ThreadingHTTPServer):
    """What the API server reaches at a kubelet's port, as a stand-in (no kubelet runs here): TLS with the
    ``context`` of the moment (a new handshake per connection, HTTP/1.0, so no connection outlives a swap), the
    client certificate checked against the cluster CA as the kubelet's ``authentication.x509.clientCAFile``
    does, and the pod's log lines at ``/containerLogs/<namespace>/<pod>/<container>``."""

    daemon_threads = True

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__((LOOPBACK, 0), _KubeletHandler)
        self.context = context
        self.clients: list[str] = []

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.settimeout(10)
        return self.context.wrap_socket(sock, server_side=True), addr


class _KubeletHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        server: StandInKubelet = self.server  # type: ignore[assignment]
        peer = self.connection.getpeercert() or {}
        server.clients += [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]
        ok = self.path.split("?")[0] == f"/containerLogs/kube-system/{LOG_POD}/main"
        body = (LOG_LINE if ok else "not found\n").encode()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def kubelet_context(cp: ControlPlane, folder: Path, signer: str | None, address: str = LOOPBACK) -> ssl.SSLContext:
    """A kubelet's TLS server context: its serving certificate for the stand-in node's name and ``address`` (by
    default the loopback address the node reports), signed by the PKI's CA ``signer`` (None: self-signed, what a
    kubelet without serverTLSBootstrap makes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{STANDIN_NODE}")])
    ca_key: Any = key
    issuer = subject
    if signer is not None:
        ca = x509.load_pem_x509_certificate(cp.pems[f"cert:{signer}"].encode())
        issuer = ca.subject
        ca_key = serialization.load_pem_private_key(cp.pems[f"key:{signer}"].encode(), None)
    now = dt.datetime.now(dt.UTC)
    names = [x509.DNSName(STANDIN_NODE), x509.IPAddress(ipaddress.ip_address(address))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    crt, pem = folder / f"{signer or 'self'}-{address}.crt", folder / f"{signer or 'self'}-{address}.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(_key_pem(key))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(pem))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cadata=cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    return ctx


@pytest.fixture
def standin_kubelet(dev_cluster: ControlPlane, tmp_path: Path) -> Iterator[StandInKubelet]:
    """A Node whose kubelet is the stand-in (InternalIP loopback, its port the stand-in's; no kwok annotation, so
    kwok leaves it alone; no capacity, so nothing is scheduled there) and a pod bound to it, whose logs the API
    server fetches from that kubelet. Both are gone afterwards, whatever failed."""
    server = StandInKubelet(kubelet_context(dev_cluster, tmp_path, pki.KUBELET_SERVING_CA))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    status = {
        "addresses": [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": STANDIN_NODE}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": server.server_address[1]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": LOG_POD, "namespace": "kube-system"},
        "spec": {"nodeName": STANDIN_NODE, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    pod_path, node_path = f"/api/v1/namespaces/kube-system/pods/{LOG_POD}", f"/api/v1/nodes/{STANDIN_NODE}"
    try:
        code, body = dev_cluster.call("POST", "/api/v1/nodes", {"metadata": {"name": STANDIN_NODE}})
        assert code == 201, body
        code, body = dev_cluster.call_patch(f"{node_path}/status", {"status": status})
        assert code == 200, body
        code, body = dev_cluster.call("POST", "/api/v1/namespaces/kube-system/pods", pod)
        assert code == 201, body
        yield server
    finally:
        server.shutdown()
        server.server_close()
        for path, body in ((pod_path, {"gracePeriodSeconds": 0}), (node_path, None)):
            code, out = dev_cluster.call("DELETE", path, body)
            assert code in (200, 404), (path, code, out)


def pod_logs(cp: ControlPlane) -> tuple[int, str]:
    """``kubectl logs``' request: the status and the body (log lines, or the API server's error message)."""
    req = urllib.request.Request(f"{cp.url}/api/v1/namespaces/kube-system/pods/{LOG_POD}/log?container=main")
    try:
        with urllib.request.urlopen(req, context=cp.context(), timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        text = err.read().decode()
        try:
            return err.code, str(json.loads(text).get("message"))
        except ValueError:
            return err.code, text


def test_the_api_server_calls_a_kubelet_only_with_a_kubelet_serving_ca_certificate(
    dev_cluster: ControlPlane, standin_kubelet: StandInKubelet, tmp_path: Path
) -> None:
    """Fails without ``--kubelet-certificate-authority``: the API server then verifies no kubelet, and reads the
    logs from a kubelet serving any certificate (kube-apiserver's kubelet client: TLS InsecureSkipVerify when
    no CA is given, k8s.io/kubernetes v1.35.8 pkg/kubelet/client/kubelet_client.go MakeTransport)."""
    code, text = pod_logs(dev_cluster)
    assert (code, text) == (200, LOG_LINE), text
    client = pki.pki_spec(dev_cluster.ctx).cert(pki.APISERVER_KUBELET_CLIENT).common_name
    assert standin_kubelet.clients == [client]  # the API server's kubelet client certificate, checked by the kubelet
    refused = (
        (pki.KUBERNETES_CA, LOOPBACK, "the cluster CA"),
        (None, LOOPBACK, "self-signed"),
        # The serving CA's, but for another node's address: what a stolen node credential can get approved by
        # setting its own InternalIP to that address (docs/security.md); the API server dials this node's.
        (pki.KUBELET_SERVING_CA, OTHER, "another address"),
    )
    for signer, address, what in refused:
        standin_kubelet.context = kubelet_context(dev_cluster, tmp_path, signer, address)
        code, text = pod_logs(dev_cluster)
        assert code != 200 and "x509" in text, (what, code, text)
    assert standin_kubelet.clients == [client]  # no request reached the kubelet after either handshake
