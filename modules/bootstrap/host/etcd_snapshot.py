"""One scheduled snapshot of the main etcd cluster, taken on this member and uploaded to the cluster's blob
storage with the host's managed identity (stdlib only; Python 3.10; runs as ``agk-etcd-snapshot.service``).

Who uploads: every member's timer fires once per ``every_minutes``, the members' timers offset by
``index * every_minutes / members``. A run first lists the cluster's snapshots; if the newest is younger
than the interval (less half a member's offset, so timer jitter never makes two members upload for one
interval), it skips. So normally one member (the first due) uploads per interval, and when that member is
down or failing, the next member's timer takes over within one offset. No leader election, and the
snapshot load lands on whichever member is due rather than always on the leader. Any member's snapshot
holds the whole keyspace: etcd's "snapshot save" streams the member's committed backend.

Layout: ``<container>/<cluster>/<etcd role>/<UTC time>-<member>.db``: names sort by time across members,
so the newest snapshot is the last name of one List Blobs on ``<cluster>/<etcd role>/``. The lifecycle
policy's prefix is the container (``etcd-backups/``): it expires every snapshot after the retention days.

The events etcd is not backed up (modules/stackplan/config.py ``EtcdConfig.backup``): events expire within an hour
and nothing needs them after a restore, so no timer is rendered there.

Steps: ``etcdctl snapshot save`` from this member's client URL with the health-check client certificate
(any certificate of the etcd CA may read: client-cert-auth without etcd RBAC), then ``snapshot status``
(``etcdutl``, which ships with etcd; 3.6 removed ``etcdctl snapshot status``), which reads the file
back and checks its hash, then the upload (blob.py: MD5 per request and for the whole blob). The result goes
to a node-exporter textfile (Debian's and Ubuntu's package reads ``/var/lib/prometheus/node-exporter``
by default) for the EtcdBackup* alerts.

Where to upload and as whom: the account's blob URL is a deploy-time fact in this member's bundle
(``account_url_file``, written by the host sync from Key Vault like every other file: the cluster stack
knows the account's name only once it knows the subscription); the identity is the host's own, whose
client id ``/etc/agk/host.json`` carries (``host_config``, written once from customData). Neither comes
from VM tags, so nothing outside the bundle and the host's facts decides where snapshots go.

usage: python3 /opt/agk/lib/etcd_snapshot.py [--config /etc/agk/etcd-backup.json] [--force]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

if __package__:
    from . import blob, imds
else:  # /opt/agk/lib on the hosts (python3 /opt/agk/lib/etcd_snapshot.py)
    import blob  # type: ignore[import-not-found,no-redef]
    import imds  # type: ignore[import-not-found,no-redef]

SETTINGS = "/etc/agk/etcd-backup.json"
ACCOUNT_URL_FILE = "/etc/agk/etcd-backup-url"
STAMP = "%Y%m%dT%H%M%SZ"
_NAME = re.compile(r"^(?P<stamp>\d{8}T\d{6}Z)-(?P<member>[A-Za-z0-9-]+)\.db$")
METRIC = "agk_etcd_backup"
UTC = timezone.utc  # noqa: UP017 (datetime.UTC is 3.11; the oldest host image runs 3.10)


class BackupError(Exception):
    """The run failed: one line saying where and why (the unit's journal and the metrics carry it)."""


@dataclass(frozen=True)
class Settings:
    """``/etc/agk/etcd-backup.json`` (rendered from etcd-backup.json.j2), plus optional overrides."""

    cluster: str
    etcd_role: str
    members: int
    every_minutes: int
    container: str
    etcd_config: str
    cacert: str
    cert: str
    key: str
    spool: str
    textfile: str
    account_url_file: str
    """Holds the storage account's blob service URL, ``https://<account>.blob.core.windows.net``."""
    host_config: str
    """The host's facts (``/etc/agk/host.json``): ``client_id`` names its identity for IMDS tokens."""
    etcd_bin: str
    """Where the node image installs etcdctl and etcdutl of the member's own release (layout ``etcd_bin``):
    the programs run from there, whatever else is on PATH (an image may still carry Debian's 3.4 etcdctl)."""
    imds: str = imds.ENDPOINT
    account_url: str | None = None
    """Blob service URL; None: read ``account_url_file`` at each run."""
    client_id: str | None = None
    """The identity's client id; None: ``client_id`` of ``host_config``."""
    cafile: str | None = None
    """A CA to trust besides the system's (the tests' storage emulator)."""

    @classmethod
    def load(cls, path: str) -> Settings:
        try:
            with open(path) as f:
                raw = json.load(f)
            return cls(**raw)
        except (OSError, ValueError, TypeError) as err:
            raise BackupError(f"{path}: {err}: it is rendered by agk (etcd-backup.json.j2)") from None

    @property
    def prefix(self) -> str:
        return f"{self.cluster}/{self.etcd_role}/"


def etcd_config(path: str) -> dict[str, str]:
    """The top-level scalar keys of etcd's YAML config file (what etcd itself reads with --config-file).

    Only ``key: value`` lines at column 0 are read (quotes and trailing comments removed); nested mappings
    (TLS) are skipped. No YAML parser ships with every image's Python.
    """
    out: dict[str, str] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise BackupError(f"etcd config {path}: {err}") from None
    for line in lines:
        m = re.match(r"""^(['"]?)([A-Za-z0-9-]+)\1:\s*(.*?)\s*$""", line)
        if not m:
            continue
        value = m.group(3)
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = json.loads(value)
        elif value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = value[1:-1].replace("''", "'")
        else:
            value = re.sub(r"\s+#.*$", "", value)
        out[m.group(2)] = value
    for key in ("name", "data-dir", "advertise-client-urls", "initial-cluster", "initial-cluster-token"):
        if not out.get(key):
            raise BackupError(f"etcd config {path}: no {key}: is it the file etcd runs with (--config-file)?")
    return out


def _read_fact(path: str, key: str | None, what: str) -> str:
    """A one-line file's text, or one key of a JSON file; BackupError naming the file when absent or empty."""
    try:
        with open(path) as f:
            text = f.read()
        value = json.loads(text)[key] if key else text.strip()
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise BackupError(f"{what} ({path}): {type(err).__name__}: {err}: the host sync writes it") from None
    if not isinstance(value, str) or not value:
        raise BackupError(f"{what} ({path}) is empty: the host sync writes it")
    return value


def storage(s: Settings) -> blob.Container:
    """The snapshot container, as this host's identity."""
    account_url = s.account_url or _read_fact(s.account_url_file, None, "storage account URL")
    client_id = s.client_id or _read_fact(s.host_config, "client_id", "client id of the host's identity")
    return blob.Container(
        account_url, s.container, lambda: imds.token(imds.STORAGE, client_id, endpoint=s.imds), cafile=s.cafile
    )


def blob_name(s: Settings, member: str, taken: float) -> str:
    return f"{s.prefix}{datetime.fromtimestamp(taken, UTC).strftime(STAMP)}-{member}.db"


def taken_at(name: str) -> float | None:
    """When the snapshot named ``name`` was taken (from its name), or None for a name not of this layout."""
    m = _NAME.match(name.rsplit("/", 1)[-1])
    if not m:
        return None
    return datetime.strptime(m.group("stamp"), STAMP).replace(tzinfo=UTC).timestamp()


def snapshots(container: blob.Container, s: Settings) -> list[blob.Blob]:
    """This etcd cluster's snapshots, oldest first."""
    return [b for b in container.list(s.prefix) if taken_at(b.name) is not None]


def due(latest: float | None, now: float, every_minutes: int, members: int) -> bool:
    """Whether this run should upload: no snapshot yet, or the newest is at least an interval old less
    half a member's offset (the next member is due one offset, ``interval / members``, later)."""
    if latest is None:
        return True
    interval = every_minutes * 60
    return now - latest >= interval - interval / (2 * members)


def tool(etcd_bin: str, name: str) -> str:
    """``etcd_bin/name`` (etcdctl, etcdutl); BackupError when the image does not carry it there."""
    path = os.path.join(etcd_bin, name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BackupError(f"{path} is not installed: it ships with etcd in the node image (the versions table's etcd)")
    return path


def etcd_env() -> dict[str, str]:
    # etcdctl 3.3 and older default to the v2 API; 3.4+ ignore the setting unless it says 2.
    return {**os.environ, "ETCDCTL_API": "3"}


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=etcd_env(), check=False)
    except OSError as err:
        raise BackupError(f"{what}: {err}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()
        raise BackupError(f"{what}: exit {done.returncode}: {tail[-1] if tail else 'no output'}")
    return done.stdout


def snapshot_status(etcd_bin: str, path: str) -> dict[str, int]:
    """``snapshot status -w json`` (hash, revision, totalKey, totalSize): reads the whole file and checks it."""
    util = tool(etcd_bin, "etcdutl")  # etcd 3.6 removed etcdctl's snapshot status
    out = _run([util, "snapshot", "status", path, "-w", "json"], f"snapshot status {path}")
    try:
        status = json.loads(out)
        return {k: int(status[k]) for k in ("hash", "revision", "totalKey", "totalSize")}
    except (ValueError, KeyError, TypeError):
        raise BackupError(f"snapshot status {path}: unreadable output {out[:200]!r}") from None


SAVE_TRIES = 3
SAVE_RETRY_S = 30.0
"""A member's bundle sync restarts etcd (renewed certificates) at its own minute, which may be this run's:
the save is tried again after the restart rather than failing the interval."""


def save(
    s: Settings, conf: dict[str, str], dest: str, timeout_s: int, sleep: Callable[[float], None] = time.sleep
) -> None:
    ctl = tool(s.etcd_bin, "etcdctl")
    endpoint = conf["advertise-client-urls"].split(",")[0]
    argv = [
        ctl,
        f"--endpoints={endpoint}",
        f"--cacert={s.cacert}",
        f"--cert={s.cert}",
        f"--key={s.key}",
        "--dial-timeout=10s",
        f"--command-timeout={timeout_s}s",
        "snapshot",
        "save",
        dest,
    ]
    for attempt in range(1, SAVE_TRIES + 1):
        try:
            _run(argv, f"etcdctl snapshot save from {endpoint}")
            return
        except BackupError as err:
            if attempt == SAVE_TRIES:
                raise
            print(f"{err}; trying again in {SAVE_RETRY_S:.0f}s (try {attempt} of {SAVE_TRIES})", flush=True)
            sleep(SAVE_RETRY_S)


@dataclass(frozen=True)
class Outcome:
    uploaded: str | None
    """The blob written, or None when another member's snapshot was fresh."""
    latest: float
    """When the newest snapshot in storage was taken."""
    size: int = 0
    seconds: float = 0.0
    revision: int = 0
    keys: int = 0


def run(
    s: Settings, *, now: float | None = None, force: bool = False, container: blob.Container | None = None
) -> Outcome:
    """List, maybe snapshot and upload; raises BackupError with the reason."""
    now = time.time() if now is None else now
    conf = etcd_config(s.etcd_config)
    member = conf["name"]
    container = container or storage(s)
    held = snapshots(container, s)
    latest = taken_at(held[-1].name) if held else None
    if not force and not due(latest, now, s.every_minutes, s.members):
        assert latest is not None
        return Outcome(None, latest)
    os.makedirs(s.spool, mode=0o700, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=s.spool) as work:
        path = os.path.join(work, "snapshot.db")
        save(s, conf, path, timeout_s=max(600, s.every_minutes * 60))
        status = snapshot_status(s.etcd_bin, path)
        name = blob_name(s, member, now)
        size = os.path.getsize(path)
        container.put(
            name,
            path,
            {
                "member": member,
                "revision": str(status["revision"]),
                "totalkeys": str(status["totalKey"]),
                "hash": str(status["hash"]),
            },
        )
    return Outcome(name, now, size, time.monotonic() - started, status["revision"], status["totalKey"])


def _previous(path: str) -> dict[str, float]:
    """This member's last metrics (a failed run carries the newest known snapshot time forward)."""
    out: dict[str, float] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
        for line in lines:
            m = re.match(rf"^({METRIC}_[a-z_]+)\{{[^}}]*\}} (\S+)$", line)
            if m:
                out[m.group(1)] = float(m.group(2))
    except (OSError, ValueError):
        pass
    return out


def write_metrics(s: Settings, member: str, now: float, outcome: Outcome | None) -> None:
    """The textfile node-exporter serves: written beside it and renamed, so a scrape never sees half."""
    before = _previous(s.textfile)
    values: dict[str, tuple[str, float | None]] = {
        "latest_snapshot_timestamp_seconds": (
            "When the newest snapshot of this etcd cluster in blob storage was taken (as this member last saw it).",
            outcome.latest if outcome else before.get(f"{METRIC}_latest_snapshot_timestamp_seconds"),
        ),
        "last_run_timestamp_seconds": ("When this member's snapshot timer last ran.", now),
        "last_run_success": (
            "1 if this member's last run listed storage and, when due, uploaded; else 0.",
            1.0 if outcome else 0.0,
        ),
        "last_upload_bytes": (
            "Size of the last snapshot this member uploaded.",
            float(outcome.size) if outcome and outcome.uploaded else before.get(f"{METRIC}_last_upload_bytes"),
        ),
        "last_upload_duration_seconds": (
            "Seconds this member's last upload took, snapshot included.",
            outcome.seconds if outcome and outcome.uploaded else before.get(f"{METRIC}_last_upload_duration_seconds"),
        ),
    }
    labels = f'etcd_role="{s.etcd_role}",member="{member}"'
    lines = []
    for name, (help_text, value) in values.items():
        if value is None:
            continue
        lines += [
            f"# HELP {METRIC}_{name} {help_text}",
            f"# TYPE {METRIC}_{name} gauge",
            f"{METRIC}_{name}{{{labels}}} {value:.17g}",
        ]
    folder = os.path.dirname(s.textfile)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".agk_etcd_backup.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, s.textfile)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Snapshot this etcd member to blob storage when one is due.")
    parser.add_argument("--config", default=SETTINGS, help=f"settings (default {SETTINGS})")
    parser.add_argument("--force", action="store_true", help="upload even if a fresh snapshot exists")
    args = parser.parse_args(argv)
    now = time.time()
    try:
        s = Settings.load(args.config)
    except BackupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    member = "unknown"
    try:
        member = etcd_config(s.etcd_config)["name"]
        outcome = run(s, now=now, force=args.force)
    except (BackupError, blob.BlobError, imds.TokenError) as err:
        write_metrics(s, member, now, None)
        print(f"error: etcd snapshot of {member}: {err}", file=sys.stderr)
        return 1
    write_metrics(s, member, now, outcome)
    if outcome.uploaded:
        print(
            f"uploaded {outcome.uploaded}: {outcome.size} bytes, revision {outcome.revision}, "
            f"{outcome.keys} keys, {outcome.seconds:.1f} s"
        )
    else:
        stamp = datetime.fromtimestamp(outcome.latest, UTC).strftime(STAMP)
        print(f"skipped: the newest snapshot ({stamp}) is fresh; the next member due takes the next one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
