"""A node bundle with its PKI as the document its Key Vault secret holds, and the secret's size check (pure).

``document`` fills in the PEMs, gives every file its owner and every static pod its files hash;
``encode`` gives the values of the host's ``PARTS`` secrets (modules/bootstrap/host/bundle.py defines
the format the host reads). Key Vault holds at most 25 KB per secret: ``check_sizes`` encodes every
host's bundle of a cluster with stand-ins the size of real certificates, before any resource exists,
so a bundle that would not fit fails the plan with one line naming the host.

Why a fixed number of parts rather than as many as a bundle needs: a part that disappears cannot come
back under its old name (secrets are retained on delete, see modules/azure/keyvault.py, and the
provider refuses to create a resource that already exists), so every host has the same ``PARTS``
secrets for its whole life, full or not.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from typing import Any

import yaml

from modules.bootstrap import alerting, encryption, node_tokens
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host import bundle as host_bundle
from modules.bootstrap.host.vault import SECRET_LIMIT
from modules.bootstrap.layout import PATHS
from modules.bootstrap.pki import KEY_PAIR_ALGORITHMS, CertSpec, PkiSpec, pki_spec
from modules.bootstrap.roles import POOL_ROLES, ROLES, NodeBundle, bundle, names
from modules.bootstrap.roles.parts import FILES_HASH_SLOT
from modules.bootstrap.roles.prometheus import prometheus_secrets
from modules.errors import AgkError

OWNERS = {PATHS.etcd_pki: "etcd:etcd", PATHS.prom_pki: "prometheus:prometheus"}
"""Directories whose files belong to the service that reads them (its package creates the user;
until then the boot steps' chown does the same)."""


def owner(path: str) -> str:
    for directory, who in OWNERS.items():
        if path.startswith(directory + "/"):
            return who
    return "root:root"


def document(node: NodeBundle, pems: Mapping[str, str], facts: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The bundle of ``node`` with ``pems`` (secret name -> PEM) in place of its secret files and
    ``facts`` (name -> value known at deploy) in its fact files."""
    missing = [s.secret for s in node.secrets if s.secret not in pems]
    if missing:
        raise AgkError(f"{node.role} {node.name}: no PKI secret {missing[0]!r}: issue it in ClusterPki")
    given = facts or {}
    absent = [f.fact for f in node.facts if f.fact not in given]
    if absent:
        raise AgkError(f"{node.role} {node.name}: no deploy-time value {absent[0]!r}: pass it to bundle_parts")
    contents = {f.path: (f.content, f.mode) for f in node.files}
    boot_only = {f.path for f in node.files if f.boot_only}
    contents |= {s.path: (pems[s.secret], s.mode) for s in node.secrets}
    contents |= {f.path: (given[f.fact], f.mode) for f in node.facts}
    for path, (text, mode) in list(contents.items()):
        if FILES_HASH_SLOT in text:
            contents[path] = (text.replace(FILES_HASH_SLOT, mounted_files_hash(text, contents)), mode)
    return {
        "format": host_bundle.FORMAT,
        "role": node.role,
        "name": node.name,
        "files": [
            {"path": path, "mode": mode, "owner": owner(path), "content": text}
            | ({"boot_only": True} if path in boot_only else {})
            for path, (text, mode) in sorted(contents.items())
        ],
        "boot": list(node.runcmd),
        "restarts": [
            {"unit": r.unit, "action": r.action, "paths": list(r.paths), "gate": r.gate, "command": r.command}
            for r in node.restarts
        ],
        "gates": {
            g.kind: {"self": g.self_name, "members": dict(g.members), **({"ca": g.ca} if g.ca else {})}
            for g in node.gates
        },
    }


def placeholder_pems(node: NodeBundle) -> dict[str, str]:
    """Stand-ins for offline rendering (``agk render``): real PEMs exist only at deploy."""
    return {
        s.secret: f"# {s.secret}: issued by ClusterPki, delivered in this host's Key Vault secret\n"
        for s in node.secrets
    }


def placeholder_facts(ctx: BootstrapContext, node: NodeBundle) -> dict[str, str]:
    """Stand-ins for offline rendering (``agk render``): the cluster stack knows these only at deploy.
    The token settings name stand-in secrets of the real names' length (node_tokens.standin_facts)."""
    pool = node.name if node.role in POOL_ROLES else None
    known = node_tokens.standin_facts(ctx, pool)
    known[alerting.ALERT_FACT] = alerting.standin_fact(prometheus_secrets(ctx), node.name)
    return {f.fact: known.get(f.fact, f"{f.fact.upper()}-KNOWN-AT-DEPLOY\n") for f in node.facts}


def mounted_files_hash(manifest: str, contents: Mapping[str, tuple[str, str]]) -> str:
    """sha256 over every bundle file under one of the static pod's hostPath volumes (path and content)."""
    pod = yaml.safe_load(manifest)
    roots = [v["hostPath"]["path"] for v in pod["spec"].get("volumes") or () if "hostPath" in v]
    h = hashlib.sha256()
    for path in sorted(contents):
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            h.update(path.encode() + b"\0" + contents[path][0].encode() + b"\0")
    return h.hexdigest()


PARTS = 3
"""Secrets per host (or pool): room for 3 x 25 KB of encoded bundle. The largest today, an API server's (the
bootstrap token issuer's programs and, with workload identity, an RSA signing key), fill 78-81% of it with
real-size certificates (tests/bootstrap/test_delivery.py, dev and prod-7500; `make bench`)."""


def encode(doc: Mapping[str, Any]) -> list[str]:
    """The values of the host's ``PARTS`` secrets; refuses a bundle that does not fit with one line
    naming the host."""
    value = host_bundle.encode(doc)
    parts = host_bundle.split(value, PARTS)
    if max(len(p) for p in parts) > SECRET_LIMIT:
        raise AgkError(
            f"{doc['role']} {doc['name']}: its bundle is {len(value):,} bytes, over {PARTS} Key Vault secrets of "
            f"{SECRET_LIMIT:,} bytes: raise delivery.PARTS (new secrets, new names) or move large files into the image"
        )
    return parts


# ---- the plan-time check: PEM stand-ins as large as real ones, as incompressible as real ones ----

KEY_PEM_BYTES = 241
"""An ECDSA P-256 private key in PKCS#8 PEM (138 bytes DER; SEC1's EC PRIVATE KEY is 227)."""
PUB_PEM_BYTES = 178
"""Its public key, SubjectPublicKeyInfo PEM (91 bytes DER)."""
RSA_KEY_PEM_BYTES = 1704
"""An RSA-2048 private key in PKCS#8 PEM (pulumi-tls writes PKCS#1, 1,675 bytes: this is the larger)."""
RSA_PUB_PEM_BYTES = 451
"""Its public key, SubjectPublicKeyInfo PEM."""
CERT_DER_BASE = 560
"""A P-256 certificate's DER without its names: version, serial, algorithms, validity, key, key usage,
extended key usage, basic constraints, key identifiers and the signature (upper bound, checked against
issued certificates by tests/bootstrap/test_delivery.py)."""


def cert_der_bytes(spec: CertSpec, issuer_cn: str) -> int:
    names = len(spec.common_name) + len(spec.organization or "") + len(issuer_cn)
    sans = sum(len(d) + 2 for d in spec.dns_names) + 6 * len(spec.ip_addresses)
    return CERT_DER_BASE + names + sans


def pem_bytes(der: int) -> int:
    body = 4 * -(-der // 3)
    return len("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n") + body + -(-body // 64)


def standin_pems(spec: PkiSpec) -> dict[str, str]:
    """PEM-shaped random text of each secret's real size (deterministic: seeded by the secret's name)."""
    ca_cn = {ca.name: ca.common_name for ca in spec.cas}
    sizes: dict[str, int] = {}
    for ca in spec.cas:
        sizes[f"cert:{ca.name}"] = pem_bytes(CERT_DER_BASE + 2 * len(ca.common_name))
        sizes[f"key:{ca.name}"] = KEY_PEM_BYTES
    for cert in spec.certs:
        sizes[f"cert:{cert.name}"] = pem_bytes(cert_der_bytes(cert, ca_cn[cert.ca]))
        sizes[f"key:{cert.name}"] = KEY_PEM_BYTES
    for pair in spec.key_pairs:
        rsa = KEY_PAIR_ALGORITHMS.get(pair) == "RSA"
        sizes[f"key:{pair}"] = RSA_KEY_PEM_BYTES if rsa else KEY_PEM_BYTES
        sizes[f"pub:{pair}"] = RSA_PUB_PEM_BYTES if rsa else PUB_PEM_BYTES
    for key in spec.encryption_keys:
        # An Ed25519 PEM is shorter; the size is moot anyway: only the derived key reaches a bundle.
        sizes[encryption.seed_secret(key)] = KEY_PEM_BYTES
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    out = {}
    for name, size in sizes.items():
        rng = random.Random(name)
        body = "".join(rng.choice(alphabet) for _ in range(size))
        out[name] = "\n".join(body[i : i + 64] for i in range(0, size, 64)) + "\n"
    if spec.encryption_keys:  # rendered from the seeds exactly as ClusterPki renders it: its real size
        out[encryption.CONFIG_SECRET] = encryption.config_yaml(spec.encryption_keys, out)
    return out


FACT_BYTES = 256
"""Room for a deploy-time value (an account URL is under 70 bytes)."""


def standin_facts(ctx: BootstrapContext, node: NodeBundle) -> dict[str, str]:
    """The node's deploy-time facts, as long as real ones may be (the size check)."""
    exact = (*node_tokens.FACTS, alerting.ALERT_FACT)  # the stand-ins are as long as the real values
    return {k: v if k in exact else "f" * FACT_BYTES for k, v in placeholder_facts(ctx, node).items()}


def check_sizes(ctx: BootstrapContext) -> dict[str, int]:
    """Every host's (and pool's) encoded bundle size with real-size certificates, in bytes over all its
    parts; raises for one that does not fit (the figures `make bench` prints)."""
    pems = standin_pems(pki_spec(ctx))
    sizes = {}
    for role in ROLES:
        for name in names(ctx, role):
            node = bundle(ctx, role, name)
            sizes[name] = sum(len(part) for part in encode(document(node, pems, standin_facts(ctx, node))))
    return sizes
