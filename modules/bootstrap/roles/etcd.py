"""An etcd member's bundle (the main etcd and the events etcd): the image's upstream etcd, its configuration
and certificates, and the first boot's wait for a quorum.
"""

from __future__ import annotations

from modules.bootstrap import etcd_backup, pki, versions
from modules.bootstrap.context import (
    ETCD_CLIENT_PORT,
    ETCD_METRICS_PORT,
    ETCD_PEER_PORT,
    BootstrapContext,
    EtcdCluster,
    Host,
)
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile, SecretFile
from modules.bootstrap.roles.bundle import DataDisk, NodeBundle, Role
from modules.bootstrap.roles.parts import (
    NODE_EXPORTER_STEP,
    RELOAD_STEP,
    SYSCTL_STEP,
    UNBLOCK_STEP,
    base_files,
    script_file,
    sysctl_file,
    unit_file,
)
from modules.bootstrap.steps import Step
from modules.bootstrap.templating import render

ETCD_JOIN_WAIT_S = 600
"""How long the first boot waits to see its etcd member in a quorum before going on without it."""


def _etcd_joined(member: Host, endpoint: str) -> NodeFile:
    text = render(
        "etcd-joined.sh.j2",
        name=member.name,
        endpoint=endpoint,
        pki=PATHS.etcd_pki,
        wait_s=ETCD_JOIN_WAIT_S,
        etcdctl=PATHS.etcd_program("etcdctl"),
    )
    return script_file("etcd-joined.sh", text)


ETCD_UNIT = PATHS.unit("etcd.service")
ETCD_USER_STEP = Step(
    "etcd-user",
    # etcd.service runs as etcd. The image may carry the user, or only its group (useradd --user-group
    # refuses a name whose group exists): create what is missing, once; a later boot finds the user.
    "id -u etcd >/dev/null 2>&1 || useradd --system --no-create-home --home-dir "
    f"{PATHS.etcd_mount} --shell /usr/sbin/nologin "
    "$(getent group etcd >/dev/null && echo --gid etcd || echo --user-group) etcd",
)


def _etcd_release(role: Role) -> tuple[NodeFile, ...]:
    """The member's own unit for the image's upstream etcd, and the step script that checks its release."""
    unit = render(
        "etcd.service.j2",
        role=role,
        bin=PATHS.etcd_bin,
        etcd=PATHS.etcd_program("etcd"),
        data_mount=PATHS.etcd_mount,
        config_file=PATHS.etcd_config,
    )
    check = render("etcd-version.sh.j2", bin=PATHS.etcd_bin, version=versions.ETCD)
    return unit_file("etcd.service", unit), script_file("etcd-version.sh", check)


def etcd_bundle(ctx: BootstrapContext, etcd: EtcdCluster, name: str) -> NodeBundle:
    member = etcd.member(name)
    config = render(
        "etcd.conf.yml.j2",
        etcd=etcd,
        member=member,
        cluster=ctx.cluster,
        data_dir=f"{PATHS.etcd_mount}/data",
        pki_dir=PATHS.etcd_pki,
        client_port=ETCD_CLIENT_PORT,
        peer_port=ETCD_PEER_PORT,
        metrics_port=ETCD_METRICS_PORT,
    )
    d = PATHS.etcd_pki
    secrets = (
        SecretFile(f"{d}/ca.crt", f"cert:{pki.ETCD_CA}"),
        SecretFile(f"{d}/server.crt", f"cert:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{d}/server.key", f"key:{pki.etcd_server_cert(name)}"),
        SecretFile(f"{d}/peer.crt", f"cert:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{d}/peer.key", f"key:{pki.etcd_peer_cert(name)}"),
        SecretFile(f"{d}/healthcheck-client.crt", f"cert:{pki.ETCD_HEALTHCHECK}"),
        SecretFile(f"{d}/healthcheck-client.key", f"key:{pki.ETCD_HEALTHCHECK}"),
    )
    device = PATHS.local_nvme if etcd.storage == "local-nvme" else PATHS.azure_data_disk
    # etcd itself is the image's (PATHS.etcd_bin, the versions table's release), never a distribution package;
    # node-exporter too (modules/images/recipe.py ROLE_IMAGES): the boot installs nothing.
    packages: tuple[str, ...] = ()
    # Scheduled snapshots to blob storage: the main etcd only, when enabled (etcd_backup.py says why).
    backup = etcd_backup.member_files(ctx, etcd, name)
    return NodeBundle(
        role=etcd.role,
        name=name,
        hostname=name,
        packages=packages,
        files=(
            *base_files(etcd.role),
            NodeFile(PATHS.etcd_config, "etcd.conf.yml", config),
            *_etcd_release(etcd.role),
            _etcd_joined(member, f"https://{member.ip}:{ETCD_CLIENT_PORT}"),
            sysctl_file(ctx, etcd.role, node=False, forwarding=False),
            *backup.files,
        ),
        secrets=secrets,
        facts=backup.facts,
        disk=DataDisk(device, "etcd", PATHS.etcd_mount),
        steps=(
            Step("etcd-version", f"sh {PATHS.script('etcd-version.sh')}", tries=1),
            UNBLOCK_STEP,
            SYSCTL_STEP,
            ETCD_USER_STEP,
            Step("etcd-data", f"install -d -o etcd -g etcd -m 0700 {PATHS.etcd_mount}/data"),
            Step("etcd-pki", f"chown -R etcd:etcd {PATHS.etcd_pki}"),
            RELOAD_STEP,
            # Not blocking: etcd is started once it joins a quorum, whenever its peers boot (M9).
            Step("etcd", "systemctl enable etcd && systemctl restart --no-block etcd"),
            Step("etcd-joined", f"sh {PATHS.script('etcd-joined.sh')}", tries=1),
            NODE_EXPORTER_STEP,
            *backup.steps,
        ),
    )
