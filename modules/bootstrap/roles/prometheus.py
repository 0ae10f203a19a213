"""A Prometheus host's bundle: Prometheus scraping its share of the kubelets, the alert rules,
Alertmanager peering with the other hosts, and Grafana when it runs.
"""

from __future__ import annotations

from modules import labels
from modules.bootstrap import alerting, dashboards, etcd_backup, monitoring, pki
from modules.bootstrap.context import (
    ALERTMANAGER_CLUSTER_PORT,
    ALERTMANAGER_PORT,
    ETCD_METRICS_PORT,
    NODE_EXPORTER_PORT,
    PROMETHEUS_PORT,
    BootstrapContext,
    Host,
)
from modules.bootstrap.host import boot as host_boot
from modules.bootstrap.layout import PATHS
from modules.bootstrap.monitoring import (
    API_AVAILABILITY_SLO,
    API_THROTTLE_RATIO,
    DROP_RULES,
    ETCD_FSYNC_P99_SECONDS,
    ETCD_QUOTA_RATIO,
    ksm_node_label,
)
from modules.bootstrap.node_files import FactFile, NodeFile, SecretFile, host_program
from modules.bootstrap.roles.bundle import DataDisk, NodeBundle
from modules.bootstrap.roles.parts import (
    NODE_EXPORTER_STEP,
    RELOAD_STEP,
    SYSCTL_STEP,
    UNBLOCK_STEP,
    base_files,
    sysctl_file,
    unit_file,
)
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render
from modules.vm_sizing.formulas import SCRAPE_TIMEOUT_S


def prometheus_shard(ctx: BootstrapContext, host: Host) -> int:
    """The share of the kubelet targets ``host`` scrapes: its position among the Prometheus hosts modulo the
    shard count, so hosts i and i + shards (the share's replicas) scrape the same nodes."""
    return ctx.prometheus.hosts.index(host) % ctx.prometheus.shards


def prometheus_config(ctx: BootstrapContext, host: Host) -> str:
    etcd_jobs = [("etcd", ctx.etcd.members)]
    if ctx.events_etcd is not None:
        etcd_jobs.append(("events-etcd", ctx.events_etcd.members))
    fixed = (
        *ctx.control_plane.apiservers,
        *ctx.etcd.members,
        *(ctx.events_etcd.members if ctx.events_etcd else ()),
        *ctx.prometheus.hosts,
        ctx.nat,
    )
    return render(
        "prometheus.yml.j2",
        host=host,
        cluster=ctx.cluster,
        p=ctx.prometheus,
        rules_dir=PATHS.prom_rules,
        apiserver_url=ctx.apiserver_url,
        shard=prometheus_shard(ctx, host),
        pki=PATHS.prom_pki,
        kubelet_ca=f"{PATHS.prom_pki}/{pki.KUBELET_SERVING_CA}.crt",
        prometheus_port=PROMETHEUS_PORT,
        drop_rules=DROP_RULES,
        etcd_jobs=etcd_jobs,
        etcd_metrics_port=ETCD_METRICS_PORT,
        fixed_hosts=fixed,
        node_exporter_port=NODE_EXPORTER_PORT,
        alertmanagers=ctx.prometheus.hosts,
        alertmanager_port=ALERTMANAGER_PORT,
        scrape_timeout_s=SCRAPE_TIMEOUT_S,
    )


def island_join(expr: str) -> str:
    """``expr`` (one series per node, a ``node`` label) with the node's InfiniBand island as label
    ``island``; nodes without one (system nodes) keep their series without it."""
    return f"({expr}) * on(node) group_left(island) agk:node_island or ({expr}) unless on(node) agk:node_island"


