"""Admission without webhook code: CEL policies that keep teams on their own nodes and off the host.

Every policy binds every namespace but an explicit list of the toolkit's own system namespaces
(``SYSTEM_NAMESPACES``, ``HOST_ACCESS_NAMESPACES``): a namespace created later, labelled or not, is
held to the same rules as a team's, so nobody escapes a policy by creating a namespace.

A pod in a team namespace (one labelled ``<domain>/team``) may tolerate only its own team's
taint; only the ``borrow`` priority class, and pods Kueue admitted to another team's pool (held
behind Kueue's scheduling gate until Kueue places them), may tolerate other teams. A pod in any other
namespace tolerates no team's taint at all. Nobody may tolerate the preflight taint (that is how untested
nodes stay empty), so wildcard tolerations are refused. Nobody may name a node (``spec.nodeName``) either:
such a pod skips the scheduler, and with it every one of those taints.
From Kubernetes 1.36 a MutatingAdmissionPolicy adds the team toleration itself; before that,
users write it in their pod spec (docs/gpu-jobs.md).

``tenant-pod-security`` is the Pod Security Standards' baseline level, control by control
(kubernetes.io/docs/concepts/security/pod-security-standards, as k8s.io/pod-security-admission
implements it at the pinned minor), with one addition: a container may add ``IPC_LOCK``, which
InfiniBand needs to register (pin) memory and which baseline refuses. That one capability is why
the team namespaces' Pod Security labels cannot enforce baseline themselves (docs/tenancy.md).

A second policy keeps pods to the GPUs the device plugin allocated them. With nvidia as the default
runtime, the node's nvidia-container-runtime ignores ``NVIDIA_VISIBLE_DEVICES`` from unprivileged
containers (the node bootstrap sets ``accept-nvidia-visible-devices-envvar-when-unprivileged =
false``) and reads allocations from the device plugin's mounts; "privileged" to the runtime means
CAP_SYS_ADMIN in the bounding set (nvidia-container-toolkit internal/config/image/privileged.go), and
it accepts any mount from /dev/null under /var/run/nvidia-container-devices (cuda_image.go,
requestsFromMounts). So outside the namespaces of this toolkit's own node agents a pod may not set
the variable or mount under that directory. Running privileged, adding SYS_ADMIN, the host network (which
reaches the node's DCGM engine on localhost:5555) and host paths are refused by ``tenant-pod-security``,
which binds exactly the same namespaces: each rule lives in one policy (a pod breaking rules of both is
refused by whichever the API server evaluates first).
"""

from __future__ import annotations

from modules.cluster.objects.common import BALLOON_NS, GANG_NS, HEALTH_NS, Obj, meta
from modules.cluster.spec import AddonsSpec

