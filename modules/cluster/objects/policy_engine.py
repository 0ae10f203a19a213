"""The NetworkPolicy engine: kube-network-policies (kubernetes-sigs, SIG Network), one agent on every node.

Azure CNI in this cluster's mode (pod addresses are secondary IP configurations of the node's NIC, pods reach
the host through ``azv*`` veths, no overlay) enforces no NetworkPolicy; docs/tenancy.md compares the engines
and says why this one. kube-network-policies works at the packet level and needs nothing from the CNI: its agent
puts a table in the host's nftables whose postrouting chain sends the packets to or from its node's pods that a
policy selects, until a verdict marks their connection, to an nfqueue; the agent reads them there, looks up the
pods on both ends and answers accept or drop by the cluster's NetworkPolicies, and conntrack carries the
verdict for the rest of the connection (its pkg/dataplane/controller.go). Pod traffic, between nodes and on one node, is routed through the host (Azure
CNI's transparent mode), so it crosses that chain on the nodes at both ends; each agent decides for its own
node's pods.

The standard flavour: each agent watches every Pod (its managed fields dropped), Namespace and NetworkPolicy of
the cluster, so it can name the pod at the far end of any connection. The ip-tracker flavour, where two central
trackers watch the pods and the agents ask them, is not used: at v1.1.0 and v1.1.1 an agent decides from a
stale or missing copy of the pod addresses after it reconnects to a tracker with another history (a replaced
tracker pod, or the other replica) and notices nothing (docs/tenancy.md). The agents' watches are what this
costs the API servers; the agent's memory holds the cluster's pods (``formulas.policy_agent``).

With NRI (containerd 2's node resource interface, on by default) an agent identifies a new local pod from the
runtime as its sandbox starts, before the API server has its status (kubernetes/kubernetes#85966); the addresses
it diverts to its queue still come from the API server. v1.1.1, not v1.1.0: v1.1.0 diverted the addresses of
host-network pods a policy selects (the node's own, for gpu-health's deny-all), which sent the node's own
connections through the queue.

Fail-open (the agent's default): while an agent is not running its queue is bypassed and packets pass, so
restarting or upgrading the engine never cuts a training job's connections; policies are not enforced on that
node meanwhile. Host-network pods (the node agents, the engine itself) are outside every policy.
"""

from __future__ import annotations

from modules import labels
from modules.cluster import images
from modules.cluster.objects.common import (
    Obj,
    cluster_role,
    cluster_role_binding,
    exception_key,
    meta,
    scrape_annotations,
    service_account,
    sized,
    tolerate_everything,
)
from modules.cluster.objects.health import HOST_NETWORK_WHY, host_network
from modules.cluster.spec import AddonsSpec
from modules.vm_sizing.formulas import Resources

NS = "kube-system"
AGENT = labels.POLICY_AGENT
METRICS_PORT = 9080
"""The agent's Prometheus metrics (its --metrics-bind-address default): verdicts, queue depth, latency."""
NFQUEUE_ID = 98
"""The nfqueue the agent's nftables rules divert to (upstream's install.yaml): no other program on the nodes
uses nfqueue."""
ROLL_UNAVAILABLE = "2%"
"""Agents restarted at once in a roll: each one lists every Pod again when it starts (150 at prod-7500's size)."""

WHY = (
    "privileged on the host network: the agent writes its table into the host's nftables and takes new "
    "connections' first packets from an nfqueue in the host's network namespace, and as an NRI plugin it "
    "connects to the container runtime's socket (/var/run/nri)"
)

RULES: list[Obj] = [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["list", "watch"]},
]


def agent_size(spec: AddonsSpec) -> Resources:
    engine = spec.policy_engine
    return Resources(engine.cpu_millis, engine.cpu_limit_millis, engine.memory_mib)


def agent(spec: AddonsSpec) -> Obj:
    labels = {"app.kubernetes.io/name": AGENT}
    why = {exception_key(spec): f"{WHY}; {HOST_NETWORK_WHY}"}
    # /metrics is the only HTTP endpoint the agent serves: it answers once the process runs.
    probe = {"httpGet": {"host": "127.0.0.1", "path": "/metrics", "port": METRICS_PORT}, "timeoutSeconds": 5}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(AGENT, NS, app=AGENT, annotations=why),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": ROLL_UNAVAILABLE}},
            "template": {
                "metadata": {"labels": labels, "annotations": {**why, **scrape_annotations(METRICS_PORT)}},
                "spec": host_network(
                    {
                        "serviceAccountName": AGENT,
                        "priorityClassName": "system-node-critical",
                        "tolerations": tolerate_everything(),
                        "containers": [
                            {
                                "name": AGENT,
                                "image": images.POLICY_AGENT,
                                "command": ["/bin/netpol"],
                                # No --v: at 2 and above the agent logs every connection it decides.
                                "args": [
                                    "--hostname-override=$(NODE_NAME)",
                                    f"--nfqueue-id={NFQUEUE_ID}",
                                    f"--metrics-bind-address=:{METRICS_PORT}",
                                ],
                                "env": [
                                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                                ],
                                "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                                "livenessProbe": {**probe, "initialDelaySeconds": 20},
                                "readinessProbe": probe,
                                "resources": sized(agent_size(spec)),
                                "securityContext": {"privileged": True, "readOnlyRootFilesystem": True},  # WHY
                                "volumeMounts": [{"name": "nri", "mountPath": "/var/run/nri"}],
                            }
                        ],
                        # The runtime's NRI socket only: containerd 2.1 and later hand NRI plugins the sandbox's
                        # addresses, so upstream's /var/run/netns mount (its fallback for older runtimes, which reads
                        # them inside the pod's network namespace: pkg/podinfo/nri/resolver.go getPodIPs) is left out.
                        "volumes": [{"name": "nri", "hostPath": {"path": "/var/run/nri", "type": "DirectoryOrCreate"}}],
                    }
                ),
            },
        },
    }


def policy_engine(spec: AddonsSpec) -> list[Obj]:
    if not spec.policy_engine.enabled:
        return []
    return [
        service_account(AGENT, NS, app=AGENT),
        cluster_role(AGENT, RULES, app=AGENT),
        cluster_role_binding(AGENT, AGENT, AGENT, NS, app=AGENT),
        agent(spec),
    ]
