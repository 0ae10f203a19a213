"""The program of a ``cluster`` stack: a spoke with its control plane, monitoring hosts, pools and storage.

Everything is planned first (modules/stackplan/prepare.py: addresses, pools, sizes, NSG rules, who may use
which container); this only turns the plan into components, in the order their machines need each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pulumi
from pulumi_azure_native import authorization

from modules.azure.context import DeployContext, stack_context
from modules.azure.control_plane import ControlPlane, ControlPlaneArgs, EtcdGroup
from modules.azure.host_boot import HostBoot, grant_token_writers
from modules.azure.hosts import NatHost, NatHostArgs, PrometheusHosts, PrometheusHostsArgs
from modules.azure.identities import ClusterIdentities, ClusterIdentitiesArgs
from modules.azure.keyvault import ClusterVault, ClusterVaultArgs, vault_name
from modules.azure.node_pool import NodePool, NodePoolArgs
from modules.azure.pki import ClusterPki, ClusterPkiArgs
from modules.azure.spoke import Egress, HubRef, SpokeNetwork, SpokeNetworkArgs
from modules.azure.storage import ClusterStorage, ClusterStorageArgs, Grant, account_name, blob_url
from modules.azure.workload_identity import WorkloadIdentity, WorkloadIdentityArgs
from modules.bootstrap import node_tokens, versions
from modules.bootstrap.delivery import check_sizes
from modules.bootstrap.etcd_backup import ACCOUNT_URL_FACT
from modules.bootstrap.kubeconfig import admin_kubeconfig
from modules.bootstrap.pki import ADMIN, KUBERNETES_CA, SERVICE_ACCOUNT_RSA, pki_spec
from modules.bootstrap.roles import Role
from modules.config_model import PROJECT
from modules.identity import oidc
from modules.identity.plan import workload_identity_component
from modules.stackplan.addresses import hub_stack_name, limits_tag
from modules.stackplan.config import ClusterConfig
from modules.stackplan.pools import SYSTEM
from modules.stackplan.prepare import ClusterPrep
from modules.stackplan.storage_access import Access
from modules.vm_sizing.formulas import etcd_iops


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
    hub = _hub_ref(cluster, [str(p) for p in prep.plan.hub_space])
    network = SpokeNetwork(
        cluster.name,
        SpokeNetworkArgs(
            ctx=ctx,
            plan=prep.plan.vnet,
            limits_tag=limits_tag(config),
            hub=hub,
            allow_forwarded_traffic=cluster.allow_forwarded_traffic,
            egress=[Egress(e.name, e.subnets, e.public_ips, e.zone) for e in prep.egress],
            extra_rules=prep.subnet_rules,
        ),
    )
    pki = ClusterPki(f"{cluster.name}-pki", ClusterPkiArgs(spec=pki_spec(prep.bootstrap)))
    location = config.location
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
            sizing_nodes=nodes,
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


def _monitoring_and_nat(s: _Spoke, boot: Mapping[str, pulumi.Input[str]], host_boot: HostBoot) -> PrometheusHosts:
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
            custom_data=host_boot("nat", nat_host),
            service_cidr=str(addresses.service_cidr),
            hub_route_table_name=s.hub.route_table_name,
            hub_resource_group_name=s.hub.resource_group_name,
            depends_on=s.ready,
        ),
    )
    return prometheus


def _node_pools(s: _Spoke, controllers: ClusterIdentities, host_boot: HostBoot) -> dict[str, NodePool]:
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
                custom_data=host_boot(pool.role, pool.name),
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
    account = oidc.issuer_account_name(s.cluster.name, identity.entra.tenant_id, s.prep.config.location, s.prep.stack)
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


def _storage(
    s: _Spoke,
    account: pulumi.Output[str],
    node_pools: Mapping[str, NodePool],
    control: ControlPlane,
    identity: WorkloadIdentity | None,
) -> None:
    """The cluster's storage account, as planned (prep.storage), each grant's principal resolved."""
    plan = s.prep.storage
    if plan is None:
        return
    # Managed identities are granted as ServicePrincipal (Azure skips the directory lookup that races a new one).
    teams = identity.principal_ids if identity else {}
    principals: dict[str, Callable[[str], pulumi.Input[str]]] = {
        "pool": lambda pool: node_pools[pool].principal_id,
        "team": lambda team: teams[team],
        "etcd": lambda host: control.identities[host],
        "group": lambda group: group,
    }

    def grant(row: Access) -> Grant:
        kind = "Group" if row.kind == "group" else "ServicePrincipal"
        return Grant(row.key, principals[row.kind](row.principal), kind, row.access)

    ClusterStorage(
        f"{s.cluster.name}-storage",
        ClusterStorageArgs(
            ctx=s.ctx,
            account_name=account,
            containers=list(plan.containers),
            grants={container: [grant(r) for r in rows] for container, rows in plan.grants.items()},
            retention_days=dict(plan.retention_days),
            endpoint_subnet_id=s.subnet["endpoints"],
            vnet_id=s.network.id,
            dns_zone_id=s.hub.blob_dns_zone_id,
            dns_resource_group_name=s.hub.resource_group_name,
            depends_on=s.ready,
        ),
    )


def build(prep: ClusterPrep) -> dict[str, Any]:
    """A cluster spoke: network, PKI and vault, the control plane and monitoring hosts, the pools,
    storage; in that order, since each machine's bundle and grants need what comes before it."""
    stack, config, cluster, addresses = prep.stack, prep.config, prep.config.cluster, prep.addresses
    # Every bundle must fit its Key Vault secret: checked with certificates of the real size before
    # anything is built, so an oversized one fails the plan naming its host.
    check_sizes(prep.bootstrap)
    _, ctx = stack_context(stack, config)
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
    location = config.location
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
    host_boot = HostBoot(prep.bootstrap, s.pki, s.keys, token_secrets)
    boot = {host: host_boot(role, host, facts.get(role)) for role, hosts in roles.items() for host in hosts}
    control = _control_plane(s, boot)
    prometheus = _monitoring_and_nat(s, boot, host_boot)
    controllers = ClusterIdentities(f"{cluster.name}-controllers", ClusterIdentitiesArgs(ctx=ctx, cluster=cluster.name))
    node_pools = _node_pools(s, controllers, host_boot)
    resolve_token_secrets(
        pulumi.Output.all(**{p: s.keys.secrets[node_tokens.token_secret_key(p)].name for p in prep.pools.pools}).apply(
            dict
        )
    )
    grant_token_writers(s.keys, prep.pools.pools, {h: control.identities[h] for h in addresses.apiservers})
    identity = _workload_identity(s)
    _storage(s, account, node_pools, control, identity)
    outputs = _outputs(s, client, control, prometheus, controllers, node_pools)
    if identity is not None:
        # What the add-ons stack annotates the teams' service accounts with (client ids are no secret).
        outputs["workload_identity"] = {"issuer": identity.issuer, "client_ids": identity.client_ids}
    return outputs


def _outputs(
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
