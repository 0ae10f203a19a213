"""The PKI spec: issued for real with cryptography (tests), and as pulumi-tls resources (mock runtime)."""

from __future__ import annotations

import base64
from ipaddress import IPv4Address
from typing import Any

import pulumi
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modules.bootstrap import encryption, pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host.bootstrap_tokens import ISSUER_USER
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import bundle
from tests.mock_runtime import settled

from .certs import issue


def test_spec_sans_come_from_the_address_plan(prod: BootstrapContext) -> None:
    spec = pki.pki_spec(prod)
    host = prod.control_plane.apiservers[2]
    api = spec.cert(pki.apiserver_cert(host.name))
    assert set(api.ip_addresses) == {host.ip, prod.apiserver_vip, prod.apiserver_service_ip, IPv4Address("127.0.0.1")}
    assert "kubernetes.default.svc.cluster.local" in api.dns_names
    assert prod.events_etcd is not None
    member = prod.events_etcd.members[4]
    peer = spec.cert(pki.etcd_peer_cert(member.name))
    assert peer.ip_addresses == (member.ip, IPv4Address("127.0.0.1"))
    assert set(peer.usages) >= {"server_auth", "client_auth"}
    # Pools join with bootstrap tokens: no bootstrapper certificate exists; the issuer's is the Role's user.
    assert not [c for c in spec.certs if "bootstrap" in c.common_name and c.name != pki.BOOTSTRAP_TOKEN_ISSUER]
    issuer = spec.cert(pki.BOOTSTRAP_TOKEN_ISSUER)
    assert (issuer.common_name, issuer.organization, issuer.ca) == (ISSUER_USER, None, pki.KUBERNETES_CA)
    names = [c.name for c in spec.certs]
    assert len(names) == len(set(names))


def test_issued_certificates_match_the_spec(dev: BootstrapContext) -> None:
    spec = pki.pki_spec(dev)
    pems = issue(spec)
    assert set(pems) == set(spec.secret_names())
    for want in spec.certs:
        cert = x509.load_pem_x509_certificate(pems[f"cert:{want.name}"].encode())
        ca = x509.load_pem_x509_certificate(pems[f"cert:{want.ca}"].encode())
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == want.common_name
        eku = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
        assert (ExtendedKeyUsageOID.SERVER_AUTH in eku) == ("server_auth" in want.usages)
        assert (ExtendedKeyUsageOID.CLIENT_AUTH in eku) == ("client_auth" in want.usages)
        if want.ip_addresses:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert san.get_values_for_type(x509.IPAddress) == list(want.ip_addresses)


