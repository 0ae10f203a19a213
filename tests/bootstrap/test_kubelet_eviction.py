"""The kubelet keeps every default hard-eviction signal: a KubeletConfiguration that sets some
evictionHard signals drops the defaults of the others (kubernetes.io node-pressure eviction: the
defaults "will only be set if none of the parameters is changed").
"""

from __future__ import annotations

import yaml

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import bundle

# kubernetes/kubernetes pkg/kubelet/eviction/defaults_linux.go (DefaultEvictionHard, Linux).
KUBELET_DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
    "imagefs.inodesFree": "5%",
}


def _percent(value: str) -> float:
    return float(value.removesuffix("%"))


def test_pool_kubelets_keep_every_default_eviction_signal(ctx: BootstrapContext) -> None:
    for pool in ctx.pools:
        config = yaml.safe_load(bundle(ctx, pool.role, pool.name).file("kubelet/config.yaml").content)
        hard = config["evictionHard"]
        assert set(KUBELET_DEFAULT_EVICTION_HARD) <= set(hard), pool.name
        # The inode signals are the defaults; none is switched off (0%) by accident.
        for signal in ("nodefs.inodesFree", "imagefs.inodesFree"):
            assert hard[signal] == KUBELET_DEFAULT_EVICTION_HARD[signal], (pool.name, signal)
        assert all(_percent(v) > 0 for k, v in hard.items() if v.endswith("%")), pool.name
