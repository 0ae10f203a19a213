"""Pool kubelets can be scraped directly: a CA-signed serving certificate, and Prometheus' identity accepted.

Prometheus verifies each kubelet against the cluster CA (templates/prometheus.yml.j2), so every pool kubelet
must request its serving certificate from the cluster (``serverTLSBootstrap``, kubelet-serving CSR); and the
kubelet must accept Prometheus' client certificate (x509 against the CA that issues it) and ask the API
server what it may do (webhook authorization: a SubjectAccessReview for nodes/metrics), with anonymous
requests refused (kubernetes.io, Kubelet authentication/authorization).
"""

from __future__ import annotations

import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import bundle, names


def test_pool_kubelets_request_serving_certificates_and_authorize_prometheus(ctx: BootstrapContext) -> None:
    prometheus = bundle(ctx, "prometheus", names(ctx, "prometheus")[0])
    (client_ca,) = [s.path for s in prometheus.secrets if s.secret == f"cert:{pki.KUBERNETES_CA}"]
    assert pki.pki_spec(ctx).cert(pki.PROMETHEUS).ca == pki.KUBERNETES_CA
    for pool in ctx.pools:
        node = bundle(ctx, pool.role, pool.name)
        config = yaml.safe_load(node.file("kubelet/config.yaml").content)
        assert config["serverTLSBootstrap"] is True, pool.name
        assert config["authentication"]["anonymous"]["enabled"] is False, pool.name
        assert config["authentication"]["webhook"]["enabled"] is True, pool.name
        assert config["authorization"]["mode"] == "Webhook", pool.name
        # The kubelet's client CA file is the cluster CA the node holds, the one Prometheus' certificate is from.
        ca_file = config["authentication"]["x509"]["clientCAFile"]
        (held,) = [s for s in node.secrets if s.path == ca_file]
        assert held.secret == f"cert:{pki.KUBERNETES_CA}" and client_ca.endswith("/ca.crt"), pool.name
