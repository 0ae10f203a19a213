"""Day 2 on the real program (issue 12, "Done means"): plan dev, then plan it again with renewed certificates,
a changed config file and a resized pool. No VM's or scale set's customData changes (Azure refuses it on a
VM; a scale set would hand it only to new instances), the hosts' Key Vault bundles do, and no customData
carries a certificate or a key.

The planner mints no keys (agk/plan/cloud.py answers pulumi-tls with named stand-ins); a renewal is the
same resources answering different PEMs, which is what pulumi-tls does when it renews (the certificate
is replaced, the key pair is not).
"""

from __future__ import annotations

import base64
import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml

from agk.plan import cloud, wire
from agk.plan.diff import resources_of
from modules.bootstrap.delivery import PARTS
from modules.bootstrap.host import bundle as host_bundle
from modules.bootstrap.host.alert_secrets import PLACEHOLDER as ALERT_PLACEHOLDER
from modules.bootstrap.host.boot import HOST_CONFIG, STAGE0
from modules.bootstrap.host.bundle import part_name
from modules.bootstrap.host.etcd_snapshot import ACCOUNT_URL_FILE
from modules.bootstrap.host.node_token import PLACEHOLDER
from modules.bootstrap.userdata import stage0_files

from .changed_stacks import cluster, export, stack_folder

MACHINES = ("azure-native:compute:VirtualMachine", "azure-native:compute:VirtualMachineScaleSet")
STORAGE_ACCOUNT = "azure-native:storage:StorageAccount"


