"""Pure checks of what each host's Key Vault bundle holds and how a running host acts on a change.

- Sizes: the plan-time check's certificate stand-ins are at least as large as real certificates
  (issued with ``cryptography`` from the same spec), and a bundle that does not fit fails naming its host.
- Static pods: every file a pod reads is in its manifest's files hash, so a renewed certificate
  (kube-proxy's on every node included) or a changed config recreates exactly the pods that read it.
- The restart map and the timers: what restarts for which file, and when each host acts.
"""

from __future__ import annotations

import base64
import itertools
import os
import re
from dataclasses import replace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from modules.bootstrap import delivery, encryption, pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.delivery import (
    KEY_PEM_BYTES,
    PARTS,
    PUB_PEM_BYTES,
    RSA_KEY_PEM_BYTES,
    check_sizes,
    document,
    encode,
    placeholder_facts,
    standin_pems,
)
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.host.vault import SECRET_LIMIT
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.bootstrap.roles.upkeep import HOST_PROGRAMS, sync_minute
from modules.errors import AgkError

from .certs import issue
from .staticpods import static_pods


def test_certificate_stand_ins_are_at_least_as_large_as_real_ones(ctx: BootstrapContext) -> None:
    spec = pki.pki_spec(ctx)
    real, standin = issue(spec), standin_pems(spec)
    assert real.keys() == standin.keys()
    for name, pem in real.items():
        # Real keys: SEC1 P-256 (227 bytes); pulumi-tls may write PKCS#8 (241): the stand-in takes the larger.
        assert len(standin[name]) >= len(pem), name
        if name.startswith("cert:"):
            assert len(standin[name]) <= len(pem) + 400, name  # an upper bound, not a guess in the dark
    rsa = {f"key:{n}" for n, algorithm in pki.KEY_PAIR_ALGORITHMS.items() if algorithm == "RSA"}
    pems = [n for n in standin if n.startswith("key:") and n != encryption.CONFIG_SECRET and n not in rsa]
    assert {len(standin[n]) for n in pems} == {KEY_PEM_BYTES + 4}
    # An RSA-2048 key (workload identity's signing key, when the stack has one): PKCS#8's size and its line breaks.
    assert {len(standin[n]) for n in rsa & set(standin)} <= {RSA_KEY_PEM_BYTES + 27}
    # The encryption configuration is rendered from the stand-in seeds as from real ones: exactly its size.
    assert len(standin[encryption.CONFIG_SECRET]) == len(real[encryption.CONFIG_SECRET])
    assert len(standin["pub:service-account"]) == PUB_PEM_BYTES + 3


def test_every_bundle_fits_its_secrets_with_room_to_grow(ctx: BootstrapContext) -> None:
    sizes = check_sizes(ctx)
    assert set(sizes) == {n for role in ROLES for n in names(ctx, role)}
    # 85%: dev's API servers, with workload identity's RSA signing key (1.3 KB that does not compress), fill 81.3%
    # (60,968 of 75,000 bytes). Growth past this needs delivery.PARTS raised or host programs moved into the image.
    assert max(sizes.values()) < 0.85 * PARTS * SECRET_LIMIT, max(sizes.items(), key=lambda kv: kv[1])


def test_a_bundle_that_does_not_fit_fails_naming_its_host(dev: BootstrapContext) -> None:
    node = bundle(dev, "apiserver", "dev-apiserver-1")
    noise = base64.b64encode(os.urandom(40_000)).decode()
    big = replace(node, files=(*node.files, NodeFile("/etc/agk/noise", "noise", noise)))
    with pytest.raises(AgkError) as err:
        encode(document(big, standin_pems(pki.pki_spec(dev)), placeholder_facts(dev, node)))
    assert str(err.value).startswith("apiserver dev-apiserver-1: its bundle is ")
    assert str(err.value).endswith(
        f"bytes, over {PARTS} Key Vault secrets of 25,000 bytes: raise delivery.PARTS (new secrets, new names)"
        " or move large files into the image"
    )


def test_the_plan_fails_on_a_bundle_that_does_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from agk.cli import app
    from modules.bootstrap import delivery

    monkeypatch.setattr(delivery, "PARTS", 1)  # one secret per host: the etcd members' bundles are too big
    result = CliRunner().invoke(app, ["plan", "--stack", "dev"])
    assert result.exit_code == 2
    assert re.fullmatch(
        r"error: dev: etcd dev-etcd-0: its bundle is [\d,]+ bytes, over 1 Key Vault secrets of 25,000 bytes: "
        r"raise delivery.PARTS \(new secrets, new names\) or move large files into the image\n",
        result.stderr,
    ), result.stderr


def _manifests(doc: dict[str, object]) -> dict[str, str]:
    return {f["path"]: f["content"] for f in doc["files"] if f["path"].startswith(PATHS.manifests + "/")}  # type: ignore[attr-defined,index]