def alert_rules(ctx: BootstrapContext) -> dict[str, str]:
    """rules/<group>.yml -> content."""
    jobs = "etcd|events-etcd" if ctx.events_etcd else "etcd"
    xid_expr = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in ctx.fatal_xids)
    common = {
        "severity": monitoring.severity,
        "runbook": lambda name: alerting.runbook_url(ctx.alerting, monitoring.runbook_anchor(name)),
        "island": island_join,
    }
    preflight_label = ksm_node_label(ctx.preflight_taint_key)
    return {
        "apiserver.yml": render(
            "rules/apiserver.yml.j2",
            throttle_ratio=API_THROTTLE_RATIO,
            slo=API_AVAILABILITY_SLO,
            budget=round(1 - API_AVAILABILITY_SLO, 6),
            **common,
        ),
        "certs.yml": render(
            "rules/certs.yml.j2",
            warn_days=monitoring.CERT_WARN_DAYS,
            critical_days=monitoring.CERT_CRITICAL_DAYS,
            **common,
        ),
        "etcd.yml": render(
            "rules/etcd.yml.j2",
            jobs=jobs,
            quota_ratio=ETCD_QUOTA_RATIO,
            fsync_seconds=ETCD_FSYNC_P99_SECONDS,
            **common,
        ),
        "gpu.yml": render("rules/gpu.yml.j2", xids=ctx.fatal_xids, xid_expr=xid_expr, **common),
        "islands.yml": render(
            "rules/islands.yml.j2",
            island_key=labels.key(ctx.label_domain, labels.IB_ISLAND),
            island_label=ksm_node_label(labels.key(ctx.label_domain, labels.IB_ISLAND)),
            preflight_label=preflight_label,
            xid_expr=xid_expr,
            xid_condition=labels.XID_CONDITION,
            island_alert=monitoring.ISLAND_ALERT,
            min_nodes=monitoring.ISLAND_UNHEALTHY_MIN_NODES,
            ratio=monitoring.ISLAND_UNHEALTHY_RATIO,
            **common,
        ),
        "prometheus.yml": render("rules/prometheus.yml.j2", **common),
        "nodes.yml": render(
            "rules/nodes.yml.j2",
            preflight_key=ctx.preflight_taint_key,
            preflight_label=preflight_label,
            preflight_timeout=ctx.preflight_timeout,
            health_namespace=labels.HEALTH_NAMESPACE,
            roll_cronjob=labels.ROLL,
            policy_agent=labels.POLICY_AGENT,
            **common,
        ),
        **etcd_backup.alert_rules(ctx, **common),
    }


def _alertmanager(ctx: BootstrapContext, host: Host) -> tuple[NodeFile, ...]:
    """Alertmanager beside Prometheus: its release, configuration and unit, peering with the other hosts."""
    unit = render(
        "alertmanager.service.j2",
        cluster=ctx.cluster,
        host=host,
        peers=[h for h in ctx.prometheus.hosts if h != host],
        data_mount=PATHS.prom_mount,
        data_dir=alerting.DATA_DIR,
        config_file=alerting.CONFIG_FILE,
        port=ALERTMANAGER_PORT,
        cluster_port=ALERTMANAGER_CLUSTER_PORT,
    )
    files: tuple[NodeFile, ...] = (
        NodeFile(
            alerting.CONFIG_FILE, "alertmanager/alertmanager.yml", alerting.render_config(ctx.alerting, ctx.cluster)
        ),
        unit_file("alertmanager.service", unit),
    )
    if prometheus_secrets(ctx):
        lib = host_boot.LIB
        files += (
            unit_file(
                alerting.SECRETS_UNIT, render("agk-alert-secrets.service.j2", lib=lib, config=ALERT_SECRETS_CONFIG)
            ),
            unit_file(alerting.SECRETS_TIMER, render("agk-alert-secrets.timer.j2")),
            host_program("alert_secrets.py"),
        )
    return files


ALERT_SECRETS_CONFIG = "/etc/agk/alert-secrets.json"


def prometheus_secrets(ctx: BootstrapContext) -> tuple[str, ...]:
    """The Key Vault secrets every Prometheus host copies (alert_secrets.py): the receivers', and Grafana's
    admin password when Grafana runs."""
    grafana = (dashboards.ADMIN_SECRET,) if ctx.prometheus.grafana_version else ()
    return (*ctx.alerting.secrets, *grafana)


def _grafana(ctx: BootstrapContext, host: Host) -> tuple[NodeFile, ...]:
    """Grafana's release script, configuration, provisioning and dashboards (modules/bootstrap/dashboards.py)."""
    if not ctx.prometheus.grafana_version:
        return ()
    made: list[NodeFile] = []
    for path, text in dashboards.files(ctx, host).items():
        rel = "grafana/" + path.removeprefix("/etc/grafana/").removeprefix("/var/lib/grafana/")
        made.append(NodeFile(path, rel, text, "0644"))
    return tuple(made)


