"""Pure tier: what the kubelet serving certificate approver approves, and what it refuses.

Requests are real PKCS#10 CSRs (``cryptography`` builds them as Go's x509.CreateCertificateRequest does for
the kubelet: O=system:nodes, CN=system:node:<name>, a subjectAltName extension with the node's addresses);
the approver's own stdlib DER reader has to find in them what ``cryptography`` put there. The real control
plane tier (tests/controlplane/test_serving_certs.py) runs the same script against the real API server
and controller-manager.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import threading
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modules.cluster.objects import serving_certs
from modules.cluster.scripts import approve_serving as ap
from modules.cluster.scripts.kube import Api
from modules.cluster.spec import AddonsSpec

NODE = "dev-h100-000003"
IP = "10.16.64.7"
KEY = ec.generate_private_key(ec.SECP256R1())


def serving_request(
    cn: str = f"system:node:{NODE}",
    org: str | None = "system:nodes",
    dns: tuple[str, ...] = (NODE,),
    ips: tuple[str, ...] = (IP,),
    *,
    extra_extension: x509.ExtensionType | None = None,
    extra_names: tuple[x509.GeneralName, ...] = (),
    extra_subject: tuple[x509.NameAttribute, ...] = (),
) -> str:
    """A kubelet's serving CSR (PEM), or one with the given faults."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
    subject = x509.Name([*attrs, *extra_subject, x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += list(extra_names)
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if extra_extension is not None:
        builder = builder.add_extension(extra_extension, critical=False)
    return builder.sign(KEY, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()


def csr(
    pem: str,
    *,
    username: str = f"system:node:{NODE}",
    groups: tuple[str, ...] = ("system:nodes", "system:authenticated"),
    usages: tuple[str, ...] = ("digital signature", "server auth"),
    signer: str = ap.SIGNER,
) -> dict[str, Any]:
    """The CSR object as the API server stores it (username and groups are the requester's)."""
    return {
        "metadata": {"name": "csr-x"},
        "spec": {
            "request": base64.b64encode(pem.encode()).decode(),
            "signerName": signer,
            "usages": list(usages),
            "username": username,
            "groups": list(groups),
        },
    }


def node(
    name: str = NODE, addresses: tuple[tuple[str, str], ...] = (("InternalIP", IP), ("Hostname", NODE))
) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]}}


def test_the_reader_finds_what_cryptography_wrote() -> None:
    pem = serving_request(dns=(NODE, f"{NODE}.internal"), ips=(IP, "fd00::7"))
    got = ap.parse_request(pem)
    assert got.subject == ((ap.OID_O, "system:nodes"), (ap.OID_CN, f"system:node:{NODE}"))
    assert got.dns_names == (NODE, f"{NODE}.internal")
    assert got.ips == (IP, "fd00::7")
    assert got.extensions == (ap.OID_SAN,) and got.attributes == (ap.OID_EXTENSION_REQUEST,)
    assert got.other_names == 0


@pytest.mark.parametrize(
    "usages",
    [("digital signature", "server auth"), ("key encipherment", "digital signature", "server auth")],
)
def test_a_nodes_request_for_its_own_name_and_addresses_is_approved(usages: tuple[str, ...]) -> None:
    verdict = ap.check(csr(serving_request(), usages=usages), node())
    assert verdict.approve, verdict.reason


