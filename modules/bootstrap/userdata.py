"""A host's customData: the small cloud-config that stays the same for the machine's whole life (pure).

Azure refuses every change to a single VM's customData (PropertyChangeNotAllowed), and a scale set's
new customData reaches only new or reimaged instances (virtual-machines/custom-data, FAQ). So it
holds only what cannot change without replacing the machine anyway, and nothing secret (anyone who
can read the VM model can read it):

- the host's facts, /etc/agk/host.json: role, host or pool name, the vault's URI, the name of its
  bundle secret, the client id of the identity that may read it;
- the host name and the data disk's partition, file system and mount (cloud-init's disk modules);
- the stage-0 programs (``boot.STAGE0``) and a cloud-init per-boot script that runs boot.py until the
  host has booted once (``PER_BOOT``): boot.py fetches the bundle and hands over to its sync.py;
  the files, the boot steps and the restart map all come from Key Vault.

Why the boot steps are in the bundle too: a toolkit release that adds a package or reorders a step
would otherwise change every VM's customData, which Azure refuses; in the bundle it changes what new
instances run, and nothing on running ones (steps run once per instance).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from dataclasses import dataclass
from importlib import resources

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.host.boot import BOOTED, HOST_CONFIG, LIB, STAGE0, HostConfig
from modules.bootstrap.roles import NodeBundle
from modules.bootstrap.templating import render
from modules.errors import AgkError

AZURE_CUSTOM_DATA_LIMIT = 65_535
"""Azure's customData limit: 64 KB of base64 text (osProfile.customData)."""
BOOT_COMMAND = f"/usr/bin/python3 {LIB}/boot.py"
PER_BOOT = "/var/lib/cloud/scripts/per-boot/agk-boot"
"""cloud-init runs every script here on every boot, in its final stage ("Any scripts in the
scripts/per-boot directory on the datasource will be run every time the system boots",
cloudinit/config/cc_scripts_per_boot.py; /var/lib/cloud is cloud-init's cpath), the first boot included
(write_files runs earlier, in the init stage). The script runs boot.py until ``sync.py boot`` has written
``boot.BOOTED`` (after the boot steps, whatever their outcome: a failed step stays failed, since a
half-booted host must not join on a reboot). A per-instance runcmd would run boot.py once, and a host
whose first fetch missed its window (a grant not yet applied, the vault's private DNS not yet linked)
would never boot; this way a restart boots it. The marker is a contract between stage 0, which never
changes, and the bundle's sync.py, which does: a sync.py that stopped writing it would boot the host
again on every reboot."""
STAGE0_SHA256 = "d676df0390217be13844ba5b7564261e597e12e123ec2d105b9ddae6768bd4a7"
"""sha256 of stage 0 (its programs and per-boot script) as customData carries it (``stage0_digest``).
Azure refuses to change an existing VM's customData (PropertyChangeNotAllowed; pulumi-azure-native#577),
so editing one of host.boot.STAGE0 or the per-boot script makes the next `pulumi up` fail on every
fixed host (`agk plan --base` shows it refused). Change them only as a decision, with this digest:
running hosts get the new copies from their bundles anyway (sync writes the bundle's /opt/agk/lib),
so stage 0 needs to change only when its contract does."""


@dataclass(frozen=True)
class _WriteFile:
    path: str
    mode: str
    content: str


def offline_host(ctx: BootstrapContext, node: NodeBundle) -> HostConfig:
    """The host facts `agk render` shows: what only a deploy knows is named, not invented."""
    return HostConfig(
        role=node.role,
        name=node.name,
        cluster=ctx.cluster,
        vault="https://VAULT-NAME.vault.azure.net/",
        secret=f"SECRET-NAME-OF-{node.name}",
        client_id="CLIENT-ID-OF-ITS-IDENTITY",
    )


def stage0_digest() -> str:
    h = hashlib.sha256()
    for f in stage0_files():
        h.update(f.path.encode() + b"\0" + f.content.encode() + b"\0")
    return h.hexdigest()


def stage0_files() -> list[_WriteFile]:
    """The stage-0 programs, then the per-boot script that runs them."""
    host = resources.files("modules.bootstrap.host")
    programs = [_WriteFile(f"{LIB}/{name}", "0644", host.joinpath(name).read_text()) for name in STAGE0]
    return [*programs, _WriteFile(PER_BOOT, "0755", render("agk-boot.sh.j2", booted=BOOTED, command=BOOT_COMMAND))]


def render_user_data(ctx: BootstrapContext, node: NodeBundle, host: HostConfig) -> str:
    """The ``#cloud-config`` document of ``node``'s machine (or every machine of its pool)."""
    if (host.role, host.name) != (node.role, node.name):
        raise AgkError(f"{node.role} {node.name}: host facts are {host.role} {host.name}'s: pass its own")
    files = [_WriteFile(HOST_CONFIG, "0644", host.to_json()), *stage0_files()]
    return render(
        "user-data.yaml.j2",
        role=node.role,
        name=node.name,
        cluster=ctx.cluster,
        hostname=node.hostname or "",
        disk=node.disk,
        files=files,
    )


def encode_custom_data(user_data: str, *, where: str) -> str:
    """base64 for osProfile.customData, gzipped (cloud-init detects it) only when plain is too big."""
    plain = base64.b64encode(user_data.encode()).decode()
    if len(plain) <= AZURE_CUSTOM_DATA_LIMIT:
        return plain
    packed = base64.b64encode(gzip.compress(user_data.encode(), mtime=0)).decode()
    if len(packed) > AZURE_CUSTOM_DATA_LIMIT:
        raise AgkError(
            f"{where}: user-data is {len(packed):,} base64 bytes even gzipped, over Azure's "
            f"{AZURE_CUSTOM_DATA_LIMIT:,}: move files out of cloud-init (e.g. into the image)"
        )
    return packed
