"""The add-ons' answers to Checkov's Kubernetes checks, one place: each check an object fails on purpose,
with why, written onto the object as Checkov's skip annotations (``checkov.io/skip<N>: <check>=<why>``,
https://www.checkov.io/2.Basics/Suppressing%20and%20Skipping%20Policies.html, Kubernetes). `make lint` renders every cluster's
objects and runs Checkov over them: a finding not answered here fails the build, and a row here that
names no object fails tests/cluster/test_scan_exceptions.py.

Most rows are node agents that need the host (the why is the object's own, from its builder: the same
text the ``exception_key`` annotation carries for the policy pack). The annotations go on the object's own
metadata, not its pod template, so adding one restarts no pod.
"""

from __future__ import annotations

from collections.abc import Iterable

from modules.cluster.objects import cloud_provider, coredns, health, policy_engine, preflight, rdma
from modules.cluster.objects.common import BALLOON_NS, HEALTH_NS, Obj
from modules.labels import ROLL

ANNOTATION = "checkov.io/skip"

TOKEN = "calls the API server as its own ServiceAccount (its RBAC is beside it), so the token is mounted"
NO_DIGEST = (
    "no public source pairs this tag with a digest: pinned by its immutable release tag (modules/cluster/images.py"
    " says where each tag was read)"
)
PULL = "IfNotPresent: the reference is an immutable release tag, so Always would only add a registry round trip"
CONTAINERS = "each container sets its own securityContext (the exception is the object's agk justification)"
NO_PROBE_SOCKET = "serves gRPC on a unix socket only: the kubelet's device-plugin re-registration is its health"
NS = "kube-system"

# (kind, namespace, name; "*" for every object of that kind there) -> ((check, why), ...)
OWN_CERT_SECRET = (
    "a Role in its own namespace, where its serving certificate Secret lives: it rotates that certificate itself"
    " (upstream's RBAC)"
)
OWN_CA_BUNDLE = "patches its serving CA into its own webhook configurations (cert rotation, upstream's RBAC)"
KUEUE_NS = "kueue-system"
WI_NS = "azure-workload-identity-system"

