"""Issue the cluster's PKI spec with ``cryptography``: the same subjects, SANs, usages as ClusterPki, and the
Secret encryption keys' seeds and configuration as ClusterPki makes them."""

from __future__ import annotations

import datetime as dt
from ipaddress import IPv4Address

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from modules.bootstrap import encryption
from modules.bootstrap.pki import KEY_PAIR_ALGORITHMS, RSA_BITS, CertSpec, PkiSpec

EKU = {"server_auth": ExtendedKeyUsageOID.SERVER_AUTH, "client_auth": ExtendedKeyUsageOID.CLIENT_AUTH}


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> str:
    # SEC1 "EC PRIVATE KEY" (PKCS#1 "RSA PRIVATE KEY" for RSA), the forms pulumi-tls emits.
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()


def _name(cn: str, org: str | None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _usage(usages: tuple[str, ...]) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature="digital_signature" in usages,
        content_commitment=False,
        key_encipherment="key_encipherment" in usages,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign="cert_signing" in usages,
        crl_sign="crl_signing" in usages,
        encipher_only=False,
        decipher_only=False,
    )


def issue(spec: PkiSpec, only: set[str] | None = None) -> dict[str, str]:
    """PEMs under the secret names renderers ask for; ``only`` limits which leaf certs are issued."""
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    out: dict[str, str] = {}
    cas: dict[str, tuple[ec.EllipticCurvePrivateKey, x509.Certificate]] = {}
    for ca in spec.cas:
        key = _key()
        name = _name(ca.common_name, None)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(hours=ca.validity_hours))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_usage(("digital_signature", "cert_signing", "crl_signing")), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        cas[ca.name] = (key, cert)
        out[f"cert:{ca.name}"] = cert.public_bytes(serialization.Encoding.PEM).decode()
        out[f"key:{ca.name}"] = _pem(key)
    for spec_cert in spec.certs:
        if only is None or spec_cert.name in only:
            key, cert = leaf(spec_cert, *cas[spec_cert.ca], now)
            out[f"cert:{spec_cert.name}"], out[f"key:{spec_cert.name}"] = cert, _pem(key)
    for pair in spec.key_pairs:
        # What ClusterPki's tls.PrivateKey gives for the pair: RSA where the spec says so, else P-256.
        pair_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey = (
            rsa.generate_private_key(65537, RSA_BITS) if KEY_PAIR_ALGORITHMS.get(pair) == "RSA" else _key()
        )
        out[f"key:{pair}"] = _pem(pair_key)
        out[f"pub:{pair}"] = (
            pair_key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )
    for name in spec.encryption_keys:  # what ClusterPki's ED25519 tls.PrivateKey gives: PKCS#8 PEM
        seed = ed25519.Ed25519PrivateKey.generate()
        out[encryption.seed_secret(name)] = seed.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    if spec.encryption_keys:
        out[encryption.CONFIG_SECRET] = encryption.config_yaml(spec.encryption_keys, out)
    return out


def leaf(
    spec: CertSpec, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, now: dt.datetime
) -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(spec.common_name, spec.organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(hours=spec.validity_hours))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(spec.usages), critical=True)
        .add_extension(x509.ExtendedKeyUsage([EKU[u] for u in spec.usages if u in EKU]), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in spec.dns_names]
    sans += [x509.IPAddress(IPv4Address(ip)) for ip in spec.ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return key, cert.public_bytes(serialization.Encoding.PEM).decode()
