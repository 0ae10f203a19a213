"""What each kind of stack builds: the composition behind infra/__main__.py.

Everything is validated and planned (config, address plan, sizes, scale sets) before the first
resource is constructed, so bad input never leaves a half-built graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pulumi
from pulumi_azure_native import authorization, managedidentity, resources

from infra.addons_stack import build as build_addons
from infra.images_stack import build as build_images
from modules import tags as tagging
from modules.azure.boot import minimal_cloud_config
from modules.azure.context import DeployContext
from modules.azure.control_plane import ControlPlane, ControlPlaneArgs, EtcdGroup
from modules.azure.hosts import NatHost, NatHostArgs, PrometheusHosts, PrometheusHostsArgs
from modules.azure.hub import HubNetwork, HubNetworkArgs
from modules.azure.identities import ClusterIdentities, ClusterIdentitiesArgs
from modules.azure.keyvault import ClusterVault, ClusterVaultArgs, vault_name
from modules.azure.node_pool import NodePool, NodePoolArgs
from modules.azure.nsg import Rule
from modules.azure.segmentation import spoke_rules
from modules.azure.spoke import Egress, HubRef, SpokeNetwork, SpokeNetworkArgs
from modules.azure.storage import ClusterStorage, ClusterStorageArgs, Grant, account_name, blob_url
from modules.azure.vm import IdentityBound
from modules.azure.workload_identity import WorkloadIdentity, WorkloadIdentityArgs
from modules.bootstrap import alerting, node_tokens, versions
from modules.bootstrap.customdata import bundle_parts, custom_data
from modules.bootstrap.delivery import check_sizes
from modules.bootstrap.etcd_backup import ACCOUNT_URL_FACT
from modules.bootstrap.host import alert_secrets
from modules.bootstrap.host.node_token import PLACEHOLDER
from modules.bootstrap.kubeconfig import admin_kubeconfig
from modules.bootstrap.pki import ADMIN, KUBERNETES_CA, SERVICE_ACCOUNT_RSA, pki_spec
from modules.bootstrap.pki_component import ClusterPki, ClusterPkiArgs
from modules.bootstrap.roles import POOL_ROLES, Role
from modules.bootstrap.roles.prometheus import prometheus_secrets
from modules.identity import oidc
from modules.identity.plan import team_containers, workload_identity_component
from modules.stackplan.addresses import StackAddresses, deployed_subnets, hub_stack_name, limits_for, plan_stack
from modules.stackplan.config import (
    BACKUP_CONTAINER,
    PROJECT,
    ClusterConfig,
    StackConfig,
    parse_config,
    resource_group_name,
)
from modules.stackplan.egress import public_ips_for
from modules.stackplan.pools import SYSTEM, deployed_large_pools, deployed_scale_sets
from modules.stackplan.prepare import ClusterPrep, prepare_cluster
from modules.stackplan.prerequisites import hub_prerequisites
from modules.stackplan.stacks_dir import stacks_dir
from modules.vm_sizing.formulas import etcd_iops


def runtime_config() -> dict[str, Any]:
    """Every config key Pulumi hands this program (the engine's settings, else PULUMI_CONFIG)."""
    from pulumi.runtime import config as runtime

    return {**runtime.get_config_env(), **runtime.CONFIG.get()}


def load() -> tuple[str, StackConfig]:
    stack = pulumi.get_stack()
    return stack, parse_config(runtime_config())


def last_outputs(stack: str) -> dict[str, Any]:
    """This stack's own last outputs (where its subnets are, how its pools are split into scale sets), read
    through Pulumi's StackReference sync path (the builtin `pulumi:pulumi:readStackOutputs` invoke on its own
    fully qualified name), before any resource exists. Before the first deploy there are none; a backend
    that cannot answer gets a warning and only the pins the stack file declares."""
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}"
    try:
        result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": name})
    except Exception as err:  # the SDK raises a bare Exception for an invoke's failures
        pulumi.log.warn(
            f"{stack}: cannot read its last outputs ({err}): only network.pinned holds subnets in place, and pools"
            " are split as if new"
        )
        return {}
    outputs = result.value.get("outputs") if isinstance(result.value, dict) else None
    return outputs if isinstance(outputs, dict) else {}


