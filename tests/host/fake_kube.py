"""A stand-in kube-apiserver on 127.0.0.1 over mutual TLS, for the bootstrap token issuer's tests.

No kube-apiserver binary exists here, so this speaks the part of the documented API the issuer and a
joining kubelet use, and enforces what the real server enforces there:

- Authentication in kube-apiserver's order (pkg/kubeapiserver/authenticator/config.go): a verified
  client certificate first (user = CN, groups = O), else a bearer token. A bootstrap token
  authenticates as ``system:bootstrap:<id>`` in ``system:bootstrappers`` plus its
  ``auth-extra-groups`` only while its Secret exists, is of type ``bootstrap.kubernetes.io/token``, has
  ``usage-bootstrap-authentication: "true"``, its secret matches and ``expiration`` (RFC 3339) has not
  passed; an extra group outside ``system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`` invalidates the
  token (kubernetes.io "Authenticating with Bootstrap Tokens"; k8s.io/cluster-bootstrap). A bearer
  that authenticates as nobody is answered 401.
- Authorization by the RBAC objects the tests hand it (the add-ons' real Role and RoleBinding),
  plus ``system:basic-user``'s SelfSubjectReview for every authenticated user.
- ``POST /api/v1/namespaces/<ns>/secrets`` validates the body against the Secret schema
  (kubernetes-validate, strict), answers 409 AlreadyExists for a taken name, and merges
  ``stringData`` into base64 ``data`` as the API server does on write.
- ``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` answers 201 with ``status.userInfo``
  (JSON, which clients accept; kubectl's request body is protobuf and not read), ``GET /version``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate

GROUP = re.compile(r"\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\Z")
SECRETS = re.compile(r"\A/api/v1/namespaces/([a-z0-9-]+)/secrets\Z")
REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


class FakeKube:
    def __init__(self, rbac: list[dict[str, Any]], *, version: str = "1.35", now: Callable[[], float] = time.time):
        self.rbac = rbac
        self.version = version
        self.now = now
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str, str]] = []
        """(method, path, user) of every request."""
        self.on_create: Callable[[dict[str, Any]], None] | None = None
        """Runs before a Secret is stored (a test's hook into the middle of an issuer's run)."""
        self.fail: dict[str, tuple[int, str]] = {}
        """path -> (status, reason) answered instead, once."""

    # -- authentication ---------------------------------------------------------------------------
    def _bootstrap_user(self, bearer: str) -> tuple[str, list[str]] | None:
        m = re.fullmatch(r"([a-z0-9]{6})\.([a-z0-9]{16})", bearer)
        if not m:
            return None
        with self.lock:
            secret = self.secrets.get(("kube-system", f"bootstrap-token-{m.group(1)}"))
        if secret is None or secret.get("type") != "bootstrap.kubernetes.io/token":
            return None
        data = {k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()}
        if data.get("token-id") != m.group(1) or data.get("token-secret") != m.group(2):
            return None
        if data.get("usage-bootstrap-authentication") != "true":
            return None
        if "expiration" in data:
            expires = dt.datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
            if expires.timestamp() <= self.now():
                return None
        extra = [g for g in data.get("auth-extra-groups", "").split(",") if g]
        if any(not GROUP.match(g) for g in extra):
            return None
        return f"system:bootstrap:{m.group(1)}", ["system:bootstrappers", *extra]

    def authenticate(self, peer: dict[str, Any] | None, headers: dict[str, str]) -> tuple[str, list[str]] | None:
        """(user, groups); None means 401. Anonymous requests are ``system:anonymous``."""
        if peer:
            subject = {k: v for rdn in peer["subject"] for k, v in rdn}
            orgs = [v for rdn in peer["subject"] for k, v in rdn if k == "organizationName"]
            return subject["commonName"], [*orgs, "system:authenticated"]
        auth = headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            found = self._bootstrap_user(auth.removeprefix("Bearer "))
            return None if found is None else (found[0], [*found[1], "system:authenticated"])
        return "system:anonymous", ["system:unauthenticated"]

    # -- authorization ----------------------------------------------------------------------------
    def allowed(self, user: str, groups: list[str], verb: str, resource: str, namespace: str) -> bool:
        roles = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in self.rbac if o["kind"] == "Role"}
        for b in self.rbac:
            if b["kind"] != "RoleBinding" or b["metadata"].get("namespace") != namespace:
                continue
            subject = any(
                (s["kind"] == "User" and s["name"] == user) or (s["kind"] == "Group" and s["name"] in groups)
                for s in b["subjects"]
            )
            role = roles.get((namespace, b["roleRef"]["name"])) if b["roleRef"]["kind"] == "Role" else None
            if subject and role is not None:
                for rule in role["rules"]:
                    if "" in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                        return True
        return False

    # -- the API ----------------------------------------------------------------------------------
    def handle(
        self, method: str, path: str, peer: dict[str, Any] | None, headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        who = self.authenticate(peer, headers)
        with self.lock:
            self.requests.append((method, path, who[0] if who else "<refused>"))
        if who is None:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        user, groups = who
        if path in self.fail:
            code, reason = self.fail.pop(path)
            return code, _status(code, reason, f"injected {reason}")
        if method == "POST" and path == REVIEWS:
            if "system:authenticated" not in groups:
                return 403, _status(403, "Forbidden", f'User "{user}" cannot create selfsubjectreviews')
            if headers.get("Content-Type", "").startswith("application/json"):  # kubectl sends protobuf
                review = json.loads(body)
                assert review == {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, review
            review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}}
            return 201, {**review, "status": {"userInfo": {"username": user, "groups": groups}}}
        if method == "GET" and path == "/version":
            return 200, {"major": "1", "minor": self.version.split(".")[1], "gitVersion": f"v{self.version}.0"}
        m = SECRETS.match(path)
        if method == "POST" and m:
            namespace = m.group(1)
            if not self.allowed(user, groups, "create", "secrets", namespace):
                message = f'secrets is forbidden: User "{user}" cannot create resource "secrets" in "{namespace}"'
                return 403, _status(403, "Forbidden", message)
            obj = json.loads(body)
            kubernetes_validate.validate(obj, self.version, strict=True)
            if obj["metadata"].get("namespace", namespace) != namespace:
                return 400, _status(400, "BadRequest", "the namespace of the object does not match the request")
            if self.on_create is not None:
                self.on_create(obj)
            key = (namespace, obj["metadata"]["name"])
            stored = {k: v for k, v in obj.items() if k != "stringData"}
            data = dict(obj.get("data", {}))
            data.update({k: base64.b64encode(v.encode()).decode() for k, v in obj.get("stringData", {}).items()})
            stored["data"] = data
            with self.lock:
                if key in self.secrets:
                    return 409, _status(409, "AlreadyExists", f'secrets "{key[1]}" already exists')
                self.secrets[key] = stored
            return 201, stored
        return 404, _status(404, "NotFound", f"{method} {path}: not served by this stand-in")

    def bootstrap_tokens(self) -> dict[str, dict[str, str]]:
        """token id -> decoded data of every bootstrap token Secret."""
        out = {}
        with self.lock:
            for s in self.secrets.values():
                if s.get("type") == "bootstrap.kubernetes.io/token":
                    data = {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
                    out[data["token-id"]] = data
        return out

    def revoke(self, token_id: str) -> None:
        """What ``kubectl -n kube-system delete secret bootstrap-token-<id>`` does."""
        with self.lock:
            del self.secrets[("kube-system", f"bootstrap-token-{token_id}")]


@contextmanager
def serve_tls(fake: FakeKube, ca: Path, cert: Path, key: Path) -> Iterator[str]:
    """``https://127.0.0.1:<port>``, asking for (not requiring) a client certificate signed by ``ca``."""

    class Request(BaseHTTPRequestHandler):
        def _do(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            assert isinstance(self.connection, ssl.SSLSocket)
            peer = self.connection.getpeercert() or None
            status, out = fake.handle(self.command, self.path.split("?")[0], peer, dict(self.headers), body)
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _do

        def log_message(self, *args: Any) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(ca)
    context.verify_mode = ssl.CERT_OPTIONAL
    server = ThreadingHTTPServer(("127.0.0.1", 0), Request)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