KUEUE_GATE = "kueue.x-k8s.io/topology"
"""Topology Aware Scheduling's scheduling gate on every pod Kueue admits to a pool (Kueue apis/kueue/v1beta2
topology_types.go TopologySchedulingGate; pkg/podset FromAssignment adds it with the flavor's tolerations)."""
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
"""Kueue's controller (objects/queues.py NS and MANAGER), the one client that lifts that gate."""
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
"""What a kubelet sets on the API copy (mirror) of a static pod (k8s.io/api core/v1 MirrorPodAnnotationKey); the
node-side Scheduled Events agent, a stdlib script, keeps its own copy (host/scheduled_events.py MIRROR)."""
POLICY = "team-tolerations"
MUTATING_POLICY = "team-toleration-default"
GPU_POLICY = "gpu-isolation"
POD_SECURITY_POLICY = "tenant-pod-security"
# Namespaces of the toolkit's own node agents (device plugins, dcgm-exporter, preflight, RDMA plugin,
# cloud-node-manager), which must see every GPU and use the host: the only ones the host-access
# policies (gpu-isolation, tenant-pod-security) spare.
HOST_ACCESS_NAMESPACES = ("kube-system", HEALTH_NS)
# Every namespace whose pods the toolkit itself places on tainted nodes: the node agents (which tolerate
# everything), balloons (which tolerate their pool's team) and the gang scheduler. The team-toleration
# policy spares only these; no researcher has rights in them (docs/tenancy.md).
SYSTEM_NAMESPACES = (*HOST_ACCESS_NAMESPACES, BALLOON_NS, GANG_NS)
# Capabilities a container may add: Pod Security baseline's list (k8s.io/pod-security-admission
# policy/check_capabilities_baseline.go, capabilities_allowed_1_0), plus IPC_LOCK for InfiniBand.
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
TRAINING_CAPABILITIES = ("IPC_LOCK",)
# Baseline's safe sysctls at 1.32+ (check_sysctls.go, sysctlsAllowedV1Dot32).
BASELINE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
)
# Baseline's SELinux types at 1.31+ (check_seLinuxOptions.go, selinuxAllowedTypes1_31).
BASELINE_SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
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
    # A namespace without the team label belongs to no team: it may not tolerate any team's taint, not
    # even by borrowing (borrowed capacity is a team's, and its quota is counted in team namespaces).
    outsider = "variables.team == ''"
    where = "(variables.team == '' ? 'pod in namespace ' + namespaceObject.metadata.name : 'pod in team namespace ' + variables.team)"
    return [
        {
            "expression": (
                f"variables.unchanged || size(variables.foreign) == 0 || "
                f"(!({outsider}) && (variables.borrowing || variables.queued))"
            ),
            "messageExpression": (
                f"{outsider} ? 'pod in namespace ' + namespaceObject.metadata.name + ', which belongs to no team, "
                "tolerates a team\\'s taint: run it in its team\\'s namespace' : "
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
                f"{where} + ' tolerates the preflight taint (or every taint): name the taint keys it tolerates'"
            ),
            "reason": "Forbidden",
        },
        {
            # A pod created with spec.nodeName is never scheduled, so no NoSchedule taint (a team's, preflight's)
            # keeps it off a node: the kubelet admits it checking NoExecute taints only (k8s.io/kubernetes
            # v1.35.8 pkg/kubelet/lifecycle/predicate.go). The scheduler binds through pods/binding, which this
            # policy does not match, and every later UPDATE of a bound pod carries the name it was given. A node
            # may create its static pods' mirrors, which name it: NodeRestriction (which holds only for users in
            # system:nodes) admits no other pod from a node, and none bound elsewhere; the kubelet runs no pod
            # created through the API with the mirror annotation.
            "expression": (
                "request.operation != 'CREATE' || !has(object.spec.nodeName) || object.spec.nodeName == '' || "
                "(request.userInfo.username == 'system:node:' + object.spec.nodeName && "
                "has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups && "
                f"has(object.metadata.annotations) && '{MIRROR_ANNOTATION}' in object.metadata.annotations)"
            ),
            "messageExpression": (
                f"{where} + ' names its node (spec.nodeName), which skips the scheduler and every NoSchedule taint: "
                "choose nodes with nodeSelector or affinity'"
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


def all_namespaces_but(spared: tuple[str, ...]) -> Obj:
    """Every namespace, present or future, except ``spared`` (matched by the name label the API server
    sets on every namespace, which nobody can change: kubernetes.io/docs/reference/labels-annotations-taints,
    kubernetes.io/metadata.name)."""
    return {
        "namespaceSelector": {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(spared)}]
        }
    }


def validating_policy(
    name: str,
    resources: list[str],
    validations: list[dict[str, str]],
    spared: tuple[str, ...],
    variables: list[dict[str, str]] | None = None,
) -> list[Obj]:
    """A ValidatingAdmissionPolicy on CREATE and UPDATE of core ``resources`` that fails closed, and its Deny
    binding to every namespace but ``spared``."""
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": resources}]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta(name, app="admission"),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": rules},
            **({"variables": variables} if variables is not None else {}),
            "validations": validations,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": meta(name, app="admission"),
        "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": all_namespaces_but(spared)},
    }
    return [policy, binding]


def validating(spec: AddonsSpec) -> list[Obj]:
    # Not only team namespaces: a pod in any other namespace would otherwise tolerate every team.
    return validating_policy(POLICY, ["pods"], validations(), SYSTEM_NAMESPACES, variables(spec))


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
                f"has(c.volumeMounts) && c.volumeMounts.exists(m, m.mountPath.startsWith('{DEVICE_MOUNTS}'))"
            )
            + ")",
            "message": f"a container mounts under {DEVICE_MOUNTS}, the device plugin's GPU list: {fix}",
            "reason": "Forbidden",
        },
    ]


def gpu_isolation() -> list[Obj]:
    return validating_policy(
        GPU_POLICY, ["pods", "pods/ephemeralcontainers"], gpu_validations(), HOST_ACCESS_NAMESPACES
    )


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _pod_or_container(field: str, condition: str) -> str:
    """True when the pod's securityContext or some container's sets ``field`` to a value matching
    ``condition`` (over ``f``)."""
    pod = f"(has(object.spec.securityContext) && has(object.spec.securityContext.{field}) && "
    pod += f"[object.spec.securityContext.{field}].exists(f, {condition}))"
    return (
        pod
        + " || "
        + _any_container(
            f"has(c.securityContext) && has(c.securityContext.{field}) && "
            f"[c.securityContext.{field}].exists(f, {condition})"
        )
    )


def _host_handler(handler: str) -> str:
    """A probe or lifecycle handler ``handler`` (over ``c``) that names a host."""
    parts = [
        f"(has({handler}.{kind}) && has({handler}.{kind}.host) && {handler}.{kind}.host != '')"
        for kind in ("httpGet", "tcpSocket")
    ]
    return f"(has({handler}) && ({' || '.join(parts)}))"