def context(stack: str, config: StackConfig) -> tuple[resources.ResourceGroup, DeployContext]:
    assert config.tags is not None and config.admin is not None and config.location is not None
    cluster = config.cluster.name if config.cluster else stack
    tags = tagging.base_tags(config.tags.owner, config.tags.cost_center, cluster, config.tags.extra)
    rg = resources.ResourceGroup(
        f"{stack}-rg", resource_group_name=resource_group_name(stack), location=config.location, tags=tags
    )
    ctx = DeployContext(
        resource_group_name=rg.name,
        resource_group_id=rg.id,
        location=config.location,
        tags=tags,
        admin_username=config.admin.username,
        ssh_public_keys=tuple(config.admin.ssh_public_keys),
        images={kind: (i.publisher, i.offer, i.sku, i.version) for kind, i in config.images},
    )
    return rg, ctx


def _limits_tag(config: StackConfig) -> str:
    return tagging.encode_limits({r.name: r.value for r in limits_for(config).overridden() if r.value is not None})


def build_hub(stack: str, config: StackConfig, plan: StackAddresses) -> dict[str, Any]:
    assert config.hub is not None
    egress_ips = public_ips_for(
        max(config.hub.jump_hosts, 1),
        config.network.egress.connections_per_node if config.network else 1,
        plan.limits,
        "NAT gateway jump",
    )
    prerequisites = hub_prerequisites(config, stack, egress_ips)
    _, ctx = context(stack, config)
    jump = {
        f"{stack}-jump-{i}": minimal_cloud_config(f"{stack}-jump-{i}", "jump") for i in range(config.hub.jump_hosts)
    }
    hub = HubNetwork(
        stack,
        HubNetworkArgs(
            ctx=ctx,
            plan=plan.vnet,
            limits_tag=_limits_tag(config),
            bastion=config.hub.bastion,
            jump_hosts=config.hub.jump_hosts,
            jump_vm_size=config.hub.jump_vm_size,
            jump_custom_data=jump,
            private_dns_zone=config.hub.private_dns_zone,
            egress_public_ips=egress_ips,
        ),
    )
    return {
        "vnet_id": hub.id,
        "vnet_name": hub.name,
        "resource_group_name": hub.resource_group_name,
        "route_table_name": hub.route_table_name,
        "private_dns_zone_name": hub.private_dns_zone_name,
        "blob_dns_zone_id": hub.blob_dns_zone_id,
        "vault_dns_zone_id": hub.vault_dns_zone_id,
        "subnet_ids": hub.subnet_ids,
        "address_space": [str(n) for n in plan.vnet.address_space],
        "address_plan": plan.vnet.to_dict(),
        "prerequisites": prerequisites.to_json(),
    }


def nat_host_rules(prep: ClusterPrep) -> dict[str, tuple[Rule, ...]]:
    """The nat subnet admits the hub's researchers to the service CIDR (the NAT host DNATs it to pods).

    Explicit rather than left to AllowVnetInBound: the service CIDR is neither the spoke's nor the hub's
    address space, only a route in the hub's route table.
    """
    hub = prep.plan.network.vnets[prep.plan.vnet.peers[0]] if prep.plan.vnet.peers else None
    sources = hub.address_space if hub else ()
    service = str(prep.addresses.service_cidr)
    rules = tuple(
        Rule(f"allow-hub-to-services-{i}", 200 + i, "Inbound", "Allow", "*", str(net), service, ("*",))
        for i, net in enumerate(sources)
    )
    return {"nat": rules}


def _subnet_rules(prep: ClusterPrep) -> dict[str, tuple[Rule, ...]]:
    """Every subnet's own NSG rules: the NAT host's service ingress and the spoke's segmentation."""
    hub = prep.plan.network.vnets[prep.plan.vnet.peers[0]] if prep.plan.vnet.peers else None
    rules: dict[str, tuple[Rule, ...]] = dict(nat_host_rules(prep))
    segments = spoke_rules(dict(prep.addresses.subnets), hub.address_space if hub else ())
    for name, extra in segments.items():
        rules[name] = (*rules.get(name, ()), *extra)
    return rules