PROMETHEUS_USER_STEP = Step(
    "prometheus-user",
    f"id prometheus >/dev/null 2>&1 || useradd --system --home-dir {PATHS.prom_mount} --shell /usr/sbin/nologin "
    "prometheus",
)
"""The user Prometheus and Alertmanager run as (the image's prometheus-node-exporter package usually made it)."""


def _alert_secret_steps(ctx: BootstrapContext) -> tuple[Step, ...]:
    """Copy the receivers' secrets before Alertmanager first starts (never failing the boot: a secret not
    set yet is the operator's to set, and the timer copies it when it is), then keep them current."""
    if not prometheus_secrets(ctx):
        return ()
    once = Step("alert-secrets", f"python3 {host_boot.LIB}/alert_secrets.py || true", tries=1)
    return (once, Step("alert-secrets-timer", start(alerting.SECRETS_TIMER)))


def prometheus_bundle(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.prometheus.hosts if h.name == name)
    unit = render(
        "prometheus.service.j2",
        cluster=ctx.cluster,
        p=ctx.prometheus,
        data_mount=PATHS.prom_mount,
        data_dir=f"{PATHS.prom_mount}/metrics2",
        config_file=PATHS.prom_config,
        prometheus_port=PROMETHEUS_PORT,
    )
    rules = tuple(
        NodeFile(f"{PATHS.prom_rules}/{file}", f"rules/{file}", text) for file, text in alert_rules(ctx).items()
    )
    packages: tuple[str, ...] = ()  # Prometheus, Alertmanager, Grafana and node-exporter are the image's
    return NodeBundle(
        role="prometheus",
        name=name,
        hostname=name,
        packages=packages,
        files=(
            *base_files("prometheus"),
            NodeFile(PATHS.prom_config, "prometheus.yml", prometheus_config(ctx, host)),
            *rules,
            unit_file("prometheus.service", unit),
            *_alertmanager(ctx, host),
            *_grafana(ctx, host),
            sysctl_file(ctx, "prometheus", node=False, forwarding=False),
        ),
        secrets=(
            SecretFile(f"{PATHS.prom_pki}/ca.crt", f"cert:{pki.KUBERNETES_CA}"),
            # What the kubelet and cAdvisor jobs verify kubelets' serving certificates against.
            SecretFile(f"{PATHS.prom_pki}/{pki.KUBELET_SERVING_CA}.crt", f"cert:{pki.KUBELET_SERVING_CA}"),
            SecretFile(f"{PATHS.prom_pki}/prometheus.crt", f"cert:{pki.PROMETHEUS}"),
            SecretFile(f"{PATHS.prom_pki}/prometheus.key", f"key:{pki.PROMETHEUS}"),
        ),
        facts=(FactFile(ALERT_SECRETS_CONFIG, alerting.ALERT_FACT),) if prometheus_secrets(ctx) else (),
        disk=DataDisk(PATHS.azure_data_disk, "prometheus", PATHS.prom_mount),
        steps=(
            PROMETHEUS_USER_STEP,
            Step(
                "alertmanager-dirs",
                f"install -d -o prometheus -g prometheus -m 0750 {alerting.DATA_DIR}"
                f" && install -d -o root -g prometheus -m 0750 {alerting.SECRETS_DIR}",
            ),
            # Grafana reads its admin password from the receivers' secrets folder (root:prometheus 0640).
            *((Step("grafana-group", "usermod -aG prometheus grafana"),) if ctx.prometheus.grafana_version else ()),
            UNBLOCK_STEP,
            SYSCTL_STEP,
            Step("prometheus-data", f"install -d -o prometheus -g prometheus -m 0755 {PATHS.prom_mount}/metrics2"),
            Step("prometheus-pki", f"chown -R prometheus:prometheus {PATHS.prom_pki}"),
            RELOAD_STEP,
            Step("prometheus", start("prometheus")),
            *_alert_secret_steps(ctx),
            Step("alertmanager", start("alertmanager")),
            *((Step("grafana", start("grafana-server")),) if ctx.prometheus.grafana_version else ()),
            NODE_EXPORTER_STEP,
        ),
    )
