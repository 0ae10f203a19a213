"""One file of a host's bundle on disk: written whole or not at all, with its mode and owner.

A reader (etcd, the kubelet, a static pod) must never see half a certificate, so every write goes
to a temporary file in the same directory, is flushed, and is renamed over the old one (rename is
atomic within a file system). The temporary name starts with a dot: the kubelet ignores such files
in its static pod directory (pkg/kubelet/config/file.go globs ``[^.]*`` and skips dot files on
inotify events), so a half-written manifest is never read as a pod.
"""

from __future__ import annotations

import grp
import os
import pwd
import tempfile
from dataclasses import dataclass

ROOT_OWNER = "root:root"


@dataclass(frozen=True)
class OnDisk:
    data: bytes | None
    """None when the file does not exist."""
    mode: int
    uid: int
    gid: int


def ids(owner: str) -> tuple[int, int] | None:
    """``user:group`` as numbers; None while the user or group does not exist yet (a package creates
    it in a later boot step: the file is written as root and handed over on the next run)."""
    user, _, group = owner.partition(":")
    try:
        return pwd.getpwnam(user).pw_uid, grp.getgrnam(group or user).gr_gid
    except KeyError:
        return None


def read(path: str) -> OnDisk:
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            return OnDisk(f.read(), st.st_mode & 0o7777, st.st_uid, st.st_gid)
    except FileNotFoundError:
        return OnDisk(None, 0, 0, 0)


def write(path: str, data: bytes, mode: int, owner: str = ROOT_OWNER) -> bool:
    """Replace ``path`` atomically; False when ``owner`` does not exist yet (written as root instead)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".agk", dir=directory)
    owned = ids(owner)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), mode)
            uid, gid = owned or (0, 0)
            if os.geteuid() == 0:
                os.fchown(f.fileno(), uid, gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dirfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dirfd)  # the rename itself survives a crash
    finally:
        os.close(dirfd)
    return owned is not None
