"""The cluster stack hands its add-ons stack a working kubeconfig and spec; every stack reviews clean."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import yaml
from cryptography import x509

from agk.review import planned, review
from modules.bootstrap.pki import ADMIN, KUBERNETES_CA, pki_spec
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.bootstrap.certs import issue
from tests.infra.conftest import STACKS, State


def _secret_plaintext(value: object) -> str:
    """The value of a secret in a `pulumi stack export --show-secrets` (Pulumi's secret signature)."""
    assert (
        isinstance(value, dict) and value.get("4dabf18193072939515e22adb298388d") == "1b47061264138c4ac30d75fd1eb44270"
    )
    plaintext = value["plaintext"]
    assert isinstance(plaintext, str)
    decoded = json.loads(plaintext)
    assert isinstance(decoded, str)
    return decoded


def test_cluster_exports_a_secret_admin_kubeconfig_for_the_vip(state: Callable[[str], State]) -> None:
    st = state("dev")
    kubeconfig = yaml.safe_load(_secret_plaintext(st.outputs["kubeconfig"]))
    (cluster,) = kubeconfig["clusters"]
    vip = st.outputs["apiserver_endpoint"]
    assert cluster["cluster"]["server"] == vip
    assert vip.startswith("https://10.16.3.4:")  # first host of the planned control-plane subnet
    (user,) = kubeconfig["users"]
    assert set(user["user"]) == {"client-certificate-data", "client-key-data"}
    base64.b64decode(user["user"]["client-key-data"], validate=True)


def test_admin_certificate_is_a_cluster_admin_client() -> None:
    spec = pki_spec(prepare_cluster("dev", load_stack(STACKS, "dev"), STACKS).bootstrap)
    cert = spec.cert(ADMIN)
    assert cert.ca == KUBERNETES_CA
    pem = issue(spec, only={ADMIN})[f"cert:{ADMIN}"]
    parsed = x509.load_pem_x509_certificate(pem.encode())
    orgs = [a.value for a in parsed.subject.get_attributes_for_oid(x509.NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:masters"]


def test_addons_stack_builds_the_cluster_objects(state: Callable[[str], State]) -> None:
    st = state("dev-addons")
    kinds = {r["type"] for r in st.resources}
    assert "kubernetes:scheduling.k8s.io/v1:PriorityClass" in kinds
    assert "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding" in kinds
    (provider,) = [r for r in st.resources if r["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["kubeconfig"]


def test_every_shipped_stack_has_no_mandatory_violation() -> None:
    # The add-ons stacks too: their privileged DaemonSets carry the justification the pack asks for.
    report = review([planned(s, STACKS) for s in ("dev-addons", "prod-7500-addons")], None)
    assert report.policies_run > 0
    assert [v for v in report.violations if v.enforcement == "mandatory"] == []
