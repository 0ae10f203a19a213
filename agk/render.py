"""`agk render`: every file a node or the cluster receives, written for inspection and the real tools.

``DIR/nodes/<role>/user-data.yaml`` is the cloud-config of the role's first host (or pool): the small
stable bootstrap, with named placeholders for what only a deploy knows (the vault, the secret, the
identity). ``bundle.json`` beside it is the document its Key Vault secret holds (every file, the boot
steps, the restart map), and the files it installs are written out too (``etcd.conf.yml``,
``rules/*.yml``, ``iptables/mangle.rules``, ...): the layout CONTRACTS.md names. Every host and pool
of the role, the first included, is also at ``DIR/nodes/<role>/by-name/<name>/``, so one pattern
(``nodes/*/by-name/*/``) finds each host exactly once. Private keys never leave a deploy: the bundle
carries named placeholders where ClusterPki's PEMs go. ``DIR/manifests/NNN-<kind>-<name>.yaml``
holds every Kubernetes object, one per file.

File names are portable: no ``:`` (RBAC names like ``system:coredns``; Windows refuses it and
tools read ``a:b`` as host:path) or any other character outside letters, digits, ``.``, ``_``
and ``-``. A render replaces ``DIR/nodes`` and ``DIR/manifests`` whole: a file of an object or
host that is gone must not stay behind for ``kubectl apply -f DIR/manifests`` to apply.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from agk.plan.engine import check_out
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.delivery import document, placeholder_facts, placeholder_pems
from modules.bootstrap.roles import ROLES, NodeBundle, bundle, names
from modules.bootstrap.userdata import offline_host, render_user_data
from modules.cluster.manifests import render_manifests
from modules.cluster.spec import AddonsSpec
from modules.errors import AgkError
from modules.stackplan.config import AddonsStack, load_stack
from modules.stackplan.prepare import prepare_cluster

OWNED = ("nodes", "manifests")
"""The folders under ``--out`` that a render writes, and replaces whole."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_name(text: str) -> str:
    """``text`` as one portable path segment (``system:coredns`` -> ``system_coredns``)."""
    safe = _UNSAFE.sub("_", text).strip(".")
    return safe or "unnamed"


def _portable(rel: str) -> str:
    return "/".join(file_name(part) for part in rel.split("/"))


def render_nodes(ctx: BootstrapContext, out: Path) -> list[Path]:
    written: list[Path] = []
    for role in ROLES:
        for i, name in enumerate(names(ctx, role)):
            node = bundle(ctx, role, name)
            homes = [out / "nodes" / role / "by-name" / file_name(name)]
            if i == 0:
                homes.insert(0, out / "nodes" / role)
            for where in homes:
                written += _write_node(ctx, node, where)
    return written


def _write_node(ctx: BootstrapContext, node: NodeBundle, where: Path) -> list[Path]:
    doc = document(node, placeholder_pems(node), placeholder_facts(ctx, node))
    contents = {f["path"]: f["content"] for f in doc["files"]}
    files = {
        "user-data.yaml": render_user_data(ctx, node, offline_host(ctx, node)),
        "bundle.json": json.dumps(doc, indent=2, sort_keys=True) + "\n",
    }
    files.update({f.rel: contents[f.path] for f in node.files})
    paths = []
    for rel, text in files.items():
        path = where / _portable(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    return paths


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by several objects out in full each time: no &id001/*id001 anchors,
    which kubectl and reviewers read as noise and some tools do not resolve."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_PlainDumper, sort_keys=False)


def _manifest_objects(spec: AddonsSpec) -> list[dict[str, Any]]:
    """The cluster add-ons' objects: what the `<cluster>-addons` stack deploys."""
    return [dict(o) for o in render_manifests(spec)]


def render_manifests_dir(spec: AddonsSpec, out: Path) -> list[Path]:
    objs = _manifest_objects(spec)
    folder = out / "manifests"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, obj in enumerate(objs):
        meta = obj.get("metadata", {})
        path = folder / file_name(f"{i:03d}-{str(obj['kind']).lower()}-{meta.get('name', 'unnamed')}.yaml")
        path.write_text(dump_yaml(obj))
        paths.append(path)
    return paths


def run(*, stack: str, out: Path, stacks_dir: Path) -> int:
    check_out(out, {folder: () for folder in OWNED})
    config = load_stack(stacks_dir, stack)
    if isinstance(config, AddonsStack):
        # The add-ons stack deploys the cluster stack's objects: render that cluster.
        stack = config.addons_stack.cluster_stack
        config = load_stack(stacks_dir, stack)
    if config.kind != "cluster":
        raise AgkError(f"a {config.kind} stack boots no nodes: render a cluster stack", stack=stack)
    prep = prepare_cluster(stack, config, stacks_dir)
    for folder in OWNED:  # every check has passed: what is left to fail is the disk
        if (out / folder).is_dir():
            shutil.rmtree(out / folder)
    nodes = render_nodes(prep.bootstrap, out)
    manifests = render_manifests_dir(prep.addons, out)
    print(f"{stack}: wrote {len(nodes)} node files and {len(manifests)} manifests under {out}")
    return 0
