"""What a team's training pods need from the node, delivered without host access.

Team pods may not mount host paths (objects/admission.py, ``tenant-pod-security``).
Of what the documented InfiniBand job used from the host, only NCCL's topology file came through a
hostPath (``/opt/microsoft``); the rest never did: the HCAs come from the RDMA device plugin's resource
(objects/rdma.py), GPUs from the NVIDIA device plugin, a large ``/dev/shm`` from an in-memory emptyDir,
and ``IPC_LOCK`` is a capability, not a mount.

The topology files are static data that Azure's HPC image copies from its repository to
``/opt/microsoft/<family>-topo.xml`` and links as ``/opt/microsoft/<family>/topo.xml`` at boot
(Azure/azhpc-images ``components/setup_sku_customizations.sh``, ``components/customizations/nd*.sh``,
``topology/``). The same bytes, pinned at one commit of that repository (``TOPOLOGY_SOURCE``), are a
ConfigMap in each team namespace, mounted at the same path, so ``NCCL_TOPO_FILE`` is unchanged.
"""

from __future__ import annotations

from pathlib import Path

from modules.cluster.objects.common import Obj, meta
from modules.cluster.spec import AddonsSpec, TeamSpec

CONFIGMAP = "nccl-topology"
VOLUME = "topology"
MOUNT = "/opt/microsoft"
TOPOLOGY_DIR = Path(__file__).resolve().parent.parent / "topology"
TOPOLOGY_SOURCE = "https://github.com/Azure/azhpc-images/tree/8e9d055fb9e1f7385da734969793861c447958a1/topology"
# VM size suffix -> the image's topology family (setup_sku_customizations.sh: standard_nd*v4 -> ndv4,
# standard_nd96is*_h[1-2]00_v5 -> ndv5).
FAMILIES = {"v4": "ndv4", "v5": "ndv5"}


def family(vm_size: str) -> str | None:
    return FAMILIES.get(vm_size.lower().rsplit("_", 1)[-1])


def topology_file(vm_size: str) -> str | None:
    """Where NCCL finds the VM family's topology (the image's own path), or None for a family without one."""
    fam = family(vm_size)
    return f"{MOUNT}/{fam}/topo.xml" if fam else None


def _key(fam: str) -> str:
    return f"{fam}-topo.xml"


def nccl_topology(team: TeamSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(CONFIGMAP, team.name, app="teams", annotations={"source": TOPOLOGY_SOURCE}),
        "data": {_key(fam): (TOPOLOGY_DIR / _key(fam)).read_text() for fam in sorted(FAMILIES.values())},
    }


def topology_volume(vm_size: str) -> list[Obj]:
    """The pod volume carrying ``topology_file(vm_size)`` (none for a family without a file)."""
    fam = family(vm_size)
    if fam is None:
        return []
    items = [{"key": _key(fam), "path": f"{fam}/topo.xml"}]
    return [{"name": VOLUME, "configMap": {"name": CONFIGMAP, "items": items}}]


def topology_mount(vm_size: str) -> list[Obj]:
    return [{"name": VOLUME, "mountPath": MOUNT, "readOnly": True}] if family(vm_size) else []


def tenancy(spec: AddonsSpec) -> list[Obj]:
    return [nccl_topology(team) for team in spec.teams]