class Capture(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(args)
        outputs = dict(args.inputs)
        if args.typ == "tls:index/privateKey:PrivateKey":
            outputs |= {"privateKeyPem": f"KEY {args.name}\n", "publicKeyPem": f"PUB {args.name}\n"}
        elif args.typ in ("tls:index/selfSignedCert:SelfSignedCert", "tls:index/locallySignedCert:LocallySignedCert"):
            outputs |= {"certPem": f"CERT {args.name}\n"}
        elif args.typ == "tls:index/certRequest:CertRequest":
            outputs |= {"certRequestPem": f"CSR {args.name}\n"}
        return f"{args.name}_id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


def test_cluster_pki_resources_and_the_bundle(dev: BootstrapContext) -> None:
    from modules.azure.customdata import bundle_parts
    from modules.azure.pki import ClusterPki, ClusterPkiArgs
    from modules.bootstrap.etcd_backup import ACCOUNT_URL_FACT
    from modules.bootstrap.host import bundle as host_bundle
    from modules.bootstrap.host.etcd_snapshot import ACCOUNT_URL_FILE

    mocks = Capture()
    pulumi.runtime.set_mocks(mocks, preview=False)
    spec = pki.pki_spec(dev)
    component = ClusterPki("dev-pki", ClusterPkiArgs(spec=spec))
    url = "https://account.blob.core.windows.net"
    parts = bundle_parts(dev, component, "etcd", "dev-etcd-1", {ACCOUNT_URL_FACT: pulumi.Output.from_input(url + "\n")})
    # Read only once every registration settled, not when the parts alone have resolved.
    values = settled(pulumi.Output.all(pulumi.Output.all(*parts), *(p.is_secret() for p in parts)))

    def check(args: list[Any]) -> None:
        texts, *secrets = args
        by_type: dict[str, list[pulumi.runtime.MockResourceArgs]] = {}
        for r in mocks.resources:
            by_type.setdefault(r.typ, []).append(r)
        assert [r.name for r in by_type["agk:bootstrap:ClusterPki"]] == ["dev-pki"]
        assert len(by_type["tls:index/selfSignedCert:SelfSignedCert"]) == len(spec.cas)
        assert len(by_type["tls:index/locallySignedCert:LocallySignedCert"]) == len(spec.certs)
        keys = by_type["tls:index/privateKey:PrivateKey"]
        assert len(keys) == len(spec.cas) + len(spec.certs) + len(spec.key_pairs) + len(spec.encryption_keys)
        # The PKI's keys are ECDSA but dev's service-account signing key (RSA 2048: workload identity, and Entra verifies
        # RSA only); the
        # Secret encryption keys' seeds are Ed25519 (32 random bytes each).
        seeds = {f"dev-pki-encryption-{k}-key" for k in spec.encryption_keys}
        signing = f"dev-pki-{pki.SERVICE_ACCOUNT_RSA}-key"
        assert {k.inputs["algorithm"] for k in keys if k.name not in seeds | {signing}} == {"ECDSA"}
        (rsa_key,) = (k for k in keys if k.name == signing)
        assert (rsa_key.inputs["algorithm"], rsa_key.inputs["rsaBits"]) == ("RSA", 2048)
        assert {k.name: k.inputs["algorithm"] for k in keys if k.name in seeds} == dict.fromkeys(seeds, "ED25519")
        csr = next(
            r for r in by_type["tls:index/certRequest:CertRequest"] if r.name == "dev-pki-etcd-peer-dev-etcd-1-csr"
        )
        member_ip = next(str(m.ip) for m in dev.etcd.members if m.name == "dev-etcd-1")
        assert csr.inputs["ipAddresses"] == [member_ip, "127.0.0.1"]
        signed = next(
            r
            for r in by_type["tls:index/locallySignedCert:LocallySignedCert"]
            if r.name == "dev-pki-etcd-peer-dev-etcd-1"
        )
        assert signed.inputs["allowedUses"] == ["digital_signature", "key_encipherment", "server_auth", "client_auth"]
        assert signed.inputs["caCertPem"] == "CERT dev-pki-etcd-ca\n"
        assert secrets == [True] * len(parts)
        names = [host_bundle.part_name("s", i + 1) for i in range(len(texts))]
        doc = host_bundle.decode(host_bundle.join(dict(zip(names, texts, strict=True)).__getitem__, "s"))
        files = {f["path"]: f["content"] for f in doc["files"]}
        assert files["/etc/etcd/pki/peer.key"] == "KEY dev-pki-etcd-peer-dev-etcd-1-key\n"
        assert files["/etc/etcd/pki/server.crt"] == "CERT dev-pki-etcd-server-dev-etcd-1\n"
        assert files["/etc/etcd/etcd.conf.yml"] == bundle(dev, "etcd", "dev-etcd-1").file("etcd.conf.yml").content
        assert files[ACCOUNT_URL_FILE] == url + "\n"  # the deploy-time fact, beside the PEMs
        assert not [p for p in files if p.startswith(PATHS.encryption_dir)]  # an etcd member never holds the key

    check(values)


def test_cluster_pki_renders_the_encryption_config_into_the_api_servers_bundle(dev: BootstrapContext) -> None:
    """ClusterPki derives each Secret encryption key from its Ed25519 seed and renders the configuration; an API
    server's bundle (what its Key Vault secrets hold) carries it at the flag's path, 0600, and a Pulumi secret."""
    from modules.azure.customdata import bundle_parts
    from modules.azure.pki import ClusterPki, ClusterPkiArgs
    from modules.bootstrap import node_tokens
    from modules.bootstrap.host import bundle as host_bundle

    pulumi.runtime.set_mocks(Capture(), preview=False)
    component = ClusterPki("dev-pki", ClusterPkiArgs(spec=pki.pki_spec(dev)))
    host = dev.control_plane.apiservers[0].name
    facts = {k: pulumi.Output.from_input(v) for k, v in node_tokens.standin_facts(dev).items()}
    parts = bundle_parts(dev, component, "apiserver", host, facts)
    texts, secret = settled(
        pulumi.Output.all(pulumi.Output.all(*parts), component.secrets[encryption.CONFIG_SECRET].is_secret())
    )
    names = [host_bundle.part_name("s", i + 1) for i in range(len(texts))]
    doc = host_bundle.decode(host_bundle.join(dict(zip(names, texts, strict=True)).__getitem__, "s"))
    (written,) = [f for f in doc["files"] if f["path"] == PATHS.encryption_config]
    assert (written["mode"], written["owner"], secret) == ("0600", "root:root", True)
    (entry,) = yaml.safe_load(written["content"])["resources"]
    (key,) = entry["providers"][0]["secretbox"]["keys"]
    # The mock's PEM for the seed resource: the key is derived from exactly that resource's key.
    assert key == {
        "name": "secrets-1",
        "secret": base64.b64encode(encryption.derive_key("KEY dev-pki-encryption-secrets-1-key\n")).decode(),
    }
