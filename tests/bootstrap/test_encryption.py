"""Secrets encrypted at rest (modules/bootstrap/encryption.py), as rendered: the API servers' flag and mount,
the key's delivery (a 0600 bundle secret of the API server hosts only, never customData), the configuration
itself and a rotation's two keys. The real API server reading it: tests/controlplane/test_encryption.py."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import yaml

from modules.bootstrap import delivery, encryption, pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host.boot import HostConfig
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import ROLES, bundle, names
from modules.bootstrap.roles.parts import FILES_HASH_SLOT
from modules.bootstrap.userdata import render_user_data

from .certs import issue


def _pod(ctx: BootstrapContext, host: str) -> dict[str, Any]:
    manifest = bundle(ctx, "apiserver", host).file("manifests/kube-apiserver.yaml").content
    return dict(yaml.safe_load(manifest.replace(FILES_HASH_SLOT, "x")))


def test_every_api_server_reads_the_encryption_config_it_mounts(ctx: BootstrapContext) -> None:
    hosts = names(ctx, "apiserver")
    assert hosts
    for host in hosts:
        pod = _pod(ctx, host)
        (container,) = pod["spec"]["containers"]
        flags = [a for a in container["command"] if a.startswith("--encryption-provider-config")]
        assert flags == [f"--encryption-provider-config={PATHS.encryption_config}"], host
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        (mount,) = [m for m in container["volumeMounts"] if PATHS.encryption_config.startswith(m["mountPath"] + "/")]
        assert mount["readOnly"] is True, host
        assert volumes[mount["name"]]["hostPath"]["path"] == mount["mountPath"], host


def test_the_key_is_a_0600_secret_of_the_api_server_hosts_only(ctx: BootstrapContext) -> None:
    wanted = {encryption.CONFIG_SECRET, *(encryption.seed_secret(k) for k in ctx.control_plane.encryption_keys)}
    for role in ROLES:
        for name in names(ctx, role):
            node = bundle(ctx, role, name)
            carried = {s.secret for s in node.secrets} & wanted
            clear = [f.path for f in node.files if f.path.startswith(PATHS.encryption_dir)]
            assert not clear, (name, clear)  # never a plain NodeFile
            if role != "apiserver":
                assert not carried, (role, name, carried)
                continue
            (secret,) = [s for s in node.secrets if s.secret == encryption.CONFIG_SECRET]
            assert (secret.path, secret.mode) == (PATHS.encryption_config, "0600")
            # Only the rendered configuration travels; the seeds stay in the Pulumi state.
            assert carried == {encryption.CONFIG_SECRET}, name


def test_customdata_never_holds_the_key(dev: BootstrapContext) -> None:
    """customData is readable by anyone who can read the VM model: the key is only in the Key Vault bundle."""
    pems = issue(pki.pki_spec(dev))
    key = yaml.safe_load(pems[encryption.CONFIG_SECRET])["resources"][0]["providers"][0]["secretbox"]["keys"][0]
    for role in ROLES:
        for name in names(dev, role):
            node = bundle(dev, role, name)
            host = HostConfig(role, name, dev.cluster, "https://vault.example", "secret", "client-id")
            user_data = render_user_data(dev, node, host)
            assert key["secret"] not in user_data and PATHS.encryption_dir not in user_data, name
    # ...and it is in the API server's bundle document (what its Key Vault secrets hold).
    node = bundle(dev, "apiserver", names(dev, "apiserver")[0])
    doc = delivery.document(node, pems, delivery.standin_facts(dev, node))
    (written,) = [f for f in doc["files"] if f["path"] == PATHS.encryption_config]
    assert key["secret"] in written["content"] and written["mode"] == "0600"


def test_the_config_encrypts_secrets_with_secretbox_and_reads_plaintext_last(dev: BootstrapContext) -> None:
    pems = issue(pki.pki_spec(dev))
    doc = yaml.safe_load(pems[encryption.CONFIG_SECRET])
    assert (doc["apiVersion"], doc["kind"]) == ("apiserver.config.k8s.io/v1", "EncryptionConfiguration")
    (entry,) = doc["resources"]
    assert entry["resources"] == ["secrets"]
    assert [next(iter(p)) for p in entry["providers"]] == ["secretbox", "identity"]
    (key,) = entry["providers"][0]["secretbox"]["keys"]
    assert key["name"] == dev.control_plane.encryption_keys[0] == "secrets-1"
    assert len(base64.b64decode(key["secret"])) == encryption.KEY_BYTES
    # Two seeds give two keys; one seed, re-wrapped, gives the same key.
    other = issue(pki.pki_spec(dev))
    seed = encryption.seed_secret("secrets-1")
    assert encryption.derive_key(pems[seed]) != encryption.derive_key(other[seed])
    assert encryption.derive_key(pems[seed].replace("\n", "\r\n")) == encryption.derive_key(pems[seed])


def test_a_rotation_carries_both_keys_in_order_and_restarts_the_api_servers(dev: BootstrapContext) -> None:
    rotating = dataclasses.replace(
        dev, control_plane=dataclasses.replace(dev.control_plane, encryption_keys=("secrets-1", "secrets-2"))
    )
    assert encryption.seed_secret("secrets-2") in pki.pki_spec(rotating).secret_names()
    pems = issue(pki.pki_spec(dev))
    new_seed = encryption.seed_secret("secrets-2")
    seeds = {**pems, new_seed: issue(pki.pki_spec(rotating))[new_seed]}
    rotated = {**seeds, encryption.CONFIG_SECRET: encryption.config_yaml(rotating.control_plane.encryption_keys, seeds)}
    (entry,) = yaml.safe_load(rotated[encryption.CONFIG_SECRET])["resources"]
    keys = entry["providers"][0]["secretbox"]["keys"]
    assert [k["name"] for k in keys] == ["secrets-1", "secrets-2"]  # the first still encrypts; both decrypt
    old_key = yaml.safe_load(pems[encryption.CONFIG_SECRET])["resources"][0]["providers"][0]["secretbox"]["keys"][0]
    assert keys[0] == old_key  # the old key keeps its material while its name stays
    # The new key changes the API server's manifest (its mounted files' hash): the kubelet recreates the pod.
    host = names(dev, "apiserver")[0]
    before = _files(delivery.document(bundle(dev, "apiserver", host), pems, _facts(dev, host)))
    after = _files(delivery.document(bundle(rotating, "apiserver", host), rotated, _facts(rotating, host)))
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert changed == {PATHS.encryption_config, f"{PATHS.manifests}/kube-apiserver.yaml"}


def _facts(ctx: BootstrapContext, host: str) -> dict[str, str]:
    return delivery.standin_facts(ctx, bundle(ctx, "apiserver", host))


def _files(doc: dict[str, Any]) -> dict[str, str]:
    return {f["path"]: f["content"] for f in doc["files"]}
