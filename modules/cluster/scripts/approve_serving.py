"""Deployment: approve kubelet serving certificate requests (signer ``kubernetes.io/kubelet-serving``).

With ``serverTLSBootstrap: true`` each kubelet files a CSR for its serving certificate and waits for it;
kube-controller-manager signs such requests once approved but never approves them ("Requests for this
signer are never auto-approved by kube-controller-manager", kubernetes.io, Certificate Signing Requests,
Kubernetes signers; kubelet TLS bootstrapping, "Certificate rotation": "the built-in approver doesn't
approve serving certificates"). This controller does, and only what a kubelet would ask for itself:

- requested by ``system:node:<name>`` in group ``system:nodes`` (the API server fills ``spec.username``
  and ``spec.groups`` from the requester's credential; nobody can set them);
- the request's subject is exactly ``O=system:nodes, CN=system:node:<name>``, the same ``<name>``;
- its subjectAltNames are exactly the node's own name, as a DNS name, when its Node has it as a
  ``Hostname`` address, and the Node's ``InternalIP`` addresses as IP addresses. A kubelet puts all of its
  Node's ``status.addresses`` in (k8s.io/kubernetes v1.35.8 pkg/kubelet/certificate/kubelet.go,
  addressesToHostnamesAndIPs); any other (InternalDNS, ExternalDNS, ExternalIP, a Hostname that is not the
  node's name) is denied, named in the reason: the kubelet itself writes its Node's addresses
  (NodeRestriction lets a node update its own Node), so they say only what the node credential wants.
  No other name type (e-mail, URI), and at least one name;
- no other extension and no other attribute than the extension request;
- usages exactly those the signer permits: ``digital signature`` and ``server auth``, with or without
  ``key encipherment`` (kubernetes.io, kubelet-serving signer's "Permitted key usages").

A CSR that fails is denied with the reason (a person reading ``kubectl get csr`` sees why; the kubelet
files a new one), except when the Node does not exist yet: that one is left and looked at again on the
next list. The node's own authorization is the API server's (only ``system:node:<name>`` credentials
make such a request). This controller does NOT stop a stolen node credential from getting a certificate for
an address that is not the node's: that credential can set its Node's InternalIP to any address first,
and the approval follows the Node. What bounds it is the signer's CA: kube-controller-manager signs
kubelet-serving requests with a CA of their own (modules/bootstrap/pki.py ``KUBELET_SERVING_CA``, its
``--cluster-signing-kubelet-serving-*`` flags), which only Prometheus' kubelet scrape and the API servers'
calls to kubelets (``--kubelet-certificate-authority``) trust. A minted certificate lets its holder pass for a
kubelet to those, not for the API server or anything else. The
name checks here narrow what it can name (no DNS name but the node's own, no address that is not an
InternalIP), in case that CA is ever trusted more widely.

Memory stays small at 7,500 nodes: CSRs are listed in pages and then watched (one event at a time), and
one Node is read per request. Only the standard library (the pod runs the plain Python image).
"""

from __future__ import annotations

import base64
import datetime
import http.client
import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.kube import Api, Conflict, NotFound
else:  # run from the ConfigMap mount, next to kube.py
    from kube import Api, Conflict, NotFound  # type: ignore[import-not-found,no-redef]

SIGNER = "kubernetes.io/kubelet-serving"
NODES_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"
CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
PERMITTED_USAGES = (
    frozenset({"digital signature", "server auth"}),
    frozenset({"key encipherment", "digital signature", "server auth"}),
)
DNS_ADDRESS = "Hostname"
"""The one address type a DNS subjectAltName may come from, and only when it is the node's name."""
IP_ADDRESS = "InternalIP"
"""The one address type an IP subjectAltName may come from."""
REASON = "AgkKubeletServingApproved"
DENIED = "AgkKubeletServingDenied"
WATCH_SECONDS = 300
"""A watch ends after this long (server-side timeoutSeconds); the next list re-examines CSRs left pending."""

