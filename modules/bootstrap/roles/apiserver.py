"""An API server host's bundle: kube-apiserver, kube-controller-manager and kube-scheduler as static pods,
with their kubeconfigs, the cluster's PKI and the Secret encryption keys.
"""

from __future__ import annotations

from modules.bootstrap import encryption, node_tokens, pki
from modules.bootstrap.context import (
    PORTS,
    BootstrapContext,
)
from modules.bootstrap.layout import PATHS
from modules.bootstrap.node_files import NodeFile, SecretFile
from modules.bootstrap.roles.bundle import NodeBundle
from modules.bootstrap.roles.parts import (
    NODE_EXPORTER_STEP,
    RELOAD_STEP,
    SYSCTL_STEP,
    UNBLOCK_STEP,
    base_files,
    containerd_file,
    files_hash_slot,
    kubeconfig_file,
    kubelet_files,
    sysctl_file,
)
from modules.bootstrap.steps import Step, start
from modules.bootstrap.templating import render
from modules.vm_sizing.formulas import SCORED_NODES, scheduler_score_percent


def apiserver_bundle(ctx: BootstrapContext, name: str) -> NodeBundle:
    host = next(h for h in ctx.control_plane.apiservers if h.name == name)
    common = {
        "host": host,
        "paths": PATHS,
        "ports": PORTS,
        "cp": ctx.control_plane,
        "service_cidr": ctx.service_cidr,
        "files_hash": files_hash_slot(ctx),
    }
    apiserver = render(
        "kube-apiserver.yaml.j2",
        **common,
        image=ctx.images.apiserver,
        etcd=ctx.etcd,
        events_etcd=ctx.events_etcd,
        apiservers=len(ctx.control_plane.apiservers),
        cluster_domain=ctx.cluster_domain,
        identity=ctx.identity,
        kubelet_serving_ca=pki.KUBELET_SERVING_CA,
    )
    # The internal load balancer does not hairpin: components talk to their own host's server.
    local = f"https://127.0.0.1:{PORTS.apiserver}"
    score = scheduler_score_percent(ctx.sizing_nodes)
    files = (
        *base_files("apiserver"),
        NodeFile(f"{PATHS.manifests}/kube-apiserver.yaml", "manifests/kube-apiserver.yaml", apiserver),
        NodeFile(
            f"{PATHS.manifests}/kube-controller-manager.yaml",
            "manifests/kube-controller-manager.yaml",
            render(
                "kube-controller-manager.yaml.j2",
                **common,
                image=ctx.images.controller_manager,
                kubelet_serving_ca=pki.KUBELET_SERVING_CA,
            ),
        ),
        NodeFile(
            f"{PATHS.manifests}/kube-scheduler.yaml",
            "manifests/kube-scheduler.yaml",
            render("kube-scheduler.yaml.j2", **common, image=ctx.images.scheduler),
        ),
        NodeFile(
            PATHS.scheduler_config,
            "scheduler-config.yaml",
            render(
                "scheduler-config.yaml.j2",
                cp=ctx.control_plane,
                paths=PATHS,
                score_percent=score,
                scored_nodes=SCORED_NODES,
            ),
        ),
        NodeFile(PATHS.audit_policy, "audit-policy.yaml", render("audit-policy.yaml.j2")),
        *(
            (NodeFile(PATHS.authentication_config, "authentication-config.yaml", ctx.identity.authentication_config),)
            if ctx.identity
            else ()
        ),
        kubeconfig_file(
            ctx,
            PATHS.controller_manager_kubeconfig,
            "system:kube-controller-manager",
            pki.CONTROLLER_MANAGER,
            local,
        ),
        kubeconfig_file(ctx, PATHS.scheduler_kubeconfig, "system:kube-scheduler", pki.SCHEDULER, local),
        *kubelet_files(ctx, "apiserver", name, None, ()),
        containerd_file(ctx, "apiserver", 0),
        sysctl_file(ctx, "apiserver", node=False, forwarding=False),
    )
    secret_map = _pki_files(ctx, name)
    packages: tuple[str, ...] = ()  # containerd, the kubelet and node-exporter are the image's
    issuer_files, issuer_secrets, issuer_facts, issuer_steps = node_tokens.apiserver_part(ctx)
    return NodeBundle(
        role="apiserver",
        name=name,
        hostname=name,
        packages=packages,
        files=(*files, *issuer_files),
        secrets=(
            *(SecretFile(f"{PATHS.pki}/{f}", s) for f, s in secret_map.items()),
            *issuer_secrets,
            # The Secret encryption keys: on API server hosts only (no other role encrypts or decrypts).
            SecretFile(PATHS.encryption_config, encryption.CONFIG_SECRET),
        ),
        facts=issuer_facts,
        disk=None,
        steps=(
            UNBLOCK_STEP,
            SYSCTL_STEP,
            RELOAD_STEP,
            Step("containerd", start("containerd")),
            Step("kubelet", start("kubelet")),
            *issuer_steps,
            NODE_EXPORTER_STEP,
        ),
    )


def _pki_files(ctx: BootstrapContext, name: str) -> dict[str, str]:
    """File name under the PKI folder -> the secret it is written from: the cluster's CAs, this host's
    serving certificate, the clients of etcd and the kubelets, the service-account keys."""
    return {
        "ca.crt": f"cert:{pki.KUBERNETES_CA}",
        "ca.key": f"key:{pki.KUBERNETES_CA}",
        "apiserver.crt": f"cert:{pki.apiserver_cert(name)}",
        "apiserver.key": f"key:{pki.apiserver_cert(name)}",
        "etcd-ca.crt": f"cert:{pki.ETCD_CA}",
        "apiserver-etcd-client.crt": f"cert:{pki.APISERVER_ETCD_CLIENT}",
        "apiserver-etcd-client.key": f"key:{pki.APISERVER_ETCD_CLIENT}",
        "apiserver-kubelet-client.crt": f"cert:{pki.APISERVER_KUBELET_CLIENT}",
        "apiserver-kubelet-client.key": f"key:{pki.APISERVER_KUBELET_CLIENT}",
        "front-proxy-ca.crt": f"cert:{pki.FRONT_PROXY_CA}",
        # kube-controller-manager's kubelet-serving signer (pki.KUBELET_SERVING_CA): its key on these hosts only.
        f"{pki.KUBELET_SERVING_CA}.crt": f"cert:{pki.KUBELET_SERVING_CA}",
        f"{pki.KUBELET_SERVING_CA}.key": f"key:{pki.KUBELET_SERVING_CA}",
        "front-proxy-client.crt": f"cert:{pki.FRONT_PROXY_CLIENT}",
        "front-proxy-client.key": f"key:{pki.FRONT_PROXY_CLIENT}",
        "sa.key": f"key:{pki.signing_key(ctx)}",
        "sa.pub": f"pub:{pki.signing_key(ctx)}",
        # With workload identity the ECDSA key that signed before the RSA one still verifies (pki.SERVICE_ACCOUNT_RSA).
        **({"sa-legacy.pub": f"pub:{pki.SERVICE_ACCOUNT}"} if ctx.identity else {}),
        f"{pki.CONTROLLER_MANAGER}.crt": f"cert:{pki.CONTROLLER_MANAGER}",
        f"{pki.CONTROLLER_MANAGER}.key": f"key:{pki.CONTROLLER_MANAGER}",
        f"{pki.SCHEDULER}.crt": f"cert:{pki.SCHEDULER}",
        f"{pki.SCHEDULER}.key": f"key:{pki.SCHEDULER}",
    }