def _grants(prep: ClusterPrep, pools: Mapping[str, NodePool]) -> dict[str, list[Grant]]:
    cluster = prep.config.cluster
    assert cluster is not None
    grants: dict[str, list[Grant]] = {}
    for container, access in cluster.storage.containers.items():
        rows = [
            Grant(pool.name, pools[pool.name].principal_id, "ServicePrincipal", access.gpu_nodes)
            for pool in prep.pools.gpu
            if access.gpu_nodes != "none"
        ]
        rows += [Grant(f"group-{g}", g, "Group", "read") for g in access.reader_groups]
        grants[container] = rows
    return grants


def host_boot(
    prep: ClusterPrep,
    pki: ClusterPki,
    keys: ClusterVault,
    role: Role,
    name: str,
    facts: Mapping[str, pulumi.Input[str]] | None = None,
    token_secrets: pulumi.Output[dict[str, str]] | None = None,
) -> IdentityBound:
    """customData of fixed host (or pool) ``name``, made once its identity exists: its bundle goes into
    its own secret, readable by that identity alone, and the machine waits for the grant and for the
    vault's private endpoint and DNS, so its first fetch can succeed (it retries anyway). ``facts``:
    the bundle's deploy-time values (node_files.FactFile).

    A pool also gets its bootstrap token secret (readable by the pool alone; the API servers write it:
    ``token_writers``); an API server's bundle names every pool's (``token_secrets``: pool -> secret)."""
    pool = role in POOL_ROLES
    key = f"pool-{name}" if pool else name

    def bind(identity: managedidentity.UserAssignedIdentity) -> pulumi.Output[str]:
        given: dict[str, pulumi.Input[str]] = dict(facts or {})
        if pool:
            token = keys.written_secret(node_tokens.token_secret_key(name), PLACEHOLDER, identity.principal_id)
            given[node_tokens.NODE_FACT] = token.name.apply(node_tokens.node_config)
        elif role == "apiserver":
            assert token_secrets is not None
            given[node_tokens.ISSUER_FACT] = token_secrets.apply(lambda m: node_tokens.issuer_config(prep.bootstrap, m))
        elif role == "prometheus" and prometheus_secrets(prep.bootstrap):
            # One copy of each receiver secret per host, readable by it alone; the operator sets the values.
            copies = {
                s: keys.written_secret(
                    alerting.vault_key(name, s), alert_secrets.PLACEHOLDER, identity.principal_id
                ).name
                for s in prometheus_secrets(prep.bootstrap)
            }
            given[alerting.ALERT_FACT] = pulumi.Output.all(**copies).apply(alerting.settings_json)
        made = keys.reader_secret(key, bundle_parts(prep.bootstrap, pki, role, name, given), identity.principal_id)
        return custom_data(
            prep.bootstrap,
            role,
            name,
            vault_uri=keys.uri,
            secret_name=made.name,
            client_id=identity.client_id,
            after=[*(g.id for g in made.grants), *(r.urn for r in keys.ready)],
        )

    return IdentityBound(f"{role} {name}", bind)


def token_writers(
    keys: ClusterVault, pools: Mapping[str, object], apiservers: Mapping[str, pulumi.Output[str]]
) -> None:
    """Every API server (its identity's principal id) may set every pool's bootstrap token secret."""
    for pool in pools:
        for host, principal in apiservers.items():
            keys.grant_writer(node_tokens.token_secret_key(pool), host, principal)


@dataclass(frozen=True)
class _Spoke:
    """What every part of a cluster spoke is built with (passed, never global)."""

    prep: ClusterPrep
    ctx: DeployContext
    hub: HubRef
    network: SpokeNetwork
    pki: ClusterPki
    keys: ClusterVault

    @property
    def cluster(self) -> ClusterConfig:
        assert self.prep.config.cluster is not None
        return self.prep.config.cluster

    @property
    def subnet(self) -> Mapping[str, pulumi.Output[str]]:
        return self.network.subnet_refs

    @property
    def ready(self) -> Sequence[pulumi.Resource]:
        return self.network.ready


