"""`agk render`: every file a node or the cluster receives, written for inspection and the real tools.

``DIR/nodes/<role>/user-data.yaml`` is the cloud-config of the role's first host (or pool) with
the files it installs beside it (``etcd.conf.yml``, ``rules/*.yml``, ``iptables/mangle.rules``,
...); further hosts and pools of the role go to ``DIR/nodes/<role>/by-name/<name>/``. Private
keys never leave a deploy: offline user-data carries named placeholders where ClusterPki's PEMs go.
``DIR/manifests/NNN-<kind>-<name>.yaml`` holds every Kubernetes object, one per file.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import yaml

from infra.addresses import cluster_addresses, plan_stack
from infra.bootstrap import bootstrap_context
from infra.config import StackConfig
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.bootstrap.userdata import placeholder_secrets, render_user_data
from modules.errors import AgkError


def render_nodes(ctx: BootstrapContext, out: Path) -> list[Path]:
    written: list[Path] = []
    for role in ROLES:
        for i, name in enumerate(names(ctx, role)):
            node = bundle(ctx, role, name)
            where = out / "nodes" / role if i == 0 else out / "nodes" / role / "by-name" / name
            written += _write_node(ctx, node, where)
    return written


def _write_node(ctx: BootstrapContext, node: NodeBundle, where: Path) -> list[Path]:
    files = {"user-data.yaml": render_user_data(ctx, node, placeholder_secrets(node))}
    files.update({f.rel: f.content for f in node.files})
    paths = []
    for rel, text in files.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


def _manifest_objects(config: StackConfig) -> list[dict[str, Any]] | None:
    """The cluster add-ons' objects, when modules.cluster is present in this checkout."""
    if importlib.util.find_spec("modules.cluster.manifests") is None:
        return None
    from modules.cluster.manifests import render_manifests
    from modules.cluster.spec import PoolFacts, addons_spec
    from modules.sizing.skus import sku

    cluster = config.cluster
    assert cluster is not None
    pools = {
        name: PoolFacts(name, p.vm_size, sku(p.vm_size).gpus, p.max_nodes or p.nodes, p.team)
        for name, p in cluster.gpu_pools.items()
    }
    spec = addons_spec(cluster.name, cluster.kubernetes_version, cluster.label_domain, pools, config.addons)
    return [dict(o) for o in render_manifests(spec)]


def render_manifests_dir(config: StackConfig, out: Path) -> list[Path]:
    objs = _manifest_objects(config)
    if objs is None:
        return []
    folder = out / "manifests"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, obj in enumerate(objs):
        meta = obj.get("metadata", {})
        path = folder / f"{i:03d}-{str(obj['kind']).lower()}-{meta.get('name', 'unnamed')}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        paths.append(path)
    return paths


def run(*, stack: str, out: Path, stacks_dir: Path) -> int:
    plan = plan_stack(stacks_dir, stack)
    if plan.config.kind != "cluster":
        raise AgkError(f"{stack}: a {plan.config.kind} stack boots no nodes: render a cluster stack")
    ctx = bootstrap_context(plan.config, cluster_addresses(plan))
    if out.exists() and not out.is_dir():
        raise AgkError(f"--out {out}: not a directory: name a directory to write into")
    nodes = render_nodes(ctx, out)
    manifests = render_manifests_dir(plan.config, out)
    print(f"{stack}: wrote {len(nodes)} node files and {len(manifests)} manifests under {out}")
    return 0
