"""Researchers' sign-in and workload identity on dev's real control plane (its rendered flags, its rendered
authentication configuration, its add-on objects applied).

Stand-ins, for what cannot exist here: Microsoft Entra ID (an OIDC issuer on loopback HTTPS with its own key,
tests/controlplane/entra.py, put in place of login.microsoftonline.com in the rendered configuration; every
other field as rendered), and Entra's token exchange (its checks of a federated token, against the documents
the cluster stack uploads). The API server, its RBAC and the Azure Workload Identity webhook are real.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from modules.bootstrap import pki
from modules.cluster.objects import researchers, teams, workload_identity
from modules.cluster.spec import TeamSpec
from modules.identity import oidc
from modules.identity.plan import AccessSpec, TeamAccess
from tests.bootstrap.conftest import tool

from .cluster import ControlPlane, kubeconfig, wait
from .conftest import prepared, wait_for_default_service_account
from .entra import Credential, EntraStandIn, entra_standin, exchange_standin, loopback_tls, verify

TEAM_A, TEAM_B = "research", "vision"
GROUP_B = "7d2c9e10-5a4b-4c3d-8e2f-0a1b2c3d4e5f"


def _access() -> AccessSpec:
    access = prepared("dev").addons.access
    assert access is not None, "dev ships cluster.identity"
    return access


def token_request(cp: ControlPlane, ns: str, sa: str, audience: str) -> str:
    status, body = cp.call(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": [audience]}},
    )
    assert status == 201, body
    return str(body["status"]["token"])


def test_a_team_token_verifies_against_the_published_jwks_as_azure_expects(dev_cluster: ControlPlane) -> None:
    access = _access()
    team = access.team(TEAM_A)
    assert team is not None
    # What the cluster stack uploads to the issuer container: rendered from the signing key's public half.
    blobs = oidc.documents(access.issuer, dev_cluster.pems[f"pub:{pki.SERVICE_ACCOUNT_RSA}"])
    token = token_request(dev_cluster, TEAM_A, team.service_accounts[0], oidc.AUDIENCE)
    claims = verify(token, json.loads(blobs[oidc.JWKS_PATH]))
    assert claims["iss"] == access.issuer
    assert claims["aud"] == [oidc.AUDIENCE]
    assert claims["sub"] == oidc.subject(TEAM_A, team.service_accounts[0])
    # The API server's own discovery names the same issuer and keys (--service-account-jwks-uri).
    served = dev_cluster.get("/.well-known/openid-configuration")
    assert (served["issuer"], served["jwks_uri"]) == (access.issuer, oidc.jwks_uri(access.issuer))
    published = {k["kid"] for k in json.loads(blobs[oidc.JWKS_PATH])["keys"]}
    req = urllib.request.Request(dev_cluster.url + "/openid/v1/jwks", headers={"Accept": "application/jwk-set+json"})
    with urllib.request.urlopen(req, context=dev_cluster.context(), timeout=30) as resp:
        assert published <= {k["kid"] for k in json.loads(resp.read())["keys"]}

    # Azure's exchange (STAND-IN): team A's credential accepts the token, team B's (another subject) refuses it.
    own = Credential("client-a", access.issuer, oidc.subject(TEAM_A, "training"))
    assert exchange_standin(token, blobs, own) == "client-a"
    with pytest.raises(AssertionError, match="sub"):
        exchange_standin(token, blobs, Credential("client-b", access.issuer, oidc.subject(TEAM_B, "training")))
    # A token for the in-cluster audience is no federated token.
    with pytest.raises(AssertionError, match="aud"):
        exchange_standin(token_request(dev_cluster, TEAM_A, "training", "https://kubernetes.default.svc"), blobs, own)


# ---- researchers: Entra sign-in (stand-in issuer) and RBAC, kubectl auth can-i ----


@contextmanager
def signed_in_through(cp: ControlPlane, standin: EntraStandIn) -> Iterator[None]:
    """The first API server's rendered authentication configuration with the stand-in's URL and CA in place of
    Entra's (audience, claim mappings and rules as rendered); kube-apiserver reloads the file without a restart.
    Put back as rendered afterwards."""
    host = cp.hosts[0]
    path = host.root / "etc/kubernetes/authn/authentication-config.yaml"
    rendered = path.read_text()
    doc = yaml.safe_load(rendered)
    doc["jwt"][0]["issuer"]["url"] = standin.issuer
    doc["jwt"][0]["issuer"]["certificateAuthority"] = standin.ca_pem
    staged = path.with_suffix(".new")
    staged.write_text(yaml.safe_dump(doc))
    os.replace(staged, path)
    try:
        yield
    finally:
        staged.write_text(rendered)
        os.replace(staged, path)


def _whoami(cp: ControlPlane, token: str) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        cp.url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    ctx = ssl.create_default_context(cafile=str(cp.root / "admin" / "ca.crt"))
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, {}


CHECKS = (
    ("create", "pods", TEAM_A),
    ("create", "jobs.batch", TEAM_A),
    ("create", "pods", TEAM_B),
    ("create", "jobs.batch", TEAM_B),
    ("get", "pods", TEAM_A),
    ("list", "pods", TEAM_B),
    ("list", "nodes", None),
    ("get", "secrets", TEAM_A),
    ("patch", "serviceaccounts", TEAM_A),
)


def test_researchers_can_i_table(dev_cluster: ControlPlane, tmp_path: Path) -> None:
    access = _access()
    team_a = access.team(TEAM_A)
    assert team_a is not None and access.read_only_group is not None
    # Team B: a second team built by the same builders as the shipped ones (dev ships one team).
    spec = prepared("dev").addons
    b = TeamAccess(TEAM_B, GROUP_B, ("training",))
    objs = teams.team_objects(spec, TeamSpec(TEAM_B, 8, ())) + researchers.team_access(access, b)
    applied = dev_cluster.kubectl(
        "apply", "--server-side", "--field-manager=agk", "-f", "-", input=yaml.safe_dump_all(objs)
    )
    assert applied.returncode == 0, applied.stderr
    wait_for_default_service_account(dev_cluster, [TEAM_B])
    identity = prepared("dev").bootstrap.identity
    assert identity is not None
    audience = yaml.safe_load(identity.authentication_config)["jwt"][0]["issuer"]["audiences"][0]
    with entra_standin(tmp_path / "entra", access.tenant_id) as standin, signed_in_through(dev_cluster, standin):
        people = {
            "team A": standin.token(audience, groups=[team_a.group]),
            "team B": standin.token(audience, groups=[GROUP_B]),
            "read-only": standin.token(audience, groups=[access.read_only_group]),
            "no group": standin.token(audience, groups=[]),
            # A token claiming Kubernetes' own admin group gets it prefixed, and so nothing.
            "forged system:masters": standin.token(audience, groups=["system:masters"]),
        }
        member = people["team A"]
        wait(
            "the API server to reload its authentication configuration",
            lambda: _whoami(dev_cluster, member)[0] == 201,
            [dev_cluster.hosts[0].processes["kube-apiserver"]],
            timeout=120,
        )
        _, review = _whoami(dev_cluster, member)
        user = review["status"]["userInfo"]
        assert user["username"].startswith(access.prefix)
        assert access.group(team_a.group) in user["groups"]
        # A token for another app (audience) is refused.
        assert _whoami(dev_cluster, standin.token("another-app", groups=[team_a.group]))[0] == 401

        table: dict[str, dict[str, str]] = {}
        for who, token in people.items():
            config = kubeconfig(
                tmp_path / f"{who.replace(' ', '-')}.kubeconfig",
                dev_cluster.url,
                dev_cluster.root / "admin" / "ca.crt",
                token=token,
            )
            row = {}
            for verb, resource, ns in CHECKS:
                args = ["auth", "can-i", verb, resource, *(["-n", ns] if ns else [])]
                got = dev_cluster.kubectl(*args, kubeconfig=config)
                assert got.stdout.strip() in ("yes", "no"), got.stdout + got.stderr
                row[f"{verb} {resource}{' in ' + ns if ns else ''}"] = got.stdout.strip()
            table[who] = row
    expected = {
        "team A": ["yes", "yes", "no", "no", "yes", "no", "no", "no", "no"],
        "team B": ["no", "no", "yes", "yes", "no", "yes", "no", "no", "no"],
        "read-only": ["no", "no", "no", "no", "yes", "yes", "yes", "no", "no"],
        "no group": ["no"] * len(CHECKS),
        "forged system:masters": ["no"] * len(CHECKS),
    }
    assert {who: list(row.values()) for who, row in table.items()} == expected, json.dumps(table, indent=1)
    dev_cluster.kubectl("delete", "namespace", TEAM_B, "--wait=false")


# ---- the Azure Workload Identity webhook, built from its Go module, registered with a URL ----

CONFIG_PATH = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{workload_identity.CONFIG}"
WEBHOOK_PORT = 9443
"""controller-runtime's default webhook port; the webhook has no flag for it (cmd/webhook/main.go)."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_the_webhook_mutates_a_team_pod(dev_cluster: ControlPlane, tmp_path: Path) -> None:
    access = _access()
    assert _free(WEBHOOK_PORT), f"port {WEBHOOK_PORT} is taken: the webhook listens there (no flag moves it)"
    ca_pem, crt, _key = loopback_tls(tmp_path / "certs", "azure-wi-webhook")
    log = (tmp_path / "webhook.log").open("wb")
    proc = subprocess.Popen(
        [
            tool("azure-wi-webhook"),
            "--disable-cert-rotation",
            f"--webhook-cert-dir={crt.parent}",
            "--health-addr=127.0.0.1:0",
            "--metrics-addr=127.0.0.1:0",
            "--log-level=debug",
        ],
        env={
            **os.environ,
            "KUBECONFIG": str(dev_cluster.admin),
            "AZURE_TENANT_ID": access.tenant_id,
            "AZURE_ENVIRONMENT": "AzurePublicCloud",
            "POD_NAMESPACE": workload_identity.NS,
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    # The rendered configuration, with a URL to the binary in place of the Service (no kubelet runs its pod here).
    config = workload_identity.webhook_configuration(
        {
            "url": f"https://127.0.0.1:{WEBHOOK_PORT}{workload_identity.PATH}",
            "caBundle": base64.b64encode(ca_pem.encode()).decode(),
        }
    )
    try:
        wait("the webhook to listen", lambda: not _free(WEBHOOK_PORT), [], timeout=60)
        # A merge patch replaces the webhooks list whole: the URL takes the Service's place.
        status, got = dev_cluster.call_patch(CONFIG_PATH, {"webhooks": config["webhooks"]})
        assert status == 200, got
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer", "namespace": TEAM_A, "labels": {researchers.USE_LABEL: "true"}},
            "spec": {
                "serviceAccountName": "training",
                "containers": [{"name": "train", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        body: Any = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status, body = dev_cluster.call("POST", f"/api/v1/namespaces/{TEAM_A}/pods?dryRun=All", pod)
            if status == 201:
                break
            time.sleep(1)
        assert status == 201, (body, (tmp_path / "webhook.log").read_text()[-3000:])
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        # Back to the rendered configuration (the Service), as the add-ons stack applies it.
        rendered = next(
            o for o in workload_identity.workload_identity(prepared("dev").addons) if o["kind"] == config["kind"]
        )
        dev_cluster.call_patch(CONFIG_PATH, {"webhooks": rendered["webhooks"]})
    team = access.team(TEAM_A)
    assert team is not None
    (container,) = body["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["AZURE_CLIENT_ID"] == team.client_id
    assert env["AZURE_TENANT_ID"] == access.tenant_id
    assert env["AZURE_AUTHORITY_HOST"].startswith("https://login.microsoftonline.com")
    # v1.6.0's layout (pkg/webhook/consts.go): one projected volume named azure-workload-identity-reserved-<hash>,
    # mounted at /var/run/secrets/azure/wi, the token at token/azure-identity-token in it.
    (volume,) = (v for v in body["spec"]["volumes"] if v["name"].startswith("azure-workload-identity-reserved-"))
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == oidc.AUDIENCE
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert env["AZURE_FEDERATED_TOKEN_FILE"] == f"{mount['mountPath']}/{source['serviceAccountToken']['path']}"
