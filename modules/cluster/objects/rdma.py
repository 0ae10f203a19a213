"""InfiniBand in pods: Mellanox's RDMA shared device plugin advertises ``rdma/ib`` on GPU nodes.

A pod that requests ``rdma/ib: 1`` gets the node's InfiniBand devices (``/dev/infiniband/uverbs*``,
``rdma_cm``) mounted; GPUs alone give NCCL no InfiniBand path (github.com/Mellanox/k8s-rdma-shared-dev-plugin). The
HCAs are shared, not split: every requesting pod sees all of them, which is what one training pod
per node (all GPUs, all rails) wants. Selection: Mellanox's vendor id and the InfiniBand link type,
so the node's accelerated-networking Ethernet VF (also a Mellanox device) is left out.
Config format and DaemonSet shape: Mellanox/k8s-rdma-shared-dev-plugin README and deployment/k8s/base.
"""

from __future__ import annotations

import json
from typing import Any

from modules.cluster import images
from modules.cluster.objects.common import HEALTH_NS, Obj, gpu_nodes, meta, resources
from modules.cluster.objects.health import host_network, node_agent
from modules.cluster.spec import AddonsSpec

APP = "rdma-shared-device-plugin"
RESOURCE_PREFIX, RESOURCE_NAME = "rdma", "ib"
RESOURCE = f"{RESOURCE_PREFIX}/{RESOURCE_NAME}"
# Pods per node that may hold the shared HCAs at once (more than any node runs: one per GPU).
HCA_MAX = 64
MELLANOX_VENDOR = "15b3"
CONFIG_DIR = "/k8s-rdma-shared-dev-plugin"
WHY = (
    "privileged: the plugin enumerates the host's RDMA devices (netlink, sysfs, /dev/infiniband) and hands "
    "their device nodes to pods; Mellanox's own DaemonSets (k8s-rdma-shared-dev-plugin deployment/k8s/base, "
    "network-operator manifests/state-rdma-shared-device-plugin) run it privileged and document nothing narrower"
)


def plugin_config() -> dict[str, Any]:
    return {
        "periodicUpdateInterval": 300,
        "configList": [
            {
                "resourceName": RESOURCE_NAME,
                "resourcePrefix": RESOURCE_PREFIX,
                "rdmaHcaMax": HCA_MAX,
                # linkType is netlink's encapsulation name: "infiniband" for IPoIB, "ether" for Ethernet.
                "selectors": {"vendors": [MELLANOX_VENDOR], "linkTypes": ["infiniband"]},
            }
        ],
    }


def rdma(spec: AddonsSpec) -> list[Obj]:
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(f"{APP}-config", HEALTH_NS, app=APP),
        "data": {"config.json": json.dumps(plugin_config(), indent=2)},
    }
    # No probe: the plugin serves gRPC on a unix socket only.
    ds = node_agent(
        spec,
        APP,
        WHY,
        host_network(
            {
                "automountServiceAccountToken": False,
                "nodeSelector": gpu_nodes(spec),
                "containers": [
                    {
                        "name": APP,
                        "image": images.RDMA_DEVICE_PLUGIN,
                        "command": ["/bin/k8s-rdma-shared-dp"],
                        "resources": resources("10m", "64Mi", cpu_limit="100m"),
                        # Exception: WHY.
                        "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},
                        "volumeMounts": [
                            {"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                            {"name": "plugins-registry", "mountPath": "/var/lib/kubelet/plugins_registry"},
                            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                            {"name": "dev", "mountPath": "/dev", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "device-plugins",
                        "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
                    },
                    {
                        "name": "plugins-registry",
                        "hostPath": {"path": "/var/lib/kubelet/plugins_registry", "type": "DirectoryOrCreate"},
                    },
                    {"name": "config", "configMap": {"name": f"{APP}-config"}},
                    {"name": "dev", "hostPath": {"path": "/dev", "type": "Directory"}},
                ],
            }
        ),
    )
    return [config, ds]