def _hub_ref(cluster: ClusterConfig, hub_space: Sequence[str] = ()) -> HubRef:
    ref = pulumi.StackReference(f"{PROJECT}-hub", stack_name=cluster.hub_stack)

    def out(name: str) -> pulumi.Output[str]:
        return ref.require_output(name).apply(str)

    return HubRef(
        vnet_id=out("vnet_id"),
        vnet_name=out("vnet_name"),
        resource_group_name=out("resource_group_name"),
        route_table_name=out("route_table_name"),
        private_dns_zone_name=out("private_dns_zone_name"),
        blob_dns_zone_id=out("blob_dns_zone_id"),
        vault_dns_zone_id=out("vault_dns_zone_id"),
        address_space=tuple(hub_space),
    )


def _spoke(prep: ClusterPrep, ctx: DeployContext, client: Any) -> _Spoke:
    """The network, the PKI and the vault: what the machines need before they exist."""
    cluster, config, stack = prep.config.cluster, prep.config, prep.stack
    assert cluster is not None
    peers = prep.plan.vnet.peers
    hub = _hub_ref(cluster, [str(p) for p in prep.plan.network.vnets[peers[0]].address_space] if peers else ())
    network = SpokeNetwork(
        cluster.name,
        SpokeNetworkArgs(
            ctx=ctx,
            plan=prep.plan.vnet,
            limits_tag=_limits_tag(config),
            hub=hub,
            allow_forwarded_traffic=cluster.allow_forwarded_traffic,
            egress=[Egress(e.name, e.subnets, e.public_ips, e.zone) for e in prep.egress],
            extra_rules=_subnet_rules(prep),
        ),
    )
    pki = ClusterPki(f"{cluster.name}-pki", ClusterPkiArgs(spec=pki_spec(prep.bootstrap)))
    location = config.location or ""
    keys = ClusterVault(
        f"{cluster.name}-keys",
        ClusterVaultArgs(
            ctx=ctx,
            vault_name=client.subscription_id.apply(lambda sub: vault_name(cluster.name, sub, location, stack)),
            tenant_id=client.tenant_id,
            endpoint_subnet_id=network.subnet_refs["endpoints"],
            vnet_id=network.id,
            dns_zone_id=hub.vault_dns_zone_id,
            dns_resource_group_name=hub.resource_group_name,
            depends_on=network.ready,
        ),
    )
    return _Spoke(prep, ctx, hub, network, pki, keys)


def _control_plane(s: _Spoke, boot: Mapping[str, pulumi.Input[str]]) -> ControlPlane:
    """API servers behind their load balancer, the etcd clusters."""
    prep, cluster = s.prep, s.cluster
    addresses, sizes = prep.addresses, prep.sizes
    nodes = prep.pools.sizing_nodes
    groups = [("etcd", cluster.etcd, addresses.etcd)]
    if cluster.events_etcd is not None:
        groups.append(("events-etcd", cluster.events_etcd, addresses.events_etcd))
    etcd = [
        EtcdGroup(
            role,
            {h: str(a) for h, a in members.items()},
            s.subnet[role],
            sizes[role].chosen,
            group.storage,
            group.disk_gib,
            group.disk_iops or etcd_iops(nodes),
        )
        for role, group, members in groups
    ]
    return ControlPlane(
        cluster.name,
        ControlPlaneArgs(
            ctx=s.ctx,
            cluster_nodes=nodes,
            apiservers={h: str(a) for h, a in addresses.apiservers.items()},
            apiserver_vip=str(addresses.apiserver_vip),
            apiserver_vm_size=sizes["apiserver"].chosen,
            control_plane_subnet_id=s.subnet["control-plane"],
            etcd=etcd,
            zones=cluster.api_servers.zones,
            custom_data=boot,
            depends_on=s.ready,
        ),
    )


