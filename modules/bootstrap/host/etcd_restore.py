"""Rebuild this etcd member from a snapshot in the cluster's blob storage (stdlib only; Python 3.10).

An operator runs it as root on each member of the main etcd cluster (docs/etcd.md, "etcd backup and
restore"): only there are both the storage account (private endpoint only, so inside the VNet) and an
identity allowed to read the snapshots (each member's, Storage Blob Data Contributor on the container).

  python3 /opt/agk/lib/etcd_restore.py list
  python3 /opt/agk/lib/etcd_restore.py restore [--snapshot NAME|latest] [--yes]

``restore`` downloads the snapshot through the same blob client the timer uploads with (length and
Content-MD5 checked), verifies it (``snapshot status``), stops the snapshot timer and etcd, restores
into a new data directory with this member's name, peer URL and the cluster's member list and token
read from the etcd config file etcd itself runs with, swaps that directory in (the old one is kept
beside it as ``<data-dir>.before-restore-<time>``) and starts etcd without waiting for quorum (the other
members come up as the operator restores them). Without ``--yes`` it only says what it would do.

etcd's disaster-recovery guide: "all members should restore using the same snapshot", and a restore
"must start a new logical cluster" (new member and cluster IDs). So the runbook stops the snapshot timer
on every member first (then ``latest`` names the same snapshot everywhere) and restores every member.
The restore is etcdutl's, of the same release as the member (etcd 3.6 removed ``etcdctl snapshot restore``,
and an older etcdctl's restore leaves the snapshot's member list in the v3 backend, which 3.6 reads
membership from: the restored member then looks for the old cluster's peers; seen with Debian's etcdctl
3.4 against etcd 3.6.16). It bumps the revision past anything the old cluster wrote and marks it compacted
(``--bump-revision``/``--mark-compacted``, etcd-io/etcd#16029; etcd's v3.6 recovery guide, "Restoring
with revision bump"), so Kubernetes watchers see revisions move forward, get "compacted" and relist. The
runbook then restarts every watcher anyway (``WATCHERS``), as Kubernetes' guide recommends
(kubernetes.io/docs/tasks/administer-cluster/configure-upgrade-etcd, "Restoring an etcd cluster").
etcdutl runs from the settings' ``etcd_bin`` (the image's release), never from PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime

if __package__:
    from . import blob, etcd_snapshot, imds
    from .etcd_snapshot import UTC, BackupError, Settings
else:  # /opt/agk/lib on the hosts
    import blob  # type: ignore[import-not-found,no-redef]
    import etcd_snapshot  # type: ignore[import-not-found,no-redef]
    import imds  # type: ignore[import-not-found,no-redef]
    from etcd_snapshot import UTC, BackupError, Settings  # type: ignore[no-redef]

UNITS_BEFORE = ("agk-etcd-snapshot.timer", "agk-etcd-snapshot.service", "etcd.service")
"""Stopped before the data directory changes (the timer first, so no snapshot of a half-restored member)."""
BUMP_REVISION = 1_000_000_000
"""Revisions etcdutl adds on restore: more than a cluster writes between two snapshots."""
WATCHERS = (
    "then restart every watcher (docs/etcd.md, etcd backup and restore, step 6): the API servers, kube-controller-manager, "
    "kube-scheduler, the gang scheduler and kube-system's Deployments, every DaemonSet, and on every node the "
    "kubelet and kube-proxy"
)
"""What the operator does once every member is restored: every client holding a watch or a cache starts afresh
(Kubernetes' "Operating etcd clusters", Restoring an etcd cluster)."""


def choose(container: blob.Container, s: Settings, name: str) -> blob.Blob:
    """The snapshot ``name`` (a full blob name, its last part, or ``latest``) of this etcd cluster."""
    held = etcd_snapshot.snapshots(container, s)
    if not held:
        raise BackupError(f"no snapshots under {s.container}/{s.prefix}: nothing to restore")
    if name == "latest":
        return held[-1]
    for b in held:
        if name in (b.name, b.name.rsplit("/", 1)[-1]):
            return b
    raise BackupError(f"no snapshot {name!r} under {s.container}/{s.prefix}: `list` shows the names held")


def fetch(container: blob.Container, snapshot: blob.Blob, dest: str, etcd_bin: str) -> dict[str, int]:
    """Download ``snapshot`` to ``dest`` and check it: returns its ``snapshot status``."""
    got = container.get(snapshot.name, dest)
    status = etcd_snapshot.snapshot_status(etcd_bin, dest)
    recorded = got.metadata.get("revision")
    if recorded and int(recorded) != status["revision"]:
        raise BackupError(f"{snapshot.name}: revision {status['revision']} is not the {recorded} recorded at upload")
    return status


def rebuild(config_path: str, snapshot_file: str, *, etcd_bin: str, stamp: str, owner: str | None = "etcd") -> str:
    """Restore ``snapshot_file`` as this member (from etcd's config file) into a new data directory and
    swap it in; returns the directory kept aside (empty string when there was none)."""
    conf = etcd_snapshot.etcd_config(config_path)
    data = conf["data-dir"].rstrip("/")
    staged, kept = f"{data}.restore-{stamp}", f"{data}.before-restore-{stamp}"
    if os.path.exists(staged):
        shutil.rmtree(staged)
    argv = [
        # etcdutl's restore, the only one etcd 3.6 ships, of the member's own release (the module docstring).
        etcd_snapshot.tool(etcd_bin, "etcdutl"),
        "snapshot",
        "restore",
        snapshot_file,
        f"--name={conf['name']}",
        f"--initial-cluster={conf['initial-cluster']}",
        f"--initial-cluster-token={conf['initial-cluster-token']}",
        f"--initial-advertise-peer-urls={conf['initial-advertise-peer-urls']}",
        f"--data-dir={staged}",
        f"--bump-revision={BUMP_REVISION}",
        "--mark-compacted",
    ]
    etcd_snapshot._run(argv, f"snapshot restore of {conf['name']}")
    if os.path.exists(data):
        os.rename(data, kept)
    else:
        kept = ""
    os.rename(staged, data)
    os.chmod(data, 0o700)
    if owner and os.geteuid() == 0:
        for root, dirs, files in os.walk(data):
            for entry in (root, *(os.path.join(root, n) for n in (*dirs, *files))):
                shutil.chown(entry, owner, owner)
    return kept


def _systemctl(*args: str) -> None:
    done = subprocess.run(["systemctl", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise BackupError(f"systemctl {' '.join(args)}: {done.stderr.strip() or done.returncode}")


def restore(
    s: Settings,
    name: str,
    *,
    yes: bool,
    systemctl: Callable[..., None] = _systemctl,
    out: Callable[[str], None] = print,
    owner: str | None = "etcd",
) -> int:
    conf = etcd_snapshot.etcd_config(s.etcd_config)
    container = etcd_snapshot.storage(s)
    snapshot = choose(container, s, name)
    taken = etcd_snapshot.taken_at(snapshot.name) or 0.0
    out(
        f"snapshot {snapshot.name}: taken {datetime.fromtimestamp(taken, UTC):%Y-%m-%d %H:%M:%S} UTC by "
        f"{snapshot.metadata.get('member', '?')}, revision {snapshot.metadata.get('revision', '?')}, {snapshot.size} bytes"
    )
    out(f"member {conf['name']}: data directory {conf['data-dir']}; cluster {conf['initial-cluster']}")
    if not yes:
        out("dry run: add --yes to stop etcd here and restore this member (restore every member from this snapshot)")
        return 0
    os.makedirs(s.spool, mode=0o700, exist_ok=True)
    dest = os.path.join(s.spool, snapshot.name.rsplit("/", 1)[-1])
    status = fetch(container, snapshot, dest, s.etcd_bin)
    out(f"downloaded and checked: revision {status['revision']}, {status['totalKey']} keys, hash {status['hash']}")
    systemctl("stop", *UNITS_BEFORE)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = rebuild(s.etcd_config, dest, etcd_bin=s.etcd_bin, stamp=stamp, owner=owner)
    os.unlink(dest)
    if kept:
        out(f"previous data directory kept as {kept}: remove it once the cluster is healthy")
    # Not waiting: etcd reports started only once a quorum of restored members is up (Type=notify).
    systemctl("start", "--no-block", "etcd.service")
    # The snapshot timer stays stopped until every member is restored (the runbook's last step starts
    # it): a snapshot of a half-restored cluster would become the "latest" a later member restores.
    out(f"{conf['name']} restored; etcd starting. Restore the other members from {snapshot.name}, then check health")
    out(WATCHERS)
    out("then, on every member: sudo systemctl start agk-etcd-snapshot.timer; sudo rm /etc/agk/hold")
    with open(os.path.join(s.spool, "last-restore.json"), "w") as f:
        json.dump({"snapshot": snapshot.name, "at": stamp, "revision": status["revision"], "kept": kept}, f)
    return 0


def list_snapshots(s: Settings, out: Callable[[str], None] = print) -> int:
    held = etcd_snapshot.snapshots(etcd_snapshot.storage(s), s)
    for b in held:
        taken = etcd_snapshot.taken_at(b.name) or 0.0
        out(
            f"{b.name}  {datetime.fromtimestamp(taken, UTC):%Y-%m-%d %H:%M:%S}Z  {b.size:>12} bytes  "
            f"revision {b.metadata.get('revision', '?')}  by {b.metadata.get('member', '?')}"
        )
    out(f"{len(held)} snapshots" + (f"; latest: {held[-1].name}" if held else ""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List the etcd snapshots in blob storage, or restore this member.")
    parser.add_argument("--config", default=etcd_snapshot.SETTINGS, help="settings (default %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the snapshots of this etcd cluster, oldest first")
    r = sub.add_parser("restore", help="rebuild this member from a snapshot (every member, same snapshot)")
    r.add_argument("--snapshot", default="latest", help="blob name or its last part (default: latest)")
    r.add_argument("--yes", action="store_true", help="do it (otherwise only say what would happen)")
    args = parser.parse_args(argv)
    try:
        s = Settings.load(args.config)
        if args.command == "list":
            return list_snapshots(s)
        return restore(s, args.snapshot, yes=args.yes)
    except (BackupError, blob.BlobError, imds.TokenError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
