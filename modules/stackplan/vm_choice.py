"""Recommended vs chosen VM sizes for a cluster stack (the plan shows both)."""

from __future__ import annotations

from dataclasses import dataclass

from modules.config_model import PROJECT
from modules.errors import ConfigError
from modules.stackplan.config import ClusterConfig
from modules.stackplan.pools import ClusterPools
from modules.vm_sizing import recommend
from modules.vm_sizing.skus import sku


@dataclass(frozen=True)
class SizeChoice:
    role: str
    recommended: str
    chosen: str
    rule: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {
            "role": self.role,
            "recommended": self.recommended,
            "chosen": self.chosen,
            "rule": self.rule,
            "source": self.source,
        }


def _check(vm_size: str, where: str) -> None:
    try:
        sku(vm_size)
    except ConfigError as err:
        raise ConfigError(f"{PROJECT}:{where}: {err}") from None


def _choice(rec: recommend.Recommendation, override: str | None, where: str) -> SizeChoice:
    chosen = override or rec.vm_size
    _check(chosen, where)
    return SizeChoice(rec.role, rec.vm_size, chosen, rec.rule, rec.source)


def size_cluster(cluster: ClusterConfig, pools: ClusterPools) -> dict[str, SizeChoice]:
    """Sizes per control-plane role for the cluster's sizing step (``pools.sizing_nodes``)."""
    nodes = pools.sizing_nodes
    out = {
        "apiserver": _choice(recommend.apiserver(nodes), cluster.api_servers.vm_size, "cluster.api_servers.vm_size"),
        "etcd": _choice(
            recommend.etcd(nodes, local_nvme=cluster.etcd.storage == "local-nvme"),
            cluster.etcd.vm_size,
            "cluster.etcd.vm_size",
        ),
        "prometheus": _choice(
            recommend.prometheus(
                nodes, pools.sizing_pods, cluster.prometheus.shards, cluster.prometheus.query_max_samples
            ),
            cluster.prometheus.vm_size,
            "cluster.prometheus.vm_size",
        ),
    }
    if cluster.events_etcd is not None:
        rec = recommend.etcd(nodes, local_nvme=cluster.events_etcd.storage == "local-nvme")
        out["events-etcd"] = _choice(
            recommend.Recommendation("events-etcd", rec.vm_size, rec.vcpus, rec.memory_gib, rec.rule, rec.source),
            cluster.events_etcd.vm_size,
            "cluster.events_etcd.vm_size",
        )
    for key, group in (("etcd", cluster.etcd), ("events_etcd", cluster.events_etcd)):
        if group is None or group.storage != "premium-ssd-v2":
            continue
        iops = group.disk_iops or recommend.etcd_iops(nodes)
        if iops > 500 * group.disk_gib:
            raise ConfigError(
                f"{PROJECT}:cluster.{key}.disk_gib: {group.disk_gib} GiB allows at most {500 * group.disk_gib:,} "
                f"IOPS on Premium SSD v2 but {iops:,} are planned: raise disk_gib to {-(-iops // 500)}"
            )
    _check(cluster.system_pool.vm_size, "cluster.system_pool.vm_size")
    for name, pool in cluster.gpu_pools.items():
        _check(pool.vm_size, f"cluster.gpu_pools.{name}.vm_size")
    _check(cluster.nat.vm_size, "cluster.nat.vm_size")
    return out
