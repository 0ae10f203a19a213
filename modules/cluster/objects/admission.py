"""Admission without webhook code: CEL policies that keep teams on their own nodes.

A pod in a team namespace (one labelled ``<domain>/team``) may tolerate only its own team's
taint; only the ``borrow`` priority class, and pods Kueue admitted to another team's pool (held
behind Kueue's scheduling gate until Kueue places them), may tolerate other teams. Nobody may tolerate the
preflight taint (that is how untested nodes stay empty), so wildcard tolerations are refused.
From Kubernetes 1.36 a MutatingAdmissionPolicy adds the team toleration itself; before that,
users write it in their pod spec (README).

A second policy keeps pods to the GPUs the device plugin allocated them. With nvidia as the default
runtime, the node's nvidia-container-runtime ignores ``NVIDIA_VISIBLE_DEVICES`` from unprivileged
containers (the node bootstrap sets ``accept-nvidia-visible-devices-envvar-when-unprivileged =
false``) and reads allocations from the device plugin's mounts; "privileged" to the runtime means
CAP_SYS_ADMIN in the bounding set (nvidia-container-toolkit internal/config/image/privileged.go), and
it accepts any mount from /dev/null under /var/run/nvidia-container-devices (cuda_image.go,
requestsFromMounts). So outside the namespaces of this toolkit's own node agents a pod may not set
the variable, run privileged, add SYS_ADMIN, mount under that directory, or use the host network
(which reaches the node's DCGM engine on localhost:5555).
"""

from __future__ import annotations

from modules.cluster.objects.common import Obj, meta
from modules.cluster.spec import AddonsSpec

KUEUE_GATE = "kueue.x-k8s.io/topology"
"""Topology Aware Scheduling's scheduling gate on every pod Kueue admits to a pool (Kueue apis/kueue/v1beta2
topology_types.go TopologySchedulingGate; pkg/podset FromAssignment adds it with the flavor's tolerations)."""
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
"""Kueue's controller (objects/queues.py NS and MANAGER), the one client that lifts that gate."""
POLICY = "team-tolerations"
MUTATING_POLICY = "team-toleration-default"
GPU_POLICY = "gpu-isolation"
# Namespaces of the toolkit's own node agents (device plugins, dcgm-exporter, preflight), which must see every GPU.
GPU_AGENT_NAMESPACES = ("kube-system", "gpu-health")
DEVICE_MOUNTS = "/var/run/nvidia-container-devices"
_LISTS = ("containers", "initContainers", "ephemeralContainers")


def variables(spec: AddonsSpec) -> list[dict[str, str]]:
    team, preflight = spec.team_key, spec.preflight_key
    return [
        {
            "name": "team",
            "expression": (
                f"has(namespaceObject.metadata.labels) && '{team}' in namespaceObject.metadata.labels"
                f" ? namespaceObject.metadata.labels['{team}'] : ''"
            ),
        },
        {
            "name": "borrowing",
            "expression": "has(object.spec.priorityClassName) && object.spec.priorityClassName == 'borrow'",
        },
        {
            # Kueue admitted the pod's job to a pool (objects/queues.py): the pool's flavor adds its owner's
            # toleration, and Topology Aware Scheduling creates the pods behind its scheduling gate, which only
            # Kueue lifts (validations below), after pinning each pod to a node of the admitted pool.
            "name": "queued",
            "expression": (
                f"has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{KUEUE_GATE}')"
            ),
        },
        {
            # An update that leaves the tolerations as they were adds no access (the job controller removing
            # its finalizer, Kueue lifting its gate): only what a request adds is judged.
            "name": "unchanged",
            "expression": (
                "request.operation == 'UPDATE' && "
                "(has(oldObject.spec.tolerations) ? oldObject.spec.tolerations : []) == "
                "(has(object.spec.tolerations) ? object.spec.tolerations : [])"
            ),
        },
        {
            "name": "ungated",
            "expression": (
                "request.operation == 'UPDATE' && has(oldObject.spec.schedulingGates) && "
                f"oldObject.spec.schedulingGates.exists(g, g.name == '{KUEUE_GATE}') && "
                f"!(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{KUEUE_GATE}'))"
            ),
        },
        {
            "name": "tolerations",
            "expression": "has(object.spec.tolerations) ? object.spec.tolerations : []",
        },
        {
            # Tolerations matching some other team's taint: a wildcard (empty key), the team key
            # with Exists, or the team key with a value other than the namespace's team.
            "name": "foreign",
            "expression": (
                "variables.tolerations.filter(t, !has(t.key) || t.key == '' || "
                f"(t.key == '{team}' && ((has(t.operator) && t.operator == 'Exists') || "
                "(has(t.value) ? t.value : '') != variables.team)))"
            ),
        },
        {
            "name": "preflight",
            "expression": (f"variables.tolerations.filter(t, !has(t.key) || t.key == '' || t.key == '{preflight}')"),
        },
    ]