def _monitoring_and_nat(s: _Spoke, boot: Mapping[str, pulumi.Input[str]]) -> PrometheusHosts:
    prep, cluster, addresses = s.prep, s.cluster, s.prep.addresses
    prometheus = PrometheusHosts(
        f"{cluster.name}-prometheus",
        PrometheusHostsArgs(
            ctx=s.ctx,
            hosts={h: str(a) for h, a in addresses.prometheus.items()},
            subnet_id=s.subnet["monitoring"],
            vm_size=prep.sizes["prometheus"].chosen,
            data_disk_gib=prep.bootstrap.prometheus.data_disk_gib,
            zones=cluster.api_servers.zones,
            custom_data=boot,
            depends_on=s.ready,
        ),
    )
    nat_host = f"{cluster.name}-nat-0"
    NatHost(
        f"{cluster.name}-nat",
        NatHostArgs(
            ctx=s.ctx,
            host=nat_host,
            address=str(addresses.nat),
            subnet_id=s.subnet["nat"],
            vm_size=cluster.nat.vm_size,
            custom_data=host_boot(prep, s.pki, s.keys, "nat", nat_host),
            service_cidr=str(addresses.service_cidr),
            hub_route_table_name=s.hub.route_table_name,
            hub_resource_group_name=s.hub.resource_group_name,
            depends_on=s.ready,
        ),
    )
    return prometheus


def _node_pools(s: _Spoke, controllers: ClusterIdentities) -> dict[str, NodePool]:
    """Every pool's scale sets; the remediation identity may replace the GPU pools' VMs."""
    prep, cluster = s.prep, s.cluster
    node_pools: dict[str, NodePool] = {}
    ordered: list[pulumi.Resource] = []
    for pool in prep.pools.pools.values():
        component = f"{cluster.name}-system" if pool.name == SYSTEM else pool.name
        node_pools[pool.name] = NodePool(
            component,
            NodePoolArgs(
                ctx=s.ctx,
                pool=pool.name,
                role=pool.role,
                vm_size=pool.vm_size,
                scale_sets=pool.scale_sets,
                subnet_id=s.subnet[pool.subnet],
                pod_ips=pool.pod_ips,
                surge=pool.surge,
                os_disk_gib=pool.os_disk_gib,
                custom_data=host_boot(prep, s.pki, s.keys, pool.role, pool.name),
                zone=pool.zone,
                image="gpu" if pool.role == "gpu-node" else "general",
                depends_on=s.ready,
                # The cluster's controllers (cloud-provider-azure, XID remediation) run on system nodes.
                extra_identities=(
                    [controllers.cloud_provider_id, controllers.remediation_id] if pool.name == SYSTEM else []
                ),
                earlier_sets=tuple(ordered),
                in_flight=cluster.scale_sets_in_flight,
                repairs=cluster.repairs,
            ),
        )
        ordered += node_pools[pool.name].scale_set_resources
        if pool.role == "gpu-node":
            for set_name, set_id in node_pools[pool.name].scale_set_refs.items():
                controllers.grant_replacer(set_name, set_id)
    return node_pools


def _workload_identity(s: _Spoke) -> WorkloadIdentity | None:
    """The public service-account issuer and the teams' identities (``cluster.identity``)."""
    access, identity = s.prep.addons.access, s.cluster.identity
    if access is None or identity is None:
        return None
    account = oidc.issuer_account_name(
        s.cluster.name, identity.entra.tenant_id, s.prep.config.location or "", s.prep.stack
    )
    return WorkloadIdentity(
        workload_identity_component(s.cluster.name),
        WorkloadIdentityArgs(
            ctx=s.ctx,
            account_name=account,
            issuer=access.issuer,
            # The public half is no secret: the JWKS publishes it.
            signing_public_key=pulumi.Output.unsecret(s.pki.secrets[f"pub:{SERVICE_ACCOUNT_RSA}"]),
            teams=access.teams,
        ),
    )


def _team_grants(s: _Spoke, identity: WorkloadIdentity | None) -> dict[str, list[Grant]]:
    """Each team's identity may read and write its own containers, and only those."""
    if identity is None:
        return {}
    return {
        container: [Grant(f"team-{team}", principal, "ServicePrincipal", "read-write")]
        for team, principal in identity.principal_ids.items()
        for container in team_containers(team)
    }


