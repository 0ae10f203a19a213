"""``tenant-services``: a Service outside the system namespaces stays inside the cluster.

cloud-controller-manager runs its service controller (objects/cloud_provider.py, ``--controllers=*,-cloud-node``),
so a ``LoadBalancer`` Service gets a rule on an Azure load balancer, on a public IP unless annotated
``service.beta.kubernetes.io/azure-load-balancer-internal`` (cloud-provider-azure, "Azure LoadBalancer"); a
``NodePort`` Service opens its port on every node of the cluster (kube-proxy), in every pool, whoever owns it.
Team members may write Services (objects/researchers.py), so both types are refused in every namespace but the
toolkit's own; a team that needs to serve outside the cluster asks the platform team, which owns those.

``externalIPs`` are refused cluster-wide by the API server's DenyServiceExternalIPs admission plugin
(templates/kube-apiserver.yaml.j2; CVE-2020-8554: a Service with an external IP intercepts traffic to that IP
from every node and pod), not here.
"""

from __future__ import annotations

from modules.cluster.objects.admission import SYSTEM_NAMESPACES, validating_policy
from modules.cluster.objects.common import Obj

POLICY = "tenant-services"
EXPOSED_TYPES = ("LoadBalancer", "NodePort")


def validations() -> list[dict[str, str]]:
    types = ", ".join(f"'{t}'" for t in EXPOSED_TYPES)
    return [
        {
            "expression": f"!has(object.spec.type) || !(object.spec.type in [{types}])",
            "messageExpression": (
                "'Service ' + object.metadata.name + ' in namespace ' + namespaceObject.metadata.name + ' is type ' "
                "+ object.spec.type + ', which reaches beyond the cluster (LoadBalancer: an Azure load balancer, "
                "public unless annotated internal; NodePort: a port on every node): use type ClusterIP, and ask the "
                "platform team to expose it'"
            ),
            "reason": "Forbidden",
        }
    ]


def service_exposure() -> list[Obj]:
    return validating_policy(POLICY, ["services"], validations(), SYSTEM_NAMESPACES)