# OIDs (RFC 5280, PKCS#9).
OID_CN, OID_O = "2.5.4.3", "2.5.4.10"
OID_EXTENSION_REQUEST = "1.2.840.113549.1.9.14"
OID_SAN = "2.5.29.17"
SUBJECT_NAMES = {OID_CN: "CN", OID_O: "O"}


class Malformed(ValueError):
    """The request is not the DER a PKCS#10 CSR must be."""


# --- A minimal DER reader: the few PKCS#10 structures a check needs (RFC 2986, RFC 5280). ---


def _tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, contents, next offset) of the DER element at ``at``."""
    if at + 2 > len(data):
        raise Malformed("truncated")
    tag, length = data[at], data[at + 1]
    at += 2
    if tag & 0x1F == 0x1F:
        raise Malformed("multi-byte tags are not used in a CSR")
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise Malformed("bad length")
        length = int.from_bytes(data[at : at + count], "big")
        at += count
    if at + length > len(data):
        raise Malformed("truncated")
    return tag, data[at : at + length], at + length


def _children(data: bytes) -> Iterator[tuple[int, bytes]]:
    at = 0
    while at < len(data):
        tag, body, at = _tlv(data, at)
        yield tag, body


def _one(data: bytes, tag: int) -> bytes:
    got, body, end = _tlv(data, 0)
    if got != tag or end != len(data):
        raise Malformed(f"expected tag {tag:#x}, got {got:#x}")
    return body


def _oid(body: bytes) -> str:
    if not body:
        raise Malformed("empty OID")
    parts = [body[0] // 40, body[0] % 40] if body[0] < 80 else [2, body[0] - 80]
    value = 0
    for byte in body[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


@dataclass(frozen=True)
class Request:
    """What a check reads from a PKCS#10 request."""

    subject: tuple[tuple[str, str], ...]
    """(OID, value) of every subject attribute, in order."""
    attributes: tuple[str, ...]
    """OIDs of the request's attributes."""
    extensions: tuple[str, ...]
    """OIDs of the extensions it asks for."""
    dns_names: tuple[str, ...]
    ips: tuple[str, ...]
    other_names: int
    """subjectAltNames of any other type (e-mail, URI, directory name, ...)."""


def parse_request(pem: str) -> Request:
    lines = [x.strip() for x in pem.strip().splitlines()]
    if (
        not lines
        or lines[0] != "-----BEGIN CERTIFICATE REQUEST-----"
        or lines[-1] != "-----END CERTIFICATE REQUEST-----"
    ):
        raise Malformed("not a CERTIFICATE REQUEST PEM block")
    try:
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
    except ValueError as err:
        raise Malformed(str(err)) from None
    outer = list(_children(_one(der, 0x30)))
    if len(outer) != 3 or outer[0][0] != 0x30:
        raise Malformed("not a CertificationRequest")
    info = list(_children(outer[0][1]))
    if len(info) != 4 or info[1][0] != 0x30 or info[3][0] != 0xA0:
        raise Malformed("not a CertificationRequestInfo")
    subject = []
    for tag, rdn in _children(info[1][1]):
        if tag != 0x31:
            raise Malformed("subject RDN is not a SET")
        for _, pair in _children(rdn):
            (otag, oid), (_, value) = list(_children(pair))
            if otag != 0x06:
                raise Malformed("attribute type is not an OID")
            subject.append((_oid(oid), value.decode("utf-8", "replace")))
    attributes, extensions, dns, ips, other = [], [], [], [], 0
    for _, attribute in _children(info[3][1]):
        (otag, oid), (_, values) = list(_children(attribute))
        attributes.append(_oid(oid))
        if _oid(oid) != OID_EXTENSION_REQUEST:
            continue
        for _, exts in _children(values):
            for _, ext in _children(exts):
                parts = list(_children(ext))
                ext_oid = _oid(parts[0][1])
                extensions.append(ext_oid)
                if ext_oid != OID_SAN:
                    continue
                for tag, name in _children(_one(parts[-1][1], 0x30)):
                    if tag == 0x82:  # dNSName [2] IA5String
                        dns.append(name.decode("ascii", "replace"))
                    elif tag == 0x87:  # iPAddress [7] OCTET STRING
                        if len(name) not in (4, 16):
                            raise Malformed("bad IP address in subjectAltName")
                        ips.append(str(ipaddress.ip_address(name)))
                    else:
                        other += 1
    return Request(tuple(subject), tuple(attributes), tuple(extensions), tuple(dns), tuple(ips), other)