def _storage(
    s: _Spoke,
    account: pulumi.Output[str],
    node_pools: Mapping[str, NodePool],
    control: ControlPlane,
    identity: WorkloadIdentity | None = None,
) -> None:
    """The cluster's storage account: the pools' containers, the teams' own and, when backed up, etcd's snapshots."""
    prep, cluster = s.prep, s.cluster
    if not cluster.storage.enabled:
        return
    backup = cluster.etcd.backup
    # Each etcd member writes its own snapshots; nothing else can (Contributor on this container only).
    backup_grants = {
        BACKUP_CONTAINER: [
            Grant(host, control.identities[host], "ServicePrincipal", "read-write") for host in prep.addresses.etcd
        ]
    }
    ClusterStorage(
        f"{cluster.name}-storage",
        ClusterStorageArgs(
            ctx=s.ctx,
            account_name=account,
            containers=[
                *cluster.storage.containers,
                *_team_grants(s, identity),
                *([BACKUP_CONTAINER] if backup.enabled else []),
            ],
            grants={**_grants(prep, node_pools), **_team_grants(s, identity), **backup_grants},
            retention_days={BACKUP_CONTAINER: backup.retention_days} if backup.enabled else {},
            endpoint_subnet_id=s.subnet["endpoints"],
            vnet_id=s.network.id,
            dns_zone_id=s.hub.blob_dns_zone_id,
            dns_resource_group_name=s.hub.resource_group_name,
            depends_on=s.ready,
        ),
    )


def build_cluster(prep: ClusterPrep) -> dict[str, Any]:
    """A cluster spoke: network, PKI and vault, the control plane and monitoring hosts, the pools,
    storage; in that order, since each machine's bundle and grants need what comes before it."""
    stack, config = prep.stack, prep.config
    cluster = config.cluster
    assert cluster is not None
    addresses = prep.addresses
    # Every bundle must fit its Key Vault secret: checked with certificates of the real size before
    # anything is built, so an oversized one fails the plan naming its host.
    check_sizes(prep.bootstrap)
    _, ctx = context(stack, config)
    client = authorization.get_client_config_output()
    # Every host and scale set boots its role's gallery image version (the plan chose and checked them), in the
    # gallery the images stack exported: a reference, so `pulumi up` of a cluster whose images stack does not
    # exist yet stops before anything is created, and `agk plan --all` orders the images stack first.
    gallery = pulumi.StackReference(f"{PROJECT}-images", stack_name=cluster.node_images.images_stack)
    gallery_id = gallery.require_output("gallery_id").apply(str)
    ctx = replace(ctx, node_images={role: gallery_id.apply(image.id_in) for role, image in prep.node_images.items()})
    s = _spoke(prep, ctx, client)
    roles: dict[Role, Mapping[str, object]] = {
        "apiserver": addresses.apiservers,
        "etcd": addresses.etcd,
        "events-etcd": addresses.events_etcd,
        "prometheus": addresses.prometheus,
    }
    location = config.location or ""
    account = client.subscription_id.apply(lambda sub: account_name(cluster.name, sub, location, stack))
    # Where the etcd members upload snapshots: a fact of their bundles (etcd_backup.ACCOUNT_URL_FACT).
    facts: dict[Role, dict[str, pulumi.Input[str]]] = {
        "etcd": {ACCOUNT_URL_FACT: account.apply(lambda a: blob_url(a) + "\n")}
    }
    # The API servers' bundles name the pools' token secrets, which exist once the pools' identities do
    # (their names carry a digest of it): resolved below, after the pools.
    token_secrets: pulumi.Output[dict[str, str]]
    resolve_token_secrets: Callable[[pulumi.Output[dict[str, str]]], None]
    token_secrets, resolve_token_secrets = pulumi.deferred_output()
    boot = {
        host: host_boot(prep, s.pki, s.keys, role, host, facts.get(role), token_secrets)
        for role, hosts in roles.items()
        for host in hosts
    }
    control = _control_plane(s, boot)
    prometheus = _monitoring_and_nat(s, boot)
    controllers = ClusterIdentities(f"{cluster.name}-controllers", ClusterIdentitiesArgs(ctx=ctx, cluster=cluster.name))
    node_pools = _node_pools(s, controllers)
    resolve_token_secrets(
        pulumi.Output.all(**{p: s.keys.secrets[node_tokens.token_secret_key(p)].name for p in prep.pools.pools}).apply(
            dict
        )
    )
    token_writers(s.keys, prep.pools.pools, {h: control.identities[h] for h in addresses.apiservers})
    identity = _workload_identity(s)
    _storage(s, account, node_pools, control, identity)
    outputs = _cluster_outputs(s, client, control, prometheus, controllers, node_pools)
    if identity is not None:
        # What the add-ons stack annotates the teams' service accounts with (client ids are no secret).
        outputs["workload_identity"] = {"issuer": identity.issuer, "client_ids": identity.client_ids}
    return outputs


