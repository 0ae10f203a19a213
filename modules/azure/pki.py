"""``ClusterPki``: the PKI spec as pulumi-tls resources; every key and certificate is a secret output."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_tls as tls

from modules.bootstrap import encryption
from modules.bootstrap.pki import (
    CA_USAGES,
    EARLY_RENEWAL_HOURS,
    KEY_PAIR_ALGORITHMS,
    RSA_BITS,
    CaSpec,
    CertSpec,
    PkiSpec,
)

ALGORITHM = "ECDSA"
CURVE = "P256"


@dataclass
class ClusterPkiArgs:
    spec: PkiSpec
    """The cluster's PKI (``modules.bootstrap.pki.pki_spec``): CAs, certificates, key pairs."""


class ClusterPki(pulumi.ComponentResource):
    """CAs, leaf certificates, the service-account key pair and the Secret encryption keys of one cluster.

    ``secrets`` maps ``cert:<name>``, ``key:<name>`` and ``pub:<name>`` to secret PEM outputs;
    ``customdata.custom_data`` reads them by the names a node bundle asks for.
    """

    secrets: dict[str, pulumi.Output[str]]
    ca_certs: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: ClusterPkiArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        # The token keeps the area the component was first deployed from: a new token is a new URN for it and
        # every child, which Pulumi would replace.
        super().__init__("agk:bootstrap:ClusterPki", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.secrets = {}
        cas: dict[str, tuple[tls.PrivateKey, tls.SelfSignedCert]] = {}
        for ca in args.spec.cas:
            cas[ca.name] = self._ca(name, ca, child)
        for cert in args.spec.certs:
            key, ca_key, ca_cert = self._key(name, cert.name, child), *cas[cert.ca]
            self._leaf(name, cert, key, ca_key, ca_cert, child)
        for pair in args.spec.key_pairs:
            if KEY_PAIR_ALGORITHMS.get(pair) == "RSA":
                key = tls.PrivateKey(f"{name}-{pair}-key", algorithm="RSA", rsa_bits=RSA_BITS, opts=child)
            else:
                key = self._key(name, pair, child)
            self.secrets[f"key:{pair}"] = pulumi.Output.secret(key.private_key_pem)
            self.secrets[f"pub:{pair}"] = pulumi.Output.secret(key.public_key_pem)
        self._encryption(name, args.spec.encryption_keys, child)
        self.ca_certs = pulumi.Output.all(**{n: c.cert_pem for n, (_, c) in cas.items()}).apply(dict)
        self.register_outputs({"ca_certs": self.ca_certs, "secret_names": sorted(self.secrets)})

    def _encryption(self, name: str, keys: tuple[str, ...], opts: pulumi.ResourceOptions) -> None:
        """One Ed25519 key per Secret encryption key (its 32 random bytes are the seed encryption.derive_key
        hashes) and the EncryptionConfiguration built from them. A key keeps its material for as long as
        its name stays in the list (the resource's name is the key's)."""
        if not keys:
            return
        seeds = {}
        for key_name in keys:
            seed = encryption.seed_secret(key_name)
            key = tls.PrivateKey(f"{name}-encryption-{key_name}-key", algorithm="ED25519", opts=opts)
            seeds[seed] = self.secrets[seed] = pulumi.Output.secret(key.private_key_pem)
        rendered = pulumi.Output.all(**seeds).apply(lambda got: encryption.config_yaml(keys, got))
        self.secrets[encryption.CONFIG_SECRET] = pulumi.Output.secret(rendered)

    def _key(self, name: str, what: str, opts: pulumi.ResourceOptions) -> tls.PrivateKey:
        return tls.PrivateKey(f"{name}-{what}-key", algorithm=ALGORITHM, ecdsa_curve=CURVE, opts=opts)

    def _ca(self, name: str, ca: CaSpec, opts: pulumi.ResourceOptions) -> tuple[tls.PrivateKey, tls.SelfSignedCert]:
        key = self._key(name, ca.name, opts)
        cert = tls.SelfSignedCert(
            f"{name}-{ca.name}",
            private_key_pem=key.private_key_pem,
            subject=tls.SelfSignedCertSubjectArgs(common_name=ca.common_name),
            is_ca_certificate=True,
            validity_period_hours=ca.validity_hours,
            early_renewal_hours=EARLY_RENEWAL_HOURS,
            allowed_uses=list(CA_USAGES),
            opts=opts,
        )
        self.secrets[f"key:{ca.name}"] = pulumi.Output.secret(key.private_key_pem)
        self.secrets[f"cert:{ca.name}"] = pulumi.Output.secret(cert.cert_pem)
        return key, cert

    def _leaf(
        self,
        name: str,
        spec: CertSpec,
        key: tls.PrivateKey,
        ca_key: tls.PrivateKey,
        ca_cert: tls.SelfSignedCert,
        opts: pulumi.ResourceOptions,
    ) -> None:
        request = tls.CertRequest(
            f"{name}-{spec.name}-csr",
            private_key_pem=key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=spec.common_name, organization=spec.organization),
            dns_names=list(spec.dns_names),
            ip_addresses=[str(ip) for ip in spec.ip_addresses],
            opts=opts,
        )
        cert = tls.LocallySignedCert(
            f"{name}-{spec.name}",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem,
            ca_cert_pem=ca_cert.cert_pem,
            validity_period_hours=spec.validity_hours,
            early_renewal_hours=EARLY_RENEWAL_HOURS,
            allowed_uses=list(spec.usages),
            opts=opts,
        )
        self.secrets[f"key:{spec.name}"] = pulumi.Output.secret(key.private_key_pem)
        self.secrets[f"cert:{spec.name}"] = pulumi.Output.secret(cert.cert_pem)
