"""Where everything lives on a node, named once: every role renderer and template reads these paths.

A static pod mounts exactly the paths its flags and kubeconfigs name, so the manifests, kubeconfigs,
kubelet configuration and boot scripts must agree on them: they all take them from ``PATHS``.
Standard locations follow kubeadm (``/etc/kubernetes``, ``/var/lib/kubelet``) and the packages
(containerd, the CNI plugins); ``/opt/agk`` holds this toolkit's boot scripts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodePaths:
    k8s: str = "/etc/kubernetes"
    pki: str = "/etc/kubernetes/pki"
    manifests: str = "/etc/kubernetes/manifests"
    """The kubelet's staticPodPath."""
    audit_policy: str = "/etc/kubernetes/audit-policy.yaml"
    encryption_dir: str = "/etc/kubernetes/enc"
    """The API server's EncryptionConfiguration lives here (the directory the encrypt-data docs mount)."""
    encryption_config: str = "/etc/kubernetes/enc/encryption-config.yaml"
    authentication_dir: str = "/etc/kubernetes/authn"
    """Mounted as a directory, so the API server sees a rewritten configuration and reloads it (no restart)."""
    authentication_config: str = "/etc/kubernetes/authn/authentication-config.yaml"
    audit_log_dir: str = "/var/log/kubernetes/audit"
    scheduler_config: str = "/etc/kubernetes/scheduler-config.yaml"
    scheduler_kubeconfig: str = "/etc/kubernetes/scheduler.kubeconfig"
    controller_manager_kubeconfig: str = "/etc/kubernetes/controller-manager.kubeconfig"
    kube_proxy_config: str = "/etc/kubernetes/kube-proxy-config.yaml"
    kube_proxy_kubeconfig: str = "/etc/kubernetes/kube-proxy.kubeconfig"
    bootstrap_kubeconfig: str = "/etc/kubernetes/bootstrap-kubelet.kubeconfig"
    kubelet_config: str = "/var/lib/kubelet/config.yaml"
    kubelet_kubeconfig: str = "/var/lib/kubelet/kubeconfig"
    """Written by the kubelet once its bootstrap CSR is signed: the node has credentials of its own."""
    kubelet_dropin: str = "/etc/systemd/system/kubelet.service.d/10-agk.conf"
    kubelet_bin: str = "/usr/local/bin/kubelet"
    """The node image's kubelet (modules/images/recipe.py PLACEMENTS)."""
    containerd_config: str = "/etc/containerd/config.toml"
    containerd_socket: str = "/run/containerd/containerd.sock"
    containerd_dropin: str = "/etc/systemd/system/containerd.service.d/10-agk.conf"
    cni_bin: str = "/opt/cni/bin"
    cni_conf: str = "/etc/cni/net.d"
    cni_conflist: str = "/etc/cni/net.d/10-azure.conflist"
    upstream_resolv_conf: str = "/run/systemd/resolve/resolv.conf"
    """systemd-resolved's list of the real upstream servers (/etc/resolv.conf is its 127.0.0.53 stub)."""
    xtables_lock: str = "/run/xtables.lock"
    lib_modules: str = "/lib/modules"
    sysctl: str = "/etc/sysctl.d/999-agk.conf"
    """Sorts after Debian's 99-sysctl.conf (-> /etc/sysctl.conf), so systemd-sysctl applies it last."""
    cloud_cfg: str = "/etc/cloud/cloud.cfg.d/15_azure-vnet.cfg"
    """The name kubernetes-sigs/image-builder#1090 gives the same setting in CAPZ images."""
    policy_rc: str = "/usr/sbin/policy-rc.d"
    agk: str = "/opt/agk"
    """This toolkit's boot scripts."""
    boot_state: str = "/var/lib/agk/boot"
    """``<step>.done`` per finished boot step, ``failed`` naming the step that never succeeded."""
    run: str = "/run/agk"
    kubelet_env: str = "/run/agk/kubelet.env"
    """Node facts read at boot (the InfiniBand island label), for the kubelet's command line."""
    etcd_pki: str = "/etc/etcd/pki"
    etcd_config: str = "/etc/etcd/etcd.conf.yml"
    etcd_mount: str = "/var/lib/etcd"
    etcd_bin: str = "/usr/local/bin"
    """Where the node image installs etcd, etcdctl and etcdutl of the versions table's release
    (``versions.ETCD``, upstream's tarball); nothing on an etcd member runs another etcd."""
    node_exporter_textfiles: str = "/var/lib/prometheus/node-exporter"
    """node-exporter's textfile directory (Debian's and Ubuntu's package reads it by default)."""
    prom_pki: str = "/etc/prometheus/pki"
    prom_config: str = "/etc/prometheus/prometheus.yml"
    prom_rules: str = "/etc/prometheus/rules"
    prom_mount: str = "/var/lib/prometheus"
    mangle_rules: str = "/etc/agk/iptables/mangle.rules"
    nat_rules: str = "/etc/agk/iptables/nat.rules"
    azure_data_disk: str = "/dev/disk/azure/scsi1/lun0"
    local_nvme: str = "/dev/nvme0n1"

    def script(self, name: str) -> str:
        return f"{self.agk}/{name}"

    def unit(self, name: str) -> str:
        return f"/etc/systemd/system/{name}"

    def etcd_program(self, name: str) -> str:
        """``etcd``, ``etcdctl`` or ``etcdutl`` as the node image installs it."""
        return f"{self.etcd_bin}/{name}"


PATHS = NodePaths()