def _cluster_outputs(
    s: _Spoke,
    client: Any,
    control: ControlPlane,
    prometheus: PrometheusHosts,
    controllers: ClusterIdentities,
    node_pools: Mapping[str, NodePool],
) -> dict[str, Any]:
    prep, cluster, pki = s.prep, s.cluster, s.pki
    control_endpoint = prep.bootstrap.apiserver_url
    return {
        "vnet_id": s.network.id,
        "vnet_name": s.network.name,
        "subnet_ids": s.network.subnet_ids,
        "peering_ids": s.network.peering_ids,
        "apiserver_endpoint": control.apiserver_endpoint,
        "etcd_members": control.etcd_members,
        "prometheus_hosts": prometheus.hosts,
        "scale_sets": {p.name: {x.name: x.capacity for x in p.scale_sets} for p in prep.pools.gpu},
        "scale_set_ids": {name: pool.scale_sets for name, pool in node_pools.items()},
        "pools": {name: pool.to_dict() for name, pool in prep.pools.pools.items()},
        "egress": [e.to_dict() for e in prep.egress],
        "prerequisites": prep.prerequisites.to_json(),
        "key_vault": {"name": s.keys.name, "uri": s.keys.uri},
        # What the add-ons stack cannot know from the stack file: cloud-provider-azure's azure.json and the
        # remediation job name these (none is a secret: managed identities, no client secret).
        "cloud_ids": {
            "tenant_id": client.tenant_id,
            "subscription_id": client.subscription_id,
            "controller_client_id": controllers.cloud_provider_client_id,
            "remediation_client_id": controllers.remediation_client_id,
        },
        "sizing": {role: choice.to_dict() for role, choice in prep.sizes.items()},
        # The versions in force and where each was read (modules/bootstrap/versions.py): agk plan lists them.
        "versions": versions.in_force(prep.bootstrap.kubernetes_version),
        # The gallery image version each role boots: a new one is a planned roll (agk plan --base lists it).
        "node_images": {role: image.version for role, image in prep.node_images.items()},
        # What the sizes follow: the peak node count and the step it is rounded up to (agk plan --base says
        # when a change crosses one).
        "sized_for": {"peak_nodes": prep.pools.peak_nodes, "nodes": prep.pools.sizing_nodes},
        # Every count-driven size in force and the formula behind it (modules/vm_sizing/formulas.py): agk plan
        # lists them.
        "sizes": prep.chosen_sizes(),
        "address_plan": prep.plan.vnet.to_dict(),
        "hub": hub_stack_name(cluster),
        "addons_spec": prep.addons.to_json(),
        "kubeconfig": pulumi.Output.secret(
            pulumi.Output.all(
                pki.ca_certs.apply(lambda cas: cas[KUBERNETES_CA]),
                pki.secrets[f"cert:{ADMIN}"],
                pki.secrets[f"key:{ADMIN}"],
            ).apply(lambda pems: admin_kubeconfig(cluster.name, control_endpoint, pems[0], pems[1], pems[2]))
        ),
    }


def build(stack: str, config: StackConfig) -> dict[str, Any]:
    """Validate and plan, then construct every resource of the stack; returns the outputs."""
    if config.kind == "addons":
        return build_addons(config)
    if config.kind == "images":
        return build_images(stack, config)
    if config.kind == "hub":
        return build_hub(stack, config, plan_stack(stacks_dir(), stack, config, deployed_subnets(last_outputs(stack))))
    last = last_outputs(stack)
    return build_cluster(
        prepare_cluster(
            stack, config, stacks_dir(), deployed_subnets(last), deployed_scale_sets(last), deployed_large_pools(last)
        )
    )


def export(outputs: dict[str, Any]) -> None:
    for key, value in outputs.items():
        pulumi.export(key, value)