def pod_security_validations() -> list[dict[str, str]]:
    """The Pod Security Standards' baseline controls (pod-security-standards, "Baseline"), each its own
    validation so the refusal names the control; the only departure is ``TRAINING_CAPABILITIES``."""
    allowed_caps = _cel_list(BASELINE_CAPABILITIES + TRAINING_CAPABILITIES)
    probes = [_host_handler(f"c.{p}") for p in ("livenessProbe", "readinessProbe", "startupProbe")]
    hooks = [_host_handler(f"c.lifecycle.{h}") for h in ("postStart", "preStop")]
    host_handlers = " || ".join(probes) + " || (has(c.lifecycle) && (" + " || ".join(hooks) + "))"
    apparmor_key = "container.apparmor.security.beta.kubernetes.io/"
    checks: list[tuple[str, str]] = [
        (
            "!((has(object.spec.hostNetwork) && object.spec.hostNetwork) || (has(object.spec.hostPID) && "
            "object.spec.hostPID) || (has(object.spec.hostIPC) && object.spec.hostIPC))",
            "the pod shares the node's network, PID or IPC namespace (hostNetwork, hostPID, hostIPC): Pod Security "
            "baseline forbids it; drop the field",
        ),
        (
            "!("
            + _any_container(
                "has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged"
            )
            + ")",
            "a container is privileged: Pod Security baseline forbids it; drop securityContext.privileged",
        ),
        (
            "!("
            + _any_container(
                "has(c.securityContext) && has(c.securityContext.capabilities) && "
                "has(c.securityContext.capabilities.add) && "
                f"c.securityContext.capabilities.add.exists(a, !(a in {allowed_caps}))"
            )
            + ")",
            "a container adds a capability beyond Pod Security baseline's list and IPC_LOCK: add only IPC_LOCK "
            "(InfiniBand) or a baseline capability",
        ),
        (
            "!(has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.hostPath)))",
            # / would be root on the node: its kubelet credentials, its identity's bundle, every GPU's device.
            "the pod mounts a hostPath volume: Pod Security baseline forbids it; use a ConfigMap, an emptyDir or "
            "a PersistentVolumeClaim (the NCCL topology file is the ConfigMap nccl-topology)",
        ),
        (
            "!(" + _any_container("has(c.ports) && c.ports.exists(p, has(p.hostPort) && p.hostPort != 0)") + ")",
            "a container opens a host port: Pod Security baseline forbids it; drop ports[].hostPort",
        ),
        (
            "!(" + _pod_or_container("windowsOptions", "has(f.hostProcess) && f.hostProcess") + ")",
            "the pod asks for a Windows HostProcess container: Pod Security baseline forbids it",
        ),
        (
            "!(" + _any_container(host_handlers) + ")",
            "a probe or lifecycle hook names a host (httpGet.host, tcpSocket.host): Pod Security baseline forbids "
            "it; drop the host field",
        ),
        (
            "!(" + _pod_or_container("appArmorProfile", "f.type == 'Unconfined'") + ") && "
            f"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, !k.startsWith('{apparmor_key}')"
            " || object.metadata.annotations[k] in ['', 'runtime/default'] || "
            "object.metadata.annotations[k].startsWith('localhost/')))",
            "the pod or a container runs without AppArmor (Unconfined): Pod Security baseline forbids it; use "
            "RuntimeDefault or a Localhost profile",
        ),
        (
            "!("
            + _pod_or_container(
                "seLinuxOptions",
                f"(has(f.type) && !(f.type in {_cel_list(BASELINE_SELINUX_TYPES)})) || (has(f.user) && f.user != '')"
                " || (has(f.role) && f.role != '')",
            )
            + ")",
            "the pod or a container sets an SELinux user, role or type outside Pod Security baseline's: drop it",
        ),
        (
            # Baseline allows any procMount in a user namespace (hostUsers: false; check_procMount_baseline.go, 1.35);
            # the API server refuses Unmasked without one anyway (pkg/apis/core/validation): kept to mirror baseline.
            "(has(object.spec.hostUsers) && !object.spec.hostUsers) || !("
            + _any_container(
                "has(c.securityContext) && has(c.securityContext.procMount) && c.securityContext.procMount != 'Default'"
            )
            + ")",
            "a container unmasks /proc (procMount): Pod Security baseline forbids it; drop securityContext.procMount",
        ),
        (
            "!(" + _pod_or_container("seccompProfile", "f.type == 'Unconfined'") + ")",
            "the pod or a container runs without seccomp (Unconfined): Pod Security baseline forbids it; use "
            "RuntimeDefault",
        ),
        (
            "!(has(object.spec.securityContext) && has(object.spec.securityContext.sysctls) && "
            f"object.spec.securityContext.sysctls.exists(s, !(s.name in {_cel_list(BASELINE_SYSCTLS)})))",
            "the pod sets a sysctl outside Pod Security baseline's safe set: drop it",
        ),
    ]
    return [{"expression": expr, "message": message, "reason": "Forbidden"} for expr, message in checks]


def pod_security() -> list[Obj]:
    """``tenant-pod-security``: baseline plus IPC_LOCK, in every namespace but the node agents'."""
    return validating_policy(
        POD_SECURITY_POLICY, ["pods", "pods/ephemeralcontainers"], pod_security_validations(), HOST_ACCESS_NAMESPACES
    )


def admission(spec: AddonsSpec) -> list[Obj]:
    # tenant-pod-security (pod_security()) is rendered last by modules/cluster/manifests.py.
    return validating(spec) + mutating(spec) + gpu_isolation()