SKIPS: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {
    ("ClusterRole", "", "azure-wi-webhook"): (("CKV_K8S_155", OWN_CA_BUNDLE),),
    ("ClusterRole", "", "kueue-manager-role"): (("CKV_K8S_155", OWN_CA_BUNDLE),),
    ("Deployment", WI_NS, "azure-wi-webhook-controller-manager"): (("CKV_K8S_38", TOKEN),),
    ("Deployment", KUEUE_NS, "kueue-controller-manager"): (("CKV_K8S_38", TOKEN),),
    ("RoleBinding", WI_NS, "azure-wi-webhook"): (("CKV2_K8S_5", OWN_CERT_SECRET),),
    ("RoleBinding", KUEUE_NS, "kueue-manager-secrets-rolebinding"): (("CKV2_K8S_5", OWN_CERT_SECRET),),
    ("ClusterRole", "", "kubelet-serving-approver"): (
        (
            "CKV_K8S_156",
            "the approver's one job: approve on the kubelet-serving signer only, after checking each request"
            " against its Node (modules/cluster/scripts/approve_serving.py)",
        ),
    ),
    ("CronJob", HEALTH_NS, "gpu-preflight-retest"): (("CKV_K8S_38", TOKEN),),
    ("CronJob", HEALTH_NS, "gpu-remediation"): (("CKV_K8S_19", health.IMDS_WHY), ("CKV_K8S_38", TOKEN)),
    ("CronJob", HEALTH_NS, ROLL): (("CKV_K8S_19", health.IMDS_WHY), ("CKV_K8S_38", TOKEN)),
    ("DaemonSet", HEALTH_NS, "dcgm-exporter"): (
        ("CKV_K8S_19", health.HOST_NETWORK_WHY),
        ("CKV_K8S_23", health.DCGM_WHY),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_40", health.DCGM_WHY),
    ),
    ("DaemonSet", HEALTH_NS, "gpu-preflight"): (
        ("CKV_K8S_19", f"{preflight.DIAG_WHY}; {health.HOST_NETWORK_WHY}"),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_8", "a one-shot test: the pod goes away once the node's label changes (pass or fail)"),
        ("CKV_K8S_9", "a one-shot test: the pod goes away once the node's label changes (pass or fail)"),
    ),
    ("DaemonSet", HEALTH_NS, "iptables-exporter"): (
        ("CKV_K8S_19", health.IPTABLES_WHY),
        ("CKV_K8S_23", health.IPTABLES_WHY),
        ("CKV_K8S_25", health.IPTABLES_WHY),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_40", health.IPTABLES_WHY),
    ),
    ("DaemonSet", HEALTH_NS, "node-problem-detector"): (
        *((check, health.NPD_WHY) for check in ("CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28")),
        ("CKV_K8S_19", health.HOST_NETWORK_WHY),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_31", f"privileged, so no seccomp profile applies: {health.NPD_WHY}"),
        ("CKV_K8S_37", health.NPD_WHY),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_40", health.NPD_WHY),
    ),
    ("DaemonSet", HEALTH_NS, "nvidia-device-plugin"): (
        ("CKV_K8S_19", health.HOST_NETWORK_WHY),
        *((check, health.DEVICE_PLUGIN_WHY) for check in ("CKV_K8S_23", "CKV_K8S_25", "CKV_K8S_39", "CKV_K8S_40")),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_8", NO_PROBE_SOCKET),
        ("CKV_K8S_9", NO_PROBE_SOCKET),
    ),
    ("DaemonSet", HEALTH_NS, rdma.APP): (
        *(
            (check, rdma.WHY)
            for check in ("CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_40")
        ),
        ("CKV_K8S_19", health.HOST_NETWORK_WHY),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_31", f"privileged, so no seccomp profile applies: {rdma.WHY}"),
        ("CKV_K8S_8", NO_PROBE_SOCKET),
        ("CKV_K8S_9", NO_PROBE_SOCKET),
    ),
    ("DaemonSet", NS, cloud_provider.CNM): (
        ("CKV_K8S_15", PULL),
        ("CKV_K8S_19", f"{cloud_provider.CNM_WHY}; {health.HOST_NETWORK_WHY}"),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_43", NO_DIGEST),
    ),
    ("DaemonSet", NS, policy_engine.AGENT): (
        *(
            (check, policy_engine.WHY)
            for check in ("CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_28", "CKV_K8S_37", "CKV_K8S_40")
        ),
        ("CKV_K8S_15", PULL),
        ("CKV_K8S_19", health.HOST_NETWORK_WHY),
        ("CKV_K8S_29", CONTAINERS),
        ("CKV_K8S_31", f"privileged, so no seccomp profile applies: {policy_engine.WHY}"),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_43", NO_DIGEST),
    ),
    ("Deployment", BALLOON_NS, "*"): (
        ("CKV_K8S_8", "a pause container holding capacity: nothing to probe, and preemption is its whole life"),
        ("CKV_K8S_9", "a pause container holding capacity: it serves nothing, so there is nothing to be ready for"),
    ),
    ("Deployment", NS, cloud_provider.CCM): (
        ("CKV_K8S_15", PULL),
        ("CKV_K8S_19", health.IMDS_WHY),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_43", NO_DIGEST),
    ),
    ("Deployment", NS, coredns.NAME): (
        ("CKV_K8S_15", PULL),
        ("CKV_K8S_25", coredns.BIND_WHY),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_43", NO_DIGEST),
    ),
    ("Deployment", NS, "kube-state-metrics"): (("CKV_K8S_38", TOKEN),),
    ("Deployment", NS, "kubelet-serving-approver"): (
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_8", "a watch loop with no listener: a failed watch exits the process and the kubelet restarts it"),
        ("CKV_K8S_9", "serves nothing: no Service sends it traffic"),
    ),
    ("Deployment", "scheduler-plugins", "scheduler-plugins-scheduler"): (
        ("CKV_K8S_15", PULL),
        ("CKV_K8S_38", TOKEN),
        ("CKV_K8S_43", NO_DIGEST),
    ),
}


def key_of(obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata", {})
    return (str(obj["kind"]), str(meta.get("namespace", "")), str(meta.get("name", "")))


def skips_for(obj: Obj) -> tuple[tuple[str, str], ...]:
    kind, ns, name = key_of(obj)
    return SKIPS.get((kind, ns, name), ()) or SKIPS.get((kind, ns, "*"), ())


def annotate(objs: Iterable[Obj]) -> list[Obj]:
    """``objs`` with each one's skips as annotations on its own metadata (a copy where any are added)."""
    out = []
    for obj in objs:
        skips = skips_for(obj)
        if skips:
            meta = dict(obj["metadata"])
            # Checkov splits the value at every "=" and expects two parts (kubernetes_utils.get_skipped_checks):
            # a why that quotes a setting (NVIDIA_VISIBLE_DEVICES=all) says it with a colon instead.
            notes = {
                f"{ANNOTATION}{i}": f"{check}={why.replace('=', ': ')}" for i, (check, why) in enumerate(skips, start=1)
            }
            meta["annotations"] = {**meta.get("annotations", {}), **notes}
            obj = {**obj, "metadata": meta}
        out.append(obj)
    return out