# Each case: the CSR a careful approver must not approve, and a phrase of the reason it gives.
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "another node's CN": (csr(serving_request(cn="system:node:dev-h100-000004")), "subject is"),
    "no organization": (csr(serving_request(org=None)), "subject is"),
    "another organization": (csr(serving_request(org="system:masters")), "subject is"),
    "an extra subject attribute": (
        csr(serving_request(extra_subject=(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "x"),))),
        "subject is",
    ),
    "an address that is not the node's": (csr(serving_request(ips=(IP, "10.16.64.8"))), "not node"),
    "a DNS name that is not the node's": (csr(serving_request(dns=(NODE, "kubernetes.default"))), "not node"),
    "fewer addresses than the node's": (csr(serving_request(dns=())), "not node"),
    "no subjectAltName": (csr(serving_request(dns=(), ips=())), "no subjectAltName"),
    "an e-mail name": (
        csr(serving_request(extra_names=(x509.RFC822Name("a@example.com"),))),
        "other than DNS names and IP",
    ),
    "a URI name": (
        csr(serving_request(extra_names=(x509.UniformResourceIdentifier("spiffe://x/y"),))),
        "other than DNS names and IP",
    ),
    "a CA basic constraint": (
        csr(serving_request(extra_extension=x509.BasicConstraints(ca=True, path_length=None))),
        "only subjectAltName",
    ),
    "client auth usage": (csr(serving_request(), usages=("digital signature", "client auth")), "usages"),
    "server and client auth": (
        csr(serving_request(), usages=("digital signature", "server auth", "client auth")),
        "usages",
    ),
    "not from a node": (csr(serving_request(), username="system:serviceaccount:kube-system:x"), "not a node"),
    "from a node outside system:nodes": (csr(serving_request(), groups=("system:authenticated",)), "group"),
    "another node as requester": (csr(serving_request(), username="system:node:dev-h100-000004"), "subject is"),
    "another signer": (csr(serving_request(), signer="kubernetes.io/kube-apiserver-client"), "signer"),
    "not a CSR": (csr("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----"), "PKCS#10"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_anything_else_is_denied_with_its_reason(case: str) -> None:
    request, phrase = REFUSED[case]
    verdict = ap.check(request, node())
    assert not verdict.approve and not verdict.wait, (case, verdict)
    assert phrase in verdict.reason, (case, verdict.reason)


# A node credential writes its own Node's status.addresses (NodeRestriction), so an address being the Node's
# proves nothing: each case is a Node whose addresses include one that is not its own name or an InternalIP,
# and a request naming exactly the Node's addresses (what the kubelet files), which is denied naming it.
SPOOFED = {
    "the API service's DNS name as InternalDNS": ("InternalDNS", "kubernetes.default.svc", ["kubernetes.default.svc"]),
    "another name as ExternalDNS": ("ExternalDNS", "api.example.com", ["api.example.com"]),
    "another Hostname": ("Hostname", "kubernetes", ["kubernetes"]),
    "an ExternalIP": ("ExternalIP", "20.1.2.3", ["20.1.2.3"]),
    "a Hostname that is an IP": ("Hostname", "10.16.0.4", ["10.16.0.4"]),
}


@pytest.mark.parametrize("case", sorted(SPOOFED))
def test_names_beyond_the_nodes_own_name_and_internal_ips_are_denied(case: str) -> None:
    kind, address, named = SPOOFED[case]
    spoofed = node(addresses=(("InternalIP", IP), ("Hostname", NODE), (kind, address)))
    # As the kubelet files it: every address, those that parse as IPs as IP SANs.
    is_ip = kind in ("InternalIP", "ExternalIP") or address.replace(".", "").isdigit()
    dns, ips = (NODE,) if is_ip else (NODE, address), (IP, address) if is_ip else (IP,)
    verdict = ap.check(csr(serving_request(dns=dns, ips=ips)), spoofed)
    assert not verdict.approve and not verdict.wait, (case, verdict)
    assert "not node" in verdict.reason and all(n in verdict.reason for n in named), (case, verdict.reason)
    # The node's own name and InternalIP alone are still approved.
    assert ap.check(csr(serving_request()), spoofed).approve, case


def test_an_extra_dns_name_is_denied_even_when_the_node_reports_it() -> None:
    """The finding this guards: a Node whose kubelet reported the API server's in-cluster name as InternalDNS
    gets no certificate for it (the old approver approved any request equal to the Node's addresses)."""
    spoofed = node(addresses=(("InternalIP", IP), ("Hostname", NODE), ("InternalDNS", "kubernetes.default.svc")))
    verdict = ap.check(csr(serving_request(dns=(NODE, "kubernetes.default.svc"))), spoofed)
    assert not verdict.approve, verdict
    assert "['kubernetes.default.svc']" in verdict.reason and "own name or InternalIP" in verdict.reason


def test_only_internal_ips_and_the_hostname_that_is_the_nodes_name_count() -> None:
    assert ap.node_addresses(
        node(addresses=(("InternalIP", IP), ("Hostname", NODE), ("InternalIP", "fd00::7"), ("ExternalIP", "20.1.2.3")))
    ) == ({NODE}, {IP, "fd00::7"})
    # A Node whose Hostname is not its name: its certificate names the InternalIP only.
    other = node(addresses=(("InternalIP", IP), ("Hostname", "something-else")))
    assert ap.node_addresses(other) == (set(), {IP})
    assert ap.check(csr(serving_request(dns=())), other).approve


def test_a_request_before_its_node_exists_is_left_for_later() -> None:
    verdict = ap.check(csr(serving_request()), None)
    assert not verdict.approve and verdict.wait


def test_the_approver_may_approve_kubelet_serving_and_nothing_else(dev_spec: AddonsSpec) -> None:
    objs = {(o["kind"], o["metadata"]["name"]): o for o in serving_certs.serving_certs(dev_spec)}
    role = objs[("ClusterRole", serving_certs.APP)]
    (approve,) = [r for r in role["rules"] if "approve" in r["verbs"]]
    assert approve == {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["signers"],
        "resourceNames": ["kubernetes.io/kubelet-serving"],
        "verbs": ["approve"],
    }
    # Its only writes: the approval subresource and the approve verb on that one signer.
    writes = [r for r in role["rules"] if set(r["verbs"]) - {"get", "list", "watch"}]
    update = {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["certificatesigningrequests/approval"],
        "verbs": ["update"],
    }
    assert sorted(map(str, writes)) == sorted(map(str, [approve, update]))
    (container,) = objs[("Deployment", serving_certs.APP)]["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == serving_certs.MEMORY


class FakeCsrApi:
    """The API server's CSR and Node endpoints as the approver uses them: a LIST in pages of two (with
    ``continue``), a watch that streams ``events`` and then ends, the approval subresource (PUT)."""

    def __init__(self, csrs: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        self.csrs, self.events = csrs, events
        self.approvals: list[tuple[str, str, dict[str, Any]]] = []
        self.queries: list[dict[str, list[str]]] = []

    def serve(self) -> tuple[Any, Any]:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, urlparse

        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = parse_qs(url.query)
                if url.path == f"/api/v1/nodes/{NODE}":
                    return self._send(200, node())
                if url.path.startswith("/api/v1/nodes/"):
                    return self._send(404, {"reason": "NotFound"})
                assert url.path == ap.CSRS, url.path
                fake.queries.append(query)
                if query.get("watch") == ["1"]:
                    self.send_response(200)
                    self.end_headers()
                    for event in fake.events:  # one JSON object a line, as the API server streams a watch
                        self.wfile.write(json.dumps(event).encode() + b"\n")
                    return None
                start = int(query.get("continue", ["0"])[0])
                page = fake.csrs[start : start + 2]
                more = {"continue": str(start + 2)} if start + 2 < len(fake.csrs) else {}
                return self._send(200, {"metadata": {"resourceVersion": "10", **more}, "items": page})

            def do_PUT(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.approvals.append((self.path, self.headers["Content-Type"], body))
                self._send(200, body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, Api(f"http://127.0.0.1:{server.server_port}", "t", None)


def named(name: str, obj: dict[str, Any], conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {**obj, "metadata": {"name": name}, "status": {"conditions": conditions} if conditions else {}}


def test_the_controller_pages_then_watches_and_decides_each_undecided_csr_once() -> None:
    good, bad = csr(serving_request()), csr(serving_request(ips=(IP, "10.16.64.8")))
    approved = [{"type": "Approved", "status": "True", "reason": "x"}]
    listed = [
        named("a-good", good),
        named("b-done", good, approved),  # decided already: left alone
        named("c-bad", bad),
        named("d-early", csr(serving_request(cn="system:node:late"), username="system:node:late")),  # no Node yet: left
        named("e-good", good),
    ]
    events = [
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}},
        {"type": "ADDED", "object": named("f-watched", good)},
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
        {"type": "ADDED", "object": named("g-after-error", good)},  # never read: the watch ended at the error
    ]
    fake = FakeCsrApi(listed, events)
    server, api = fake.serve()
    try:
        version = ap.sweep(api)
        ap.watch(api, version)
    finally:
        server.shutdown()
        server.server_close()
    decisions = {path.split("/")[-2]: (kind, body) for path, kind, body in fake.approvals}
    assert sorted(decisions) == ["a-good", "c-bad", "e-good", "f-watched"]
    for name, (content_type, body) in decisions.items():
        assert content_type == "application/json"  # an update of the whole object, not a patch
        (cond,) = body["status"]["conditions"]
        assert cond["type"] == ("Denied" if name == "c-bad" else "Approved"), (name, cond)
    lists = [q for q in fake.queries if "watch" not in q]
    assert len(lists) == 3 and all(q["fieldSelector"] == [f"spec.signerName={ap.SIGNER}"] for q in lists)
    (watch,) = [q for q in fake.queries if "watch" in q]
    assert watch["resourceVersion"] == ["10"] and watch["fieldSelector"] == [f"spec.signerName={ap.SIGNER}"]