# --- The check. ---


@dataclass(frozen=True)
class Verdict:
    approve: bool
    reason: str
    wait: bool = False
    """Neither approved nor denied: looked at again later (the Node is not there yet)."""


def node_name(csr: dict[str, Any]) -> str | None:
    user = str(csr.get("spec", {}).get("username") or "")
    return user.removeprefix(NODE_PREFIX) if user.startswith(NODE_PREFIX) and len(user) > len(NODE_PREFIX) else None


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def node_addresses(node: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The DNS names and IPs a serving certificate of ``node`` may name: the node's own name, where it is one
    of its Hostname addresses, and its InternalIP addresses (normalised as the kubelet writes them into its
    request, k8s.io/kubernetes v1.35.8 pkg/kubelet/certificate/kubelet.go, addressesToHostnamesAndIPs).
    Every other address of the Node is left out, whatever its type."""
    name = str(node.get("metadata", {}).get("name") or "")
    dns, ips = set(), set()
    for a in node.get("status", {}).get("addresses") or []:
        kind, text = a.get("type"), str(a.get("address") or "")
        if kind == DNS_ADDRESS and text and text == name:
            dns.add(text)
        elif kind == IP_ADDRESS and (ip := _ip(text)) is not None:
            ips.add(ip)
    return dns, ips


def check(csr: dict[str, Any], node: dict[str, Any] | None) -> Verdict:
    """Whether ``csr`` is the serving certificate request of the node that filed it, for its own addresses.
    ``node``: the Node named by the requester (None: not found)."""
    spec = csr.get("spec", {})
    if spec.get("signerName") != SIGNER:
        return Verdict(False, f"signer is {spec.get('signerName')!r}, not {SIGNER}")
    name = node_name(csr)
    if name is None:
        return Verdict(False, f"requested by {spec.get('username')!r}, not a node (system:node:<name>)")
    if NODES_GROUP not in (spec.get("groups") or []):
        return Verdict(False, f"requester is not in group {NODES_GROUP}")
    usages = spec.get("usages") or []
    if len(set(usages)) != len(usages) or frozenset(usages) not in PERMITTED_USAGES:
        return Verdict(False, f"usages {sorted(usages)} are not the kubelet-serving signer's")
    try:
        request = parse_request(base64.b64decode(spec.get("request") or "").decode("ascii", "replace"))
    except (ValueError, IndexError) as err:  # Malformed is a ValueError; so is a bad unpacking
        return Verdict(False, f"request is not a PKCS#10 CSR: {err}")
    if request.subject != ((OID_O, NODES_GROUP), (OID_CN, f"{NODE_PREFIX}{name}")) and request.subject != (
        (OID_CN, f"{NODE_PREFIX}{name}"),
        (OID_O, NODES_GROUP),
    ):
        shown = ", ".join(f"{SUBJECT_NAMES.get(o, o)}={v}" for o, v in request.subject)
        return Verdict(False, f"subject is {shown!r}, not O={NODES_GROUP}, CN={NODE_PREFIX}{name}")
    if set(request.attributes) - {OID_EXTENSION_REQUEST}:
        return Verdict(False, f"request carries attributes {sorted(set(request.attributes))}")
    if set(request.extensions) - {OID_SAN} or len(request.extensions) != len(set(request.extensions)):
        return Verdict(False, f"request asks for extensions {list(request.extensions)}; only subjectAltName")
    if request.other_names:
        return Verdict(False, "subjectAltName holds names other than DNS names and IP addresses")
    if not request.dns_names and not request.ips:
        return Verdict(False, "no subjectAltName")
    if node is None:
        return Verdict(False, f"node {name} not found", wait=True)
    dns, ips = node_addresses(node)
    allowed = f"(DNS {sorted(dns)} IP {sorted(ips)})"
    extra_dns, extra_ips = sorted(set(request.dns_names) - dns), sorted(set(request.ips) - ips)
    if extra_dns or extra_ips:
        return Verdict(
            False,
            f"subjectAltNames DNS {extra_dns} IP {extra_ips} are not node {name}'s own name or InternalIP "
            f"addresses {allowed}",
        )
    if set(request.dns_names) != dns or set(request.ips) != ips:
        return Verdict(
            False,
            f"subjectAltNames DNS {sorted(set(request.dns_names))} IP {sorted(set(request.ips))} are not node "
            f"{name}'s own name and all its InternalIP addresses {allowed}",
        )
    return Verdict(True, f"node {name}'s serving certificate for its own name and InternalIP addresses")


# --- The controller. ---


def decided(csr: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Approved", "Denied", "Failed") for c in csr.get("status", {}).get("conditions") or [])


def get_node(api: Api, name: str) -> dict[str, Any] | None:
    try:
        node: dict[str, Any] = api.get(f"/api/v1/nodes/{urllib.parse.quote(name, safe='')}")
    except NotFound:
        return None
    return node


def handle(api: Api, csr: dict[str, Any]) -> str | None:
    """Approve or deny one undecided kubelet-serving CSR (a line for the log), or leave it (None)."""
    if decided(csr) or csr.get("spec", {}).get("signerName") != SIGNER:
        return None
    name = node_name(csr)
    verdict = check(csr, get_node(api, name) if name else None)
    if verdict.wait:
        return None
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Approved" if verdict.approve else "Denied",
        "status": "True",
        "reason": REASON if verdict.approve else DENIED,
        "message": verdict.reason,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }
    conditions = [*(csr.get("status", {}).get("conditions") or []), condition]
    body = {**csr, "status": {**csr.get("status", {}), "conditions": conditions}}
    try:
        # The approval subresource takes the whole object (an update, not a patch).
        api.request("PUT", f"{CSRS}/{csr['metadata']['name']}/approval", body, content_type="application/json")
    except (Conflict, NotFound):
        return None  # changed or gone meanwhile: the watch brings the new state
    return f"{'approved' if verdict.approve else 'denied'} {csr['metadata']['name']}: {verdict.reason}"


SELECTOR = f"spec.signerName={SIGNER}"


def sweep(api: Api) -> str:
    """Every undecided kubelet-serving CSR, in pages; the list's resourceVersion (to watch from)."""
    version = ""
    for page, meta in api.pages_with_meta(CSRS, fieldSelector=SELECTOR):
        version = meta.get("resourceVersion") or version
        for csr in page:
            line = handle(api, csr)
            if line:
                print(line, flush=True)
    return version


def watch(api: Api, version: str) -> None:
    """Handle each CSR event from ``version`` until the watch ends (timeout, 410 Gone, a dropped connection)."""
    query = {
        "watch": "1",
        "fieldSelector": SELECTOR,
        "resourceVersion": version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(WATCH_SECONDS),
    }
    for event in api.stream(CSRS, query, timeout=WATCH_SECONDS + 30):
        if event.get("type") in ("ADDED", "MODIFIED"):
            line = handle(api, event["object"])
            if line:
                print(line, flush=True)
        elif event.get("type") == "ERROR":
            return  # e.g. 410 Gone: the version is too old; list again


def main() -> None:
    api = Api.in_cluster()
    print(f"approving {SIGNER} CSRs of nodes for their own names and InternalIP addresses", flush=True)
    while True:
        try:
            watch(api, sweep(api))
        except (urllib.error.URLError, OSError, http.client.HTTPException, json.JSONDecodeError) as err:
            print(f"API error, listing again in 5 s: {err}", flush=True)
            time.sleep(5)


if __name__ == "__main__":
    main()