def test_a_changed_file_changes_exactly_the_manifests_of_the_pods_that_read_it(ctx: BootstrapContext) -> None:
    pems = issue(pki.pki_spec(ctx))

    def document(node: NodeBundle, pems: dict[str, str]) -> dict[str, Any]:
        return delivery.document(node, pems, placeholder_facts(ctx, node))

    for sp in static_pods(ctx):
        node, manifest = sp.node, f"{PATHS.manifests}/{sp.pod['metadata']['name']}.yaml"
        base = _manifests(document(node, pems))
        secret_of = {s.path: s.secret for s in node.secrets}
        for path in sp.referenced():
            if path in secret_of:
                changed = _manifests(document(node, pems | {secret_of[path]: pems[secret_of[path]] + "renewed\n"}))
            elif any(f.path == path for f in node.files):
                files = tuple(
                    replace(f, content=f.content + "# changed\n") if f.path == path else f for f in node.files
                )
                changed = _manifests(document(replace(node, files=files), pems))
            else:
                continue
            assert changed[manifest] != base[manifest], (node.name, manifest, path)
    # kube-proxy's client certificate on every node and the NAT host: a renewal reaches them all.
    for node in [bundle(ctx, p.role, p.name) for p in ctx.pools] + [bundle(ctx, "nat", ctx.nat.name)]:
        key = f"cert:{pki.KUBE_PROXY}"
        before = _manifests(document(node, pems))[f"{PATHS.manifests}/kube-proxy.yaml"]
        after = _manifests(document(node, pems | {key: pems[key] + "renewed\n"}))[f"{PATHS.manifests}/kube-proxy.yaml"]
        assert before != after, node.name


def test_a_file_no_pod_mounts_leaves_every_manifest_alone(dev: BootstrapContext) -> None:
    pems = issue(pki.pki_spec(dev))

    def document(node: NodeBundle, pems: dict[str, str]) -> dict[str, Any]:
        return delivery.document(node, pems, placeholder_facts(dev, node))

    node = bundle(dev, "apiserver", "dev-apiserver-0")
    files = tuple(replace(f, content=f.content + "# x\n") if f.path == PATHS.sysctl else f for f in node.files)
    assert _manifests(document(replace(node, files=files), pems)) == _manifests(document(node, pems))
    # The hash is in the manifest as an annotation the Kubernetes schema accepts (test_render validates).
    pod = yaml.safe_load(_manifests(document(node, pems))[f"{PATHS.manifests}/kube-apiserver.yaml"])
    ((key, value),) = pod["metadata"]["annotations"].items()
    assert key == f"{dev.label_domain}/files-sha256" and len(value) == 64


def test_the_restart_map_covers_what_running_hosts_read(ctx: BootstrapContext) -> None:
    for role in ROLES:
        for name in names(ctx, role)[:1]:
            node = bundle(ctx, role, name)
            mapped = {p: r for r in node.restarts for p in r.paths}
            units = [f.path for f in node.files if f.path.startswith("/etc/systemd/system/")]
            assert "/etc/systemd/system/agk-sync.timer" in mapped, name
            for path in [f.path for f in node.files if f.path.startswith(PATHS.manifests + "/")]:
                assert mapped[path].action == "static-pod", path
            for s in node.secrets:
                if s.path.startswith(PATHS.etcd_pki + "/"):
                    assert (mapped[s.path].unit, mapped[s.path].gate) == ("etcd.service", "etcd")
                if s.path.startswith(PATHS.prom_pki + "/"):
                    assert (mapped[s.path].unit, mapped[s.path].action) == ("prometheus.service", "reload")
            if role == "apiserver":
                assert mapped[f"{PATHS.manifests}/kube-apiserver.yaml"].gate == "apiserver"
                assert mapped[f"{PATHS.manifests}/kube-scheduler.yaml"].gate == ""
            assert units, name
            # etcd waits for every other restart of the run (it may wait for its own health).
            assert node.restarts[-1].unit == "etcd.service" or role not in ("etcd", "events-etcd")


def test_fixed_hosts_of_a_role_sync_at_different_minutes(ctx: BootstrapContext) -> None:
    for role in ("etcd", "events-etcd", "apiserver", "prometheus", "nat"):
        hosts = names(ctx, role)
        if not hosts:  # dev has no events etcd
            continue
        minutes = [sync_minute(ctx, role, h) for h in hosts]
        assert len(set(minutes)) == len(hosts)
        assert all(m is not None and 0 <= m < 60 for m in minutes)
        if len(hosts) > 1:
            spaced = sorted(m for m in minutes if m is not None)
            assert min(b - a for a, b in itertools.pairwise(spaced)) >= 60 // len(hosts)
        timer = bundle(ctx, role, hosts[0]).file("systemd/agk-sync.timer").content
        assert f"OnCalendar=*-*-* *:{minutes[0]:02d}:00" in timer
    for pool in ctx.pools:
        timer = bundle(ctx, pool.role, pool.name).file("systemd/agk-sync.timer").content
        assert "RandomizedDelaySec=1h" in timer and "FixedRandomDelay=true" in timer


def test_stage_zero_is_part_of_what_every_bundle_ships() -> None:
    assert set(host_boot.STAGE0) < set(HOST_PROGRAMS)
    assert PATHS.script("lib") == host_boot.LIB
