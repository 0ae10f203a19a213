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
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from modules.cluster.objects import serving_certs
from modules.cluster.scripts import approve_serving as ap
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
