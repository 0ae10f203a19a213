"""The first thing a host runs (cloud-init's per-boot script, until BOOTED exists): fetch its bundle,
install its host programs, and hand over to the bundle's sync program, which writes the files and
runs the boot steps.

This file, imds.py, vault.py, bundle.py and files.py are the only programs in customData, and
customData never changes on a VM (Azure refuses it), so they stay small and their contract stays
put: read /etc/agk/host.json, fetch the secret it names, keep going with whatever sync.py the
bundle brings, which must write BOOTED when its boot is done. Everything else comes from Key Vault.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

if __package__:  # the toolkit imports this as modules.bootstrap.host.boot
    from . import bundle, files, imds, vault
else:  # a host runs it from /opt/agk/lib
    import bundle  # type: ignore[import-not-found, no-redef]
    import files  # type: ignore[import-not-found, no-redef]
    import imds  # type: ignore[import-not-found, no-redef]
    import vault  # type: ignore[import-not-found, no-redef]

HOST_CONFIG = "/etc/agk/host.json"
LIB = "/opt/agk/lib"
"""Where the host programs live (imported from there: ``sys.path`` gets this directory)."""
FETCHED = "/run/agk/bundle"
"""The value boot fetched, handed to ``sync.py boot`` so the first boot reads the vault once."""
BOOT_DEADLINE_S = 45 * 60.0
"""How long a new host waits for its secret: Azure RBAC may take 30 minutes to apply a new grant."""
BOOTED = "/var/lib/agk/booted"
"""``sync.py boot`` writes it after the boot steps; until then every boot runs this (userdata.PER_BOOT)."""
STAGE0 = ("boot.py", "bundle.py", "files.py", "imds.py", "vault.py")
"""The programs customData carries (one fact: userdata.py ships exactly these)."""


@dataclass(frozen=True)
class HostConfig:
    """What a host knows before its bundle (/etc/agk/host.json, from customData): fixed for its life."""

    role: str
    name: str
    cluster: str
    vault: str
    """The vault's URI, ``https://<name>.vault.azure.net/``."""
    secret: str
    """The name of this host's (or pool's) bundle secret."""
    client_id: str
    """The client id of the identity that may read it (IMDS needs it when a VM has several)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def load(cls, path: str) -> HostConfig:
        with open(path) as f:
            return cls(**json.load(f))


PARTS_RETRY_S = 30.0


def fetch(
    host: HostConfig,
    *,
    deadline_s: float,
    imds_endpoint: str = imds.ENDPOINT,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = lambda line: log_line(line),
) -> str:
    """The bundle's value from every part of the host's secret, retried until ``deadline_s`` (a
    ``pulumi up`` writing the parts while they are read yields parts of two versions: read again)."""
    end = clock() + deadline_s

    def read(name: str) -> str:
        left = max(end - clock(), 0.0)
        return vault.get_secret(
            host.vault,
            name,
            host.client_id,
            deadline_s=left,
            imds_endpoint=imds_endpoint,
            sleep=sleep,
            clock=clock,
            log=log,
        )

    while True:
        try:
            return bundle.join(read, host.secret)
        except bundle.BundleError as err:
            if clock() + PARTS_RETRY_S > end:
                raise
            log(f"{err}; reading again in {PARTS_RETRY_S:.0f}s")
            sleep(PARTS_RETRY_S)


def log_line(line: str) -> None:
    print(f"agk-boot: {line}", file=sys.stderr, flush=True)


def run(
    host: HostConfig,
    *,
    root: str = "/",
    imds_endpoint: str = imds.ENDPOINT,
    deadline_s: float = BOOT_DEADLINE_S,
    hand_over: Callable[[Sequence[str]], None] | None = None,
) -> None:
    """Fetch, install the bundle's host programs, then run its ``sync.py boot``."""
    value = fetch(host, deadline_s=deadline_s, imds_endpoint=imds_endpoint)
    doc = bundle.decode(value)
    lib = root.rstrip("/") + LIB
    for f in doc["files"]:
        if f["path"].startswith(LIB + "/"):
            files.write(root.rstrip("/") + f["path"], f["content"].encode(), int(f["mode"], 8), f["owner"])
    fetched = root.rstrip("/") + FETCHED
    files.write(fetched, value.encode(), 0o600)
    log_line(f"bundle of {host.role} {host.name} fetched from {host.secret}; handing over to sync.py")
    argv = [sys.executable, f"{lib}/sync.py", "boot", "--root", root, "--bundle-file", fetched]
    (hand_over or _exec)(argv)


def _exec(argv: Sequence[str]) -> None:
    os.execv(argv[0], list(argv))


def main(argv: Sequence[str] = ()) -> int:
    try:
        run(HostConfig.load(HOST_CONFIG))
    except (vault.VaultError, bundle.BundleError, OSError, ValueError) as err:
        log_line(f"no bundle: {err}")
        return 1
    return 0  # not reached: run() replaces this process with sync.py


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