def _plan(folder: Path, monkeypatch: pytest.MonkeyPatch, issued: str) -> dict[str, Any]:
    answer = cloud.Cloud._tls

    def renewed(self: cloud.Cloud, type_: str, urn: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rid, outputs = answer(self, type_, urn, inputs)
        if type_.endswith("Cert"):  # certificates renewed; their keys stay
            outputs["certPem"] = outputs["certPem"].replace("planned-", f"planned-{issued}-")
        return rid, outputs

    monkeypatch.setattr(cloud.Cloud, "_tls", renewed)
    return export(folder)


def _custom_data(state: dict[str, Any]) -> dict[str, str]:
    out = {}
    for r in resources_of(state):
        if r["type"] == MACHINES[0]:
            out[r["urn"]] = r["inputs"]["osProfile"]["customData"]
        elif r["type"] == MACHINES[1]:
            out[r["urn"]] = r["inputs"]["virtualMachineProfile"]["osProfile"]["customData"]
    return out


def _secrets(state: dict[str, Any]) -> dict[str, Any]:
    return {r["urn"]: r["inputs"]["properties"]["value"] for r in resources_of(state) if r["type"].endswith(":Secret")}


def _edit(config: dict[str, Any]) -> None:
    config["azure-gpu-k8s:cluster"].setdefault("prometheus", {})["scrape_interval"] = "15s"
    cluster(config)["gpu_pools"]["h100"]["nodes"] = 6


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        base = _plan(stack_folder(tmp_path_factory.mktemp("day1")), monkeypatch, "2026-01-10")
    with pytest.MonkeyPatch.context() as monkeypatch:
        later = _plan(stack_folder(tmp_path_factory.mktemp("day335"), edit=_edit), monkeypatch, "2026-12-06")
    return base, later


def test_renewal_config_and_resize_leave_every_machines_custom_data_as_it_was(
    plans: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    base, later = plans
    before, after = _custom_data(base), _custom_data(later)
    assert len(before) == 3 + 3 + 1 + 1 + 3  # API servers, etcd, Prometheus, NAT host; 3 scale sets
    assert after == before
    # ...while what changed reached the hosts' bundles: every secret holds a renewed certificate.
    old, new = _secrets(base), _secrets(later)
    tokens = {urn for urn in old if "-bootstrap-token" in urn}
    # The Prometheus host's receiver secrets (and Grafana's password) likewise keep their placeholder.
    alerts = {urn for urn in old if "-alerting-" in urn}
    assert old.keys() == new.keys() and len(old) - len(tokens) - len(alerts) == PARTS * len(before)
    assert all(new[urn] != old[urn] for urn in old.keys() - tokens - alerts)
    assert len(alerts) == 2 and all(wire.plain(new[u]) == wire.plain(old[u]) == ALERT_PLACEHOLDER for u in alerts)
    # The pools' token secrets keep the placeholder Pulumi created them with (the issuer's value is
    # never sent again: ignore_changes), one per pool.
    assert len(tokens) == 3 and all(wire.plain(new[urn]) == wire.plain(old[urn]) == PLACEHOLDER for urn in tokens)


def test_the_resized_pool_is_a_capacity_change_only(plans: tuple[dict[str, Any], dict[str, Any]]) -> None:
    base, later = plans
    sets = [{r["urn"]: r["inputs"] for r in resources_of(s) if r["type"] == MACHINES[1]} for s in (base, later)]
    changed = {urn for urn in sets[0] if sets[0][urn] != sets[1][urn]}
    assert [urn.rsplit("::", 1)[1] for urn in changed] == ["h100-00"]
    urn = changed.pop()
    assert (sets[0][urn]["sku"]["capacity"], sets[1][urn]["sku"]["capacity"]) == (4, 6)
    assert {k: v for k, v in sets[0][urn].items() if k != "sku"} == {
        k: v for k, v in sets[1][urn].items() if k != "sku"
    }


def _bundle(state: dict[str, Any], key: str) -> dict[str, Any]:
    """The document in host (or pool) ``key``'s secrets, as the host reads it."""
    # Logical names follow the secrets' own: <head>, <head>-2, ... (host_bundle.part_name).
    values = {urn.rsplit("::", 1)[1]: wire.plain(v) for urn, v in _secrets(state).items()}
    return host_bundle.decode(host_bundle.join(values.__getitem__, f"dev-keys-{key}"))


def test_the_changed_config_and_the_renewed_certificates_are_in_the_bundles(
    plans: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    for state, interval, issued in ((plans[0], "30s", "2026-01-10"), (plans[1], "15s", "2026-12-06")):
        prometheus = {f["path"]: f["content"] for f in _bundle(state, "dev-prometheus-0")["files"]}
        assert yaml.safe_load(prometheus["/etc/prometheus/prometheus.yml"])["global"]["scrape_interval"] == interval
        assert f"planned-{issued}-" in prometheus["/etc/prometheus/pki/prometheus.crt"]
        apiserver = {f["path"]: f["content"] for f in _bundle(state, "dev-apiserver-0")["files"]}
        assert f"planned-{issued}-" in apiserver["/etc/kubernetes/pki/apiserver.crt"]
    # The API servers' flags follow the cluster's sizing step, not its node count (issue 20): 2 more h100 nodes
    # stay inside dev's step of 50, so the scheduler's configuration and the audit policy are the same, and the
    # manifest differs only in the hash of the renewed certificates it mounts.
    files = [{f["path"]: f["content"] for f in _bundle(p, "dev-apiserver-0")["files"]} for p in plans]
    for path in ("/etc/kubernetes/scheduler-config.yaml", "/etc/kubernetes/audit-policy.yaml"):
        assert files[0][path] == files[1][path]
    manifests = [
        [x for x in f[path].splitlines() if "sha256" not in x]
        for f in files
        for path in f
        if path.endswith("/kube-apiserver.yaml")
    ]
    assert manifests[0] == manifests[1]


def _decoded(encoded: str) -> str:
    raw = base64.b64decode(encoded)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def test_no_custom_data_carries_a_certificate_or_a_key(plans: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for urn, encoded in _custom_data(plans[0]).items():
        text = _decoded(encoded)
        doc = yaml.safe_load(text)
        assert text.startswith("#cloud-config\n"), urn
        for marker in ("BEGIN", "PRIVATE KEY", "planned-", "CERTIFICATE"):
            assert marker not in text, (urn, marker)
        # The stable bootstrap only: the host's facts, the programs that fetch its bundle and the
        # per-boot script that runs them.
        assert [f["path"] for f in doc["write_files"]] == [HOST_CONFIG, *(f.path for f in stage0_files())], urn
        assert [f["path"].rsplit("/", 1)[-1] for f in doc["write_files"]][1:-1] == list(STAGE0), urn


def test_every_machine_waits_for_its_read_grants_and_the_vaults_private_endpoint(
    plans: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    state = plans[0]
    names = {r["urn"]: r["urn"].rsplit("::", 1)[1] for r in resources_of(state)}
    for r in resources_of(state):
        if r["type"] not in MACHINES:
            continue
        deps = {names[d] for d in r.get("dependencies", [])}
        doc = yaml.safe_load(_decoded(_custom_data(state)[r["urn"]]))
        host = yaml.safe_load(doc["write_files"][0]["content"])
        key = host["name"] if host["role"] not in ("gpu-node", "system-node") else f"pool-{host['name']}"
        assert {f"{part_name(f'dev-keys-{key}', i)}-reader" for i in range(1, PARTS + 1)} <= deps, r["urn"]
        assert {"dev-keys-endpoint", "dev-keys-dns-group", "dev-keys-dns-link"} <= deps, r["urn"]
        # The secret it names is the one its identity may read.
        secret = next(s for s in resources_of(state) if s["urn"].endswith(f"::dev-keys-{key}"))
        assert host["secret"] == secret["inputs"]["secretName"]


def test_etcd_members_learn_where_to_upload_snapshots_from_their_bundle(
    plans: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    state = plans[0]
    # The cluster's data account (the workload identity issuer's account, agk-role oidc-issuer, holds no data).
    accounts = [
        r["inputs"]["accountName"]
        for r in resources_of(state)
        if r["type"] == STORAGE_ACCOUNT and r["inputs"]["tags"].get("agk-role") == "storage"
    ]
    assert len(accounts) == 1
    for member in ("dev-etcd-0", "dev-etcd-1", "dev-etcd-2"):
        files = {f["path"]: f["content"] for f in _bundle(state, member)["files"]}
        assert files[ACCOUNT_URL_FILE] == f"https://{accounts[0]}.blob.core.windows.net\n", member
    # No other host gets it (the events etcd is not backed up: test_etcd_backup_render).
    assert ACCOUNT_URL_FILE not in {f["path"] for f in _bundle(state, "dev-apiserver-0")["files"]}