def validations() -> list[dict[str, str]]:
    return [
        {
            "expression": "variables.borrowing || variables.queued || variables.unchanged || size(variables.foreign) == 0",
            "messageExpression": (
                "'pod in team namespace ' + variables.team + ' tolerates another team\\'s taint: tolerate "
                "only team=' + variables.team + ' or set priorityClassName: borrow'"
            ),
            "reason": "Forbidden",
        },
        {
            # Kueue's gate is Kueue's to lift: anyone else lifting it would place a queued pod themselves.
            "expression": f"!variables.ungated || request.userInfo.username == '{KUEUE_USER}'",
            "messageExpression": (
                "'pod in team namespace ' + variables.team + ' is held by Kueue (scheduling gate "
                f"{KUEUE_GATE}): only Kueue admits it; delete the pod or its job instead'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": "size(variables.preflight) == 0",
            "messageExpression": (
                "'pod in team namespace ' + variables.team + ' tolerates the preflight taint (or every "
                "taint): name the taint keys it tolerates'"
            ),
            "reason": "Forbidden",
        },
    ]


def _match_pods(operations: list[str]) -> Obj:
    return {
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": operations, "resources": ["pods"]}]
    }


def _team_namespaces(spec: AddonsSpec) -> Obj:
    return {"namespaceSelector": {"matchExpressions": [{"key": spec.team_key, "operator": "Exists"}]}}


def validating(spec: AddonsSpec) -> list[Obj]:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta(POLICY, app="admission"),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": _match_pods(["CREATE", "UPDATE"]),
            "variables": variables(spec),
            "validations": validations(),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta(POLICY, app="admission"),
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": _team_namespaces(spec),
        },
    }
    return [policy, binding]


def mutation_expression(spec: AddonsSpec) -> str:
    toleration = (
        f"Object.spec.tolerations{{key: '{spec.team_key}', operator: 'Equal', value: variables.team, "
        "effect: 'NoSchedule'}"
    )
    return (
        "has(object.spec.tolerations) ? "
        f"[JSONPatch{{op: 'add', path: '/spec/tolerations/-', value: {toleration}}}] : "
        f"[JSONPatch{{op: 'add', path: '/spec/tolerations', value: [{toleration}]}}]"
    )


def mutating(spec: AddonsSpec) -> list[Obj]:
    if not spec.mutating_admission:
        return []
    team_var = variables(spec)[0]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": meta(MUTATING_POLICY, app="admission"),
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": _match_pods(["CREATE"]),
            "variables": [team_var],
            "matchConditions": [
                {
                    "name": "no-team-toleration-yet",
                    "expression": (
                        f"!has(object.spec.tolerations) || !object.spec.tolerations.exists(t, "
                        f"has(t.key) && t.key == '{spec.team_key}')"
                    ),
                }
            ],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": mutation_expression(spec)}}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": meta(MUTATING_POLICY, app="admission"),
        "spec": {"policyName": MUTATING_POLICY, "matchResources": _team_namespaces(spec)},
    }
    return [policy, binding]


def _any_container(condition: str) -> str:
    """True when some container of any kind matches ``condition`` (over ``c``).

    One clause per list: containers, init and ephemeral containers are different types to the API
    server's CEL type checker, so the lists are not concatenated.
    """
    return " || ".join(f"(has(object.spec.{lst}) && object.spec.{lst}.exists(c, {condition}))" for lst in _LISTS)


def gpu_validations() -> list[dict[str, str]]:
    fix = "request GPUs with resources.limits nvidia.com/gpu instead"
    return [
        {
            "expression": "!("
            + _any_container("has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES')")
            + ")",
            "message": f"a container sets NVIDIA_VISIBLE_DEVICES, which would expose GPUs it was not allocated: {fix}",
            "reason": "Forbidden",
        },
        {
            "expression": "!("
            + _any_container(
                "has(c.securityContext) && ((has(c.securityContext.privileged) && c.securityContext.privileged) || "
                "(has(c.securityContext.capabilities) && has(c.securityContext.capabilities.add) && "
                "c.securityContext.capabilities.add.exists(a, a in ['SYS_ADMIN', 'CAP_SYS_ADMIN', 'ALL'])))"
            )
            + ")",
            "message": "a container is privileged or adds SYS_ADMIN, which sees every GPU on the node: drop it and "
            f"{fix}",
            "reason": "Forbidden",
        },
        {
            "expression": "!("
            + _any_container(
                f"has(c.volumeMounts) && c.volumeMounts.exists(m, m.mountPath.startsWith('{DEVICE_MOUNTS}'))"
            )
            + ")",
            "message": f"a container mounts under {DEVICE_MOUNTS}, the device plugin's GPU list: {fix}",
            "reason": "Forbidden",
        },
        {
            "expression": "!(has(object.spec.hostNetwork) && object.spec.hostNetwork)",
            "message": "the pod uses the host network, which reaches the node's DCGM engine and agents: use the pod "
            "network (InfiniBand comes from rdma/ib, not from the host network)",
            "reason": "Forbidden",
        },
    ]


def gpu_isolation() -> list[Obj]:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta(GPU_POLICY, app="admission"),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods", "pods/ephemeralcontainers"],
                    }
                ]
            },
            "validations": gpu_validations(),
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta(GPU_POLICY, app="admission"),
        "spec": {
            "policyName": GPU_POLICY,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(GPU_AGENT_NAMESPACES),
                        }
                    ]
                }
            },
        },
    }
    return [policy, binding]


def admission(spec: AddonsSpec) -> list[Obj]:
    return validating(spec) + mutating(spec) + gpu_isolation()
