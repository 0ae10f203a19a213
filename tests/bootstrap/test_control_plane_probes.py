"""The control-plane static pods survive a slow first start: a startupProbe holds the liveness
probe off while etcd forms its quorum (kube-apiserver) or the API server comes up (controller-manager,
scheduler). Values are kubeadm's (cmd/kubeadm/app/util/staticpod/utils.go ``StartupProbe``: initial
delay and period 10 s, timeout 15 s, failureThreshold ceil(4 min / 10 s) = 24 from
``ControlPlaneComponentHealthCheckTimeout``); the manifests are checked by kubernetes-validate.
"""

from __future__ import annotations

import pytest
import yaml

from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import bundle, names

KUBEADM_STARTUP = {"initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 15, "failureThreshold": 24}
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


@pytest.mark.parametrize("component", COMPONENTS)
def test_control_plane_pods_start_slowly_without_being_killed(ctx: BootstrapContext, component: str) -> None:
    import kubernetes_validate

    node = bundle(ctx, "apiserver", names(ctx, "apiserver")[0])
    pod = yaml.safe_load(node.file(f"manifests/{component}.yaml").content)
    kubernetes_validate.validate(pod, ctx.kubernetes_minor, strict=True)
    container = pod["spec"]["containers"][0]
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    assert {k: startup[k] for k in KUBEADM_STARTUP} == KUBEADM_STARTUP
    # The same endpoint as the liveness probe: the pod counts as started once it would be live.
    assert startup["httpGet"] == liveness["httpGet"]
    # Four minutes of failures are tolerated before the kubelet restarts the container.
    budget = startup["initialDelaySeconds"] + startup["periodSeconds"] * startup["failureThreshold"]
    assert budget >= 4 * 60


def test_a_probe_kubernetes_does_not_know_is_refused(dev: BootstrapContext) -> None:
    import kubernetes_validate

    node = bundle(dev, "apiserver", names(dev, "apiserver")[0])
    pod = yaml.safe_load(node.file("manifests/kube-scheduler.yaml").content)
    pod["spec"]["containers"][0]["startupProbe"]["failureTreshold"] = 24  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, dev.kubernetes_minor, strict=True)
