"""Pure tier: the RBAC that lets pool tokens file node CSRs and the issuer create token Secrets."""

from __future__ import annotations

from modules.bootstrap.host import bootstrap_tokens as bt
from modules.cluster.objects import access
from modules.cluster.spec import AddonsSpec

CSR = "system:certificates.k8s.io:certificatesigningrequests"


def _by_name(spec: AddonsSpec) -> dict[str, dict]:  # type: ignore[type-arg]
    return {o["metadata"]["name"]: o for o in access.access(spec)}


def test_the_pools_tokens_may_file_and_get_node_csrs_approved(dev_spec: AddonsSpec) -> None:
    objs = _by_name(dev_spec)
    for name, role in (
        ("agk-bootstrappers-node-bootstrapper", "system:node-bootstrapper"),
        ("agk-bootstrappers-auto-approve", f"{CSR}:nodeclient"),
    ):
        assert objs[name]["roleRef"]["name"] == role
        assert {"kind": "Group", "name": bt.NODES_GROUP, "apiGroup": "rbac.authorization.k8s.io"} in objs[name][
            "subjects"
        ]


def test_the_issuer_may_create_secrets_in_kube_system_and_nothing_else(dev_spec: AddonsSpec) -> None:
    roles = [o for o in access.access(dev_spec) if o["kind"] == "Role"]
    bindings = [o for o in access.access(dev_spec) if o["kind"] == "RoleBinding"]
    assert len(roles) == len(bindings) == 1
    role, binding = roles[0], bindings[0]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "kube-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": bt.ISSUER_USER}]
    # No cluster-wide grant names the issuer.
    assert not any(
        s.get("name") == bt.ISSUER_USER
        for o in access.access(dev_spec)
        if o["kind"] == "ClusterRoleBinding"
        for s in o["subjects"]
    )


def test_no_other_bootstrap_credential_may_file_node_csrs(dev_spec: AddonsSpec) -> None:
    # Every bootstrap token is in system:bootstrappers (kubeadm's too), and so are the retired year-long
    # pool certificates until they expire: binding the bare group would let any of them mint node identities.
    for obj in access.access(dev_spec):
        if obj["kind"] == "ClusterRoleBinding":
            assert "system:bootstrappers" not in {s["name"] for s in obj.get("subjects", [])}, obj["metadata"]["name"]
