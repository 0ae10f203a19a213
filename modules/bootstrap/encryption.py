"""Secrets encrypted at rest in etcd: the API servers' EncryptionConfiguration (pure).

Without it every Secret (bootstrap tokens included) is plaintext in etcd's data files and in every
snapshot the backup timer uploads to blob storage. With it the API servers encrypt Secrets before they
reach etcd; neither an etcd host's disk nor a snapshot holds the key.

Which provider, and why (kubernetes.io/docs/tasks/administer-cluster/encrypt-data/, "Providers";
kubernetes.io/docs/tasks/administer-cluster/kms-provider/):

- ``kms`` v2 is what Kubernetes recommends: a DEK per API server start, wrapped by a key that never
  leaves the KMS. On Azure that is Azure/kubernetes-kms, a gRPC plugin on every API server host that
  wraps the DEK with a Key Vault key. It costs a plugin process (a static pod, its image, its Azure
  credentials file) on every API server host, and Key Vault reachable (private endpoint, DNS, the
  identity's token from IMDS) at every API server start and whenever the DEK seed rotates: a Key Vault
  outage then stops API servers from starting. It cannot run in these tests (no Key Vault here).
- ``aescbc`` is discouraged by those docs (CBC's padding-oracle exposure); ``aesgcm`` must be rotated
  every 200k writes (random 96-bit nonces), which this cluster's Secret churn (bootstrap tokens, service
  account token Secrets of 7,500 nodes' workloads) would reach with no automatic rotation.
- ``secretbox`` (XSalsa20-Poly1305, 32-byte key, 192-bit random nonces) is strong, fast and has no write
  budget. Its key is a local file: it protects etcd's disks and the snapshots in blob storage, which is
  the exposure this closes, but not a root compromise of an API server host (which holds the key, as it
  already holds the etcd client key and the CA key).

So: ``secretbox``, its key delivered like the PKI. The cluster stack generates it (ClusterPki: pulumi-tls
mints an Ed25519 key per ``encryption_keys`` name, and ``derive_key`` hashes it to 32 bytes: no second
provider plugin for one random value; the key lives in the Pulumi state as a secret, like every PKI key),
renders this file, and it travels in each API server's Key Vault bundle (``SecretFile``
``CONFIG_SECRET``, mode 0600): only the API server identities can read those secrets, no other role's
bundle carries it, and customData never does. Moving to KMS v2 later is a config change plus the plugin
(the docs' migration: add the kms provider first, restart, rewrite).

What is encrypted: ``secrets`` only. ConfigMaps are not secret by contract and are read on every pod start
that mounts one (kubelets across 7,500 nodes): encrypting them buys nothing but API server CPU. The
``identity`` provider is last, read-only in effect: Secrets written before encryption was on stay readable
until they are rewritten (docs/etcd.md "Encryption at rest": the one-off rewrite and key rotation).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

PROVIDER = "secretbox"
RESOURCES = ("secrets",)
CONFIG_SECRET = "key:encryption-config"
"""The bundle secret that holds the rendered EncryptionConfiguration (``key:`` so it is written 0600)."""
KEY_BYTES = 32
"""secretbox takes exactly 32 bytes (encrypt-data docs, "Providers")."""
MAX_KEYS = 2
"""One key, two while a rotation is under way (the new one added, the old one still read)."""
_LABEL = b"azure-gpu-k8s encryption at rest v1\n"


def seed_secret(name: str) -> str:
    """The PKI secret name of key ``name``'s seed (an Ed25519 private key PEM)."""
    return f"key:encryption-{name}"


def derive_key(seed_pem: str) -> bytes:
    """32 bytes from a private key PEM: SHA-256 over a label and the PEM's base64 body (line breaks and the
    armour lines left out, so a re-wrapped PEM gives the same key). An Ed25519 key is 32 bytes from the
    OS's CSPRNG (pulumi-tls, Go's crypto/ed25519), so the hash keeps all 256 bits."""
    body = "".join(line.strip() for line in seed_pem.splitlines() if not line.startswith("-----"))
    if not body:
        raise ValueError("encryption key seed is empty: ClusterPki issues it (tls PrivateKey, ED25519)")
    return hashlib.sha256(_LABEL + body.encode()).digest()


def config(keys: Sequence[str], seeds: Mapping[str, str]) -> dict[str, Any]:
    """The EncryptionConfiguration for ``keys`` (names, in the file's order: the first encrypts, all
    decrypt), each key's material derived from ``seeds[seed_secret(name)]``."""
    if not keys:
        raise ValueError("cluster.api_servers.encryption_keys is empty: name at least one key")
    entries = [
        {"name": name, "secret": base64.b64encode(derive_key(seeds[seed_secret(name)])).decode()} for name in keys
    ]
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [
            {
                "resources": list(RESOURCES),
                # identity last: reads data written before encryption was on (and refuses k8s:enc: data,
                # k8s.io/apiserver pkg/storage/value/encrypt/identity/identity.go); never used to write.
                "providers": [{PROVIDER: {"keys": entries}}, {"identity": {}}],
            }
        ],
    }


def config_yaml(keys: Sequence[str], seeds: Mapping[str, str]) -> str:
    """``config`` as the file the API servers read (``--encryption-provider-config``)."""
    header = "# Written by the cluster stack (modules/bootstrap/encryption.py); delivered in this host's bundle.\n"
    return header + yaml.safe_dump(config(keys, seeds), sort_keys=False)
