"""Bad bootstrap (and bootstrap-relevant cluster) config: one clear line naming the key and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.errors import ConfigError
from modules.stackplan.config import ClusterStack, load_stack, parse_config
from modules.stackplan.prepare import prepare_cluster
from tests.plan.changed_stacks import stack_folder

from .conftest import STACKS

P = "azure-gpu-k8s"


def _dev(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((STACKS / "Pulumi.dev.yaml").read_text())["config"]
    for key, value in changes.items():
        section, _, rest = key.partition(".")
        target = raw.setdefault(f"{P}:{section}", {})
        *path, leaf = rest.split(".")
        for part in path:
            target = target.setdefault(part, {})
        target[leaf] = value
    return raw


CASES = [
    (
        {"cluster.etcd.count": 4},
        f"{P}:cluster.etcd.count: 4 etcd members is not supported: use 3 or 5 (an odd quorum)",
    ),
    (
        {"cluster.etcd.rtt_ms": 0},
        f"{P}:cluster.etcd.rtt_ms: rtt_ms 0 is out of range: use 1 to 5000 (election timeout = 10 x RTT <= 50 s)",
    ),
    (
        {"cluster.prometheus.retention_days": -1},
        f"{P}:cluster.prometheus.retention_days: -1 is too small: use 1 or more",
    ),
    (
        {"cluster.etcd.quota_backend_gib": 16},
        f"{P}:cluster.etcd.quota_backend_gib: quota_backend_gib 16 is out of range: "
        "use 1 to 8 (etcd's suggested maximum)",
    ),
    (
        {"cluster.etcd.compaction_retention": "1 hour"},
        f"{P}:cluster.etcd.compaction_retention: compaction_retention '1 hour' is not a duration: "
        "use e.g. '30s', '5m' or '1h'",
    ),
    (
        {"cluster.etcd.snapshot_count": 10},
        f"{P}:cluster.etcd.snapshot_count: snapshot_count 10 is too low: use at least 1000",
    ),
    (
        {"cluster.prometheus.query_timeout": "forever"},
        f"{P}:cluster.prometheus.query_timeout: query_timeout 'forever' is not a duration: "
        "use e.g. '30s', '5m' or '1h'",
    ),
    (
        {"cluster.prometheus.scrape_interval": "5s"},
        f"{P}:cluster.prometheus.scrape_interval: scrape_interval '5s' is shorter than the 10s scrape timeout, "
        "which Prometheus refuses: use at least '10s'",
    ),
    (
        {"cluster.prometheus.gomaxprocs": 0},
        f"{P}:cluster.prometheus.gomaxprocs: gomaxprocs 0 must be at least 1: raise it",
    ),
    (
        {"cluster.prometheus.remote_write_url": "http://metrics.example.com/write"},
        f"{P}:cluster.prometheus.remote_write_url: remote_write_url 'http://metrics.example.com/write' "
        "is not https: use an https:// endpoint",
    ),
    (
        {"cluster.nodes.image_gc_low_percent": 90},
        f"{P}:cluster.nodes: image_gc_low_percent 90 / image_gc_high_percent 85: need 0 < low < high <= 100",
    ),
    (
        {"cluster.api_servers.client_qps": 0},
        f"{P}:cluster.api_servers: client_qps 0 must be at least 1: raise it or remove it for the default",
    ),
    (
        {"cluster.kubernetes_patch": -1},
        f"{P}:cluster.kubernetes_patch: kubernetes_patch -1 is negative: use 0 or more, or remove it",
    ),
    (
        {"cluster.etcd.rtt": 5},
        f"{P}:cluster.etcd.rtt: unknown key: remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        # Issue 21: an old stack file that still pins Azure CNI's tarball (the zeros the stacks shipped).
        {"bootstrap.nodes.azure_cni_sha256": "0" * 64},
        f"{P}:bootstrap.nodes.azure_cni_sha256: removed: Azure CNI now comes with the node image, at the versions "
        "table's release (modules/bootstrap/versions.py row azure-cni); remove the key, and bump the row and "
        "rebuild the images to change it (docs/images.md) (built from its Go module, checked by go.sum: no "
        "checksum to set)",
    ),
    (
        {"bootstrap.prometheus.version": "2.53.3"},
        f"{P}:bootstrap.prometheus.version: removed: Prometheus now comes with the node image, at the versions "
        "table's release (modules/bootstrap/versions.py row prometheus); remove the key, and bump the row and "
        "rebuild the images to change it (docs/images.md)",
    ),
    (
        {"cluster.kubernetes_version": "1.31"},
        f"{P}:cluster.kubernetes_version: kubernetes_version '1.31' is not supported: use 1.35, 1.36 or 1.37",
    ),
    (
        {"cluster.api_servers.encryption_keys": ["secrets-1", "secrets-2", "secrets-3"]},
        f"{P}:cluster.api_servers.encryption_keys: 3 keys: list 1 key, or 2 while rotating "
        "(the new one and the old one)",
    ),
    (
        {"cluster.api_servers.encryption_keys": []},
        f"{P}:cluster.api_servers.encryption_keys: 0 keys: list 1 key, or 2 while rotating "
        "(the new one and the old one)",
    ),
    (
        {"cluster.api_servers.encryption_keys": ["secrets-1", "secrets-1"]},
        f"{P}:cluster.api_servers.encryption_keys: 'secrets-1' is listed twice: list each key once",
    ),
    (
        {"cluster.api_servers.encryption_keys": ["Key_1"]},
        f"{P}:cluster.api_servers.encryption_keys: 'Key_1' is not a valid key name: use 2-32 lowercase "
        "letters, digits and '-', starting with a letter",
    ),
    (
        {"addons.preflight.stuck_alert_after": "soon"},
        f"{P}:addons.preflight.stuck_alert_after: stuck_alert_after 'soon' is not a duration: use e.g. '30s', '5m' "
        "or '1h'",
    ),
]


@pytest.mark.parametrize(("changes", "message"), CASES, ids=[next(iter(c)) for c, _ in CASES])
def test_bad_config_is_one_clear_line(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_dev(**changes))
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_shipped_stacks_take_the_tuning_defaults() -> None:
    config = parse_config(_dev())
    assert isinstance(config, ClusterStack)
    assert config.cluster.etcd.rtt_ms == 100
    assert config.cluster.prometheus.gomaxprocs == 24
    assert config.cluster.kubernetes_version == "1.36"


MOVED = "move it there (the bootstrap section is gone: each component's settings are in its own section)"
# Stack files written for the former `bootstrap` section: each setting is answered with its new place.
OLD_KEYS = [
    ({"bootstrap.etcd.rtt_ms": 50}, f"{P}:bootstrap.etcd.rtt_ms: moved to {P}:cluster.etcd.rtt_ms: {MOVED}"),
    (
        {"bootstrap.control_plane.client_qps": 50},
        f"{P}:bootstrap.control_plane.client_qps: moved to {P}:cluster.api_servers.client_qps: {MOVED}",
    ),
    (
        {"bootstrap.prometheus.scrape_interval": "15s"},
        f"{P}:bootstrap.prometheus.scrape_interval: moved to {P}:cluster.prometheus.scrape_interval: {MOVED}",
    ),
    (
        {"bootstrap.nodes.image_gc_high_percent": 80},
        f"{P}:bootstrap.nodes.image_gc_high_percent: moved to {P}:cluster.nodes.image_gc_high_percent: {MOVED}",
    ),
    (
        {"bootstrap.kubernetes_patch": 3},
        f"{P}:bootstrap.kubernetes_patch: moved to {P}:cluster.kubernetes_patch: {MOVED}",
    ),
    (
        {"bootstrap.preflight_timeout": "2h"},
        f"{P}:bootstrap.preflight_timeout: moved to {P}:addons.preflight.stuck_alert_after: {MOVED}",
    ),
    (
        # A key the section never had is not sent somewhere it would fail again.
        {"bootstrap.etcd.rtt": 5},
        f"{P}:bootstrap.etcd.rtt: unknown key (the bootstrap section is gone: each component's settings are in its "
        "own section): remove it or fix the spelling (see stacks/schema.json)",
    ),
    (
        {"bootstrap.kubernetes_patch": {"a": 1}},
        f"{P}:bootstrap.kubernetes_patch: moved to {P}:cluster.kubernetes_patch: {MOVED}",
    ),
]


@pytest.mark.parametrize(("changes", "message"), OLD_KEYS, ids=[next(iter(c)) for c, _ in OLD_KEYS])
def test_a_key_of_the_former_bootstrap_section_names_its_new_place(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_dev(**changes))
    assert str(err.value) == message


def test_each_component_section_holds_its_tuning() -> None:
    config = parse_config(
        _dev(
            **{
                "cluster.etcd.rtt_ms": 50,
                "cluster.api_servers.client_qps": 300,
                "cluster.prometheus.scrape_interval": "15s",
                "cluster.nodes.image_gc_high_percent": 80,
                "cluster.kubernetes_patch": 3,
                "addons.preflight.stuck_alert_after": "2h",
            }
        )
    )
    assert isinstance(config, ClusterStack)
    cluster = config.cluster
    assert (cluster.etcd.rtt_ms, cluster.api_servers.client_qps, cluster.prometheus.scrape_interval) == (50, 300, "15s")
    assert (cluster.nodes.image_gc_high_percent, cluster.kubernetes_patch) == (80, 3)
    assert config.addons.preflight.stuck_alert_after == "2h"


def test_a_patch_is_pinned_per_minor() -> None:
    from modules.bootstrap.versions import kubernetes_release

    assert kubernetes_release("1.35", None) == "1.35.8"
    assert kubernetes_release("1.36", 2) == "1.36.2"
    with pytest.raises(ConfigError) as err:
        kubernetes_release("1.39", 2)
    assert str(err.value) == (
        f"{P}:cluster.kubernetes_version: kubernetes_version '1.39' is not supported: use 1.35, 1.36 or 1.37"
    )


def test_empty_fatal_xid_list_is_refused() -> None:
    # The GPU XID alert ORs one comparison per XID: an empty list would render no expression.
    from modules.stackplan.prepare import prepare_cluster

    config = parse_config(_dev(**{"addons.health.fatal_xids": []}))
    with pytest.raises(ConfigError) as err:
        prepare_cluster("dev", config, STACKS)
    assert str(err.value) == (
        f"dev: {P}:addons.health.fatal_xids: empty: list the XIDs that fail a node (Azure's list: github.com/Azure/azurehpc-health-checks)"
    )


def test_the_events_etcd_follows_the_main_etcds_tuning_unless_it_sets_its_own(tmp_path: Path) -> None:
    # One bootstrap.etcd section tuned both clusters; moved to cluster.etcd it still does, so following the
    # "moved to" line changes no events etcd member.
    def tuned(**events: Any) -> tuple[int, int, int]:
        def edit(config: dict[str, Any]) -> None:
            cluster = config[f"{P}:cluster"]
            cluster["etcd"] = {**cluster.get("etcd", {}), "rtt_ms": 200, "quota_backend_gib": 4}
            cluster["events_etcd"] = {**cluster["events_etcd"], **events}

        folder = stack_folder(tmp_path / str(len(events)), "prod-7500", edit)
        ctx = prepare_cluster("prod-7500", load_stack(folder, "prod-7500"), folder).bootstrap
        assert ctx.events_etcd is not None
        return ctx.etcd.heartbeat_ms, ctx.events_etcd.heartbeat_ms, ctx.events_etcd.quota_bytes // 2**30

    assert tuned() == (200, 200, 4)
    assert tuned(rtt_ms=150) == (200, 150, 4)
