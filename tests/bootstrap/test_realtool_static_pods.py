"""Every static pod's kubeconfig, loaded by the real client in a mount namespace that shows only what
the pod mounts.

The host's files (the role's bundle, with certificates issued from the cluster's PKI spec) are laid
out under a throwaway directory; for each static pod a private mount namespace (`unshare -m`)
binds exactly the pod's hostPath volumes, plus kubectl, into an otherwise empty root and runs
kubectl there (chroot): `config view --flatten` reads every file the kubeconfig names, and a
request to a loopback TLS server that trusts only the cluster CA proves the client certificate and
key load and authenticate. The API server address is the one thing swapped (--server), since no
API server runs here.
"""

from __future__ import annotations

import http.server
import os
import shlex
import ssl
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.node_tokens import standin_facts
from modules.bootstrap.roles import NodeBundle, names

from .certs import issue
from .staticpods import StaticPod, static_pods


def _stage(host: Path, node: NodeBundle, pems: dict[str, str]) -> None:
    """The host's files at their node paths under ``host``."""
    for f in node.files:
        path = host / f.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.content)
    for s in node.secrets:
        path = host / s.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pems[s.secret])
        path.chmod(0o600 if s.secret.startswith("key:") else 0o644)


class _Server:
    """HTTPS on 127.0.0.1 that accepts only clients whose certificate the cluster CA signed."""

    def __init__(self, tmp: Path, pems: dict[str, str], server_cert: str) -> None:
        for name, text in (("ca.crt", pems[f"cert:{pki.KUBERNETES_CA}"]), ("tls.crt", pems[f"cert:{server_cert}"])):
            (tmp / name).write_text(text)
        (tmp / "tls.key").write_text(pems[f"key:{server_cert}"])
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        context.load_verify_locations(tmp / "ca.crt")
        context.verify_mode = ssl.CERT_REQUIRED
        self.clients: list[str] = []
        clients = self.clients

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                cert = self.connection.getpeercert()  # type: ignore[attr-defined]
                subject = dict(x[0] for x in cert["subject"])
                clients.append(subject["commonName"])
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _namespace_script(sp: StaticPod, host: Path, root: Path, kubectl: str, server: str) -> str:
    """Shell run inside `unshare -m`: an empty root with only the pod's mounts, then kubectl in it."""
    lines = ["set -eu", f"R={shlex.quote(str(root))}", 'mount -t tmpfs agk-pod "$R"']
    for v in sp.volumes:
        source = host / v.host_path.lstrip("/")
        target = f'"$R"{shlex.quote(v.mount_path)}'
        if source.is_dir():
            lines.append(f"mkdir -p {target}")
        else:
            lines.append(f'mkdir -p "$(dirname {target})" && touch {target}')
        lines.append(f"mount --bind {shlex.quote(str(source))} {target}")
    lines += [
        'mkdir -p "$R/usr/bin" "$R/tmp" && touch "$R/usr/bin/kubectl"',
        f'mount --bind {shlex.quote(kubectl)} "$R/usr/bin/kubectl"',
    ]
    # Everything the pod's flags, configs and kubeconfigs name is there in its view.
    for path, why in sp.referenced().items():
        if path.endswith(".log"):
            continue  # written by the component (its directory is mounted)
        lines.append(f'test -e "$R"{shlex.quote(path)} || {{ echo "missing in the pod: {path} ({why})" >&2; exit 3; }}')
    for kubeconfig in sp.kubeconfigs():
        kc = shlex.quote(kubeconfig)
        lines += [
            f'chroot "$R" /usr/bin/kubectl --kubeconfig={kc} config view --flatten --raw > /dev/null',
            f'chroot "$R" /usr/bin/kubectl --kubeconfig={kc} --server={server} --request-timeout=10s get --raw /livez',
        ]
    return "\n".join(lines)


def _prepare(require: Callable[[str], str]) -> str:
    require("unshare")
    require("chroot")
    return require("kubectl")


@pytest.mark.realtool
def test_every_static_pod_kubeconfig_loads_in_its_own_mount_namespace(
    ctx: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    kubectl = os.path.realpath(_prepare(require))
    pems = issue(pki.pki_spec(ctx)) | standin_facts(ctx, ctx.pools[0].name)
    apiserver = names(ctx, "apiserver")[0]
    server = _Server(tmp_path, pems, pki.apiserver_cert(apiserver))
    try:
        expected = []
        for i, sp in enumerate(static_pods(ctx)):
            host, root = tmp_path / f"host-{i}", tmp_path / f"root-{i}"
            root.mkdir()
            _stage(host, sp.node, pems)
            for v in sp.volumes:  # what the kubelet creates for DirectoryOrCreate / FileOrCreate
                path = host / v.host_path.lstrip("/")
                if not path.exists():
                    if v.type == "FileOrCreate":
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.touch()
                    else:
                        path.mkdir(parents=True)
            script = _namespace_script(sp, host, root, kubectl, server.url)
            run = subprocess.run(
                ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                capture_output=True,
                text=True,
                check=False,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"},
            )
            assert run.returncode == 0, f"{sp.name}: {run.stderr}"
            for kubeconfig in sp.kubeconfigs():
                user = yaml.safe_load(next(f.content for f in sp.node.files if f.path == kubeconfig))
                expected.append(user["users"][0]["name"])
        # Each kubeconfig authenticated as the user it names (its certificate's CN).
        assert set(server.clients) == set(expected)
        assert {"system:kube-scheduler", "system:kube-controller-manager", "system:kube-proxy"} <= set(expected)
    finally:
        server.close()


@pytest.mark.realtool
def test_a_pod_that_does_not_mount_its_certificates_cannot_load_its_kubeconfig(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    # The check can fail: the kube-scheduler without its pki volume (the pod before this fix).
    kubectl = os.path.realpath(_prepare(require))
    pems = issue(pki.pki_spec(dev)) | standin_facts(dev, dev.pools[0].name)
    sp = next(p for p in static_pods(dev) if p.pod["metadata"]["name"] == "kube-scheduler")
    spec = sp.pod["spec"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != "pki"]
    spec["containers"][0]["volumeMounts"] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] != "pki"]
    host, root = tmp_path / "host", tmp_path / "root"
    root.mkdir()
    _stage(host, sp.node, pems)
    script = _namespace_script(sp, host, root, kubectl, "https://127.0.0.1:1").replace("|| {", "|| true || {")
    run = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp"},
    )
    assert run.returncode != 0
    # client-go itself refuses: the kubeconfig names certificates the pod cannot see.
    assert "open /etc/kubernetes/pki/" in run.stderr and "no such file or directory" in run.stderr
