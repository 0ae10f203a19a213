"""A real Kubernetes control plane on loopback, from the files `agk render` writes for a cluster stack.

Every process is the real binary the versions table pins (``make components``: tools/bin): a 3-member
etcd from the rendered ``etcd.conf.yml`` (as tests/bootstrap/test_realtool_etcd.py starts it), and on
each API server host the three static pods' commands exactly as rendered: kube-apiserver,
kube-controller-manager and kube-scheduler, with every file they name (certificates, keys, the audit
policy, the scheduler configuration, kubeconfigs) written from the host's bundle.

Only addresses and paths move (nothing else is edited, so a flag the binary refuses fails the start):
- every ``host:port`` the files name becomes a loopback port of this machine (each API server host
  keeps its own ports, so its controller-manager's ``https://127.0.0.1:6443`` reaches its own API
  server, as on the VM); ``--advertise-address`` stays (the server only publishes it, in the
  ``kubernetes`` Endpoints, which refuse loopback addresses);
- every absolute path a process reads or writes moves under ``root/<host>``;
- each process runs in its own UTS namespace with the host's name, so leases, leader election and
  the API servers' identities name the host they would on the VM.

Stand-ins, for what cannot exist here: Azure's internal load balancer (its frontend address maps to
the first API server's port) and the kubelets (kwok, started by the scheduling tests). Certificates
come from the same PKI spec ClusterPki issues (tests/bootstrap/certs.py).
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.roles import NodeBundle, Role, bundle
from modules.cluster.scripts import kube
from tests.bootstrap.certs import issue
from tests.bootstrap.conftest import tool
from tests.bootstrap.test_realtool_etcd import Cluster as Etcd
from tests.bootstrap.test_realtool_etcd import _ports, lay_out

_URL = re.compile(r"https://(\d+\.\d+\.\d+\.\d+):(\d+)")
_PATH = re.compile(r"(?<![\w.:/-])(/(?:etc|var)/[A-Za-z0-9._/-]+)")
# The static pods of an API server host, in the order the kubelet would have them up.
STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Their rendered ports on the host (the flags say so too): API server, controller-manager, scheduler.
HOST_PORTS = {"kube-apiserver": 6443, "kube-controller-manager": 10257, "kube-scheduler": 10259}


class StartFailed(AssertionError):
    """A process exited or never became ready: its log's tail says why."""


CRASH_LOOP = 3
"""Restarts after which a supervised process is taken as crash-looping."""


@dataclass
class Process:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    restart: bool = False
    """Restarted when it exits, as the kubelet restarts a static pod's container (restartPolicy Always, back-off
    10 s doubling to 5 min): kube-controller-manager and kube-scheduler exit by design when they lose their
    leader lease (``Leaderelection lost``), which a loaded API server can cause."""
    restarts: int = 0
    _stopped: bool = False
    _supervisor: threading.Thread | None = None

    def start(self) -> None:
        self._stopped = False
        self._spawn()
        if self.restart and self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, name=f"restart {self.name}", daemon=True)
            self._supervisor.start()

    def _spawn(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)

    def _supervise(self) -> None:
        backoff = 10.0
        while not self._stopped:
            proc = self.proc
            if proc is None or proc.poll() is None:
                time.sleep(0.5)
                continue
            time.sleep(backoff)
            if self._stopped:
                return
            self.restarts += 1
            with self.log.open("ab") as out:
                out.write(f"--- restarted (exit {proc.returncode}), restart {self.restarts}\n".encode())
            self._spawn()
            backoff = min(backoff * 2, 300.0)

    def alive(self) -> bool:
        """Running, or (``restart``) about to be restarted; a process restarted ``CRASH_LOOP`` times counts as
        dead, so a crash loop still fails a wait instead of hiding behind its restarts."""
        if self.proc is None or self._stopped:
            return False
        return self.proc.poll() is None or (self.restart and self.restarts < CRASH_LOOP)

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        self._stopped = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._supervisor is not None:
            self._supervisor.join(timeout=2)
            self._supervisor = None


@dataclass
class Host:
    """One API server VM: its bundle, its root directory and its three processes."""

    name: str
    node: NodeBundle
    root: Path
    ports: dict[int, int]
    """Rendered port on this host -> loopback port."""
    processes: dict[str, Process] = field(default_factory=dict)

    @property
    def apiserver_url(self) -> str:
        return f"https://127.0.0.1:{self.ports[6443]}"


@dataclass
class ControlPlane:
    ctx: BootstrapContext
    root: Path
    etcd: Etcd
    events_etcd: Etcd | None
    hosts: list[Host]
    pems: dict[str, str]
    admin: Path
    """A system:masters kubeconfig (the cluster's exported admin credential) for the first API server."""
    addresses: dict[tuple[str, int], int]
    """Every rendered (address, port) -> loopback port."""

    @property
    def url(self) -> str:
        return self.hosts[0].apiserver_url

    def loopback(self, text: str) -> str:
        """``text`` with every rendered https URL moved to its loopback port (for manifests and configs)."""
        return _URL.sub(lambda m: self._url(m, None), text)

    def on_host(self, text: str, host: Host) -> str:
        """A file of ``host`` as it is laid out here: its addresses on loopback, its paths under its root."""
        return _relocate(_URL.sub(lambda m: self._url(m, host), text), host.root)

    def _url(self, m: re.Match[str], host: Host | None) -> str:
        ip, port = m.group(1), int(m.group(2))
        if ip == "127.0.0.1" and host is not None:
            return f"https://127.0.0.1:{host.ports[port]}"
        return f"https://127.0.0.1:{self.addresses[(ip, port)]}"

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, input: str | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool("kubectl"), f"--kubeconfig={kubeconfig or self.admin}", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )

    def context(self, cert: str | None = None) -> ssl.SSLContext:
        """TLS to the API servers as ``cert`` (a PKI cert name; default the admin)."""
        ctx = ssl.create_default_context(cafile=str(self.root / "admin" / "ca.crt"))
        name = cert or pki.ADMIN
        crt, key = self.root / "admin" / f"{name}.crt", self.root / "admin" / f"{name}.key"
        if not crt.exists():
            crt.write_text(self.pems[f"cert:{name}"])
            key.write_text(self.pems[f"key:{name}"])
            key.chmod(0o600)
        ctx.load_cert_chain(str(crt), str(key))
        return ctx

    def get(self, path: str, url: str | None = None, *, tries: int = 10) -> Any:
        """A GET as the admin, asked again when the in-cluster scripts' client would ask again
        (modules/cluster/scripts/kube.py ``retryable``): a busy server of a 7,500-node fleet answers a continued
        LIST whose revision its watch cache has not reached 504 ResourceVersionTooLarge, Retry-After 1."""
        req = urllib.request.Request((url or self.url) + path, headers={"Accept": "application/json"})
        for attempt in range(1, tries + 1):
            try:
                with urllib.request.urlopen(req, context=self.context(), timeout=30) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as err:
                if attempt == tries or not kube.retryable("GET", err.code, err.headers):
                    raise
                time.sleep(kube.retry_after_s(err.headers.get("Retry-After")))
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, *, cert: str | None = None) -> tuple[int, Any]:
        """One API request (JSON in and out) as ``cert`` (default the admin): the status and the body."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.context(cert), timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def call_patch(self, path: str, body: Any, *, cert: str | None = None) -> tuple[int, Any]:
        """A JSON merge patch (what the project's in-cluster scripts send)."""
        data = json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
        req = urllib.request.Request(self.url + path, data=data, method="PATCH", headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.context(cert), timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def processes(self) -> Iterable[Process]:
        for h in self.hosts:
            yield from h.processes.values()

    def stop(self) -> None:
        # The API servers' clients first, then the API servers, then etcd: nobody outlives what it needs.
        for pod in reversed(STATIC_PODS):
            for h in self.hosts:
                if pod in h.processes:
                    h.processes[pod].stop()
        for etcd in self.etcds:
            for m in etcd.members:
                if m.proc is not None:
                    etcd.kill(m)

    @property
    def etcds(self) -> list[Etcd]:
        return [self.etcd] + ([self.events_etcd] if self.events_etcd else [])


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _relocate(text: str, root: Path) -> str:
    """Every /etc or /var path in ``text`` under ``root`` (the host's files live there)."""
    return _PATH.sub(lambda m: f"{root}{m.group(1)}", text)


def _command(node: NodeBundle, pod: str) -> list[str]:
    manifest = yaml.safe_load(node.file(f"manifests/{pod}.yaml").content)
    (container,) = manifest["spec"]["containers"]
    return [*container["command"], *container.get("args", [])]


def lay_out_host(cp: ControlPlane, host: Host) -> None:
    """The host's files (bundle files with paths and addresses moved, PKI secrets) under its root."""
    for f in host.node.files:
        if f.path.startswith(("/etc/kubernetes/", "/etc/agk/")):
            _write(host.root / f.path.lstrip("/"), cp.on_host(f.content, host), int(f.mode, 8))
    for s in host.node.secrets:
        _write(host.root / s.path.lstrip("/"), cp.pems[s.secret], int(s.mode, 8))
    (host.root / "var/log/kubernetes/audit").mkdir(parents=True, exist_ok=True)


def argv_on_loopback(cp: ControlPlane, host: Host, pod: str) -> list[str]:
    """The static pod's command, on this machine: the pinned binary, loopback addresses, relocated paths."""
    out = []
    for arg in _command(host.node, pod):
        if arg == pod:
            out.append(tool(pod))
            continue
        flag, eq, value = arg.partition("=")
        if flag == "--secure-port":
            value = str(host.ports[int(value)])
        else:
            value = _relocate(_URL.sub(lambda m: cp._url(m, host), value), host.root)
        out.append(f"{flag}{eq}{value}" if eq else arg)
    return out


def _admin_kubeconfig(cp: ControlPlane) -> Path:
    home = cp.root / "admin"
    _write(home / "ca.crt", cp.pems[f"cert:{pki.KUBERNETES_CA}"])
    cp.context()  # writes the admin pair
    return kubeconfig(home / "admin.kubeconfig", cp.url, home / "ca.crt", cert=(home / "admin.crt", home / "admin.key"))


def kubeconfig(
    path: Path, server: str, ca: Path, *, cert: tuple[Path, Path] | None = None, token: str | None = None
) -> Path:
    user: dict[str, str] = {}
    if cert is not None:
        user = {"client-certificate": str(cert[0]), "client-key": str(cert[1])}
    if token is not None:
        user = {"token": token}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    _write(path, yaml.safe_dump(doc), 0o600)
    return path


def _etcd(
    ctx: BootstrapContext, root: Path, pems: dict[str, str], role: Role
) -> tuple[Etcd, dict[tuple[str, int], int]]:
    members, ports = lay_out(ctx, root, pems, role)
    pki_dir = root / members[0].name / "pki"
    client = (pki_dir / "ca.crt", pki_dir / "healthcheck-client.crt", pki_dir / "healthcheck-client.key")
    return Etcd(members, tool("etcd"), tool("etcdctl"), client), ports


def build(ctx: BootstrapContext, root: Path) -> ControlPlane:
    """Lay out (nothing started) the etcd members and every API server host of ``ctx`` under ``root``."""
    pems = issue(pki.pki_spec(ctx))
    etcd, addresses = _etcd(ctx, root / "etcd", pems, "etcd")
    events_etcd = None
    if ctx.events_etcd is not None:
        events_etcd, more = _etcd(ctx, root / "events-etcd", pems, "events-etcd")
        addresses |= more
    hosts_by_ip = {str(h.ip): h.name for h in ctx.control_plane.apiservers}
    free = iter(_ports(3 * len(hosts_by_ip)))
    hosts = []
    for ip, name in hosts_by_ip.items():
        ports = {p: next(free) for p in HOST_PORTS.values()}
        addresses[(ip, 6443)] = ports[6443]
        hosts.append(Host(name, bundle(ctx, "apiserver", name), root / name, ports))
    # Stand-in for Azure's internal load balancer: its frontend is the first API server.
    addresses[(str(ctx.apiserver_vip), 6443)] = hosts[0].ports[6443]
    cp = ControlPlane(ctx, root, etcd, events_etcd, hosts, pems, root / "admin" / "admin.kubeconfig", addresses)
    _admin_kubeconfig(cp)
    for host in hosts:
        lay_out_host(cp, host)
        for pod in STATIC_PODS:
            argv = [tool("unshare"), "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', host.name]
            argv += argv_on_loopback(cp, host, pod)
            log = root / f"{host.name}-{pod}.log"
            host.processes[pod] = Process(f"{host.name}/{pod}", argv, log, restart=pod != "kube-apiserver")
    return cp


def wait(what: str, ok: Callable[[], bool], processes: Iterable[Process], timeout: float = 180) -> None:
    """Poll ``ok`` until it holds; a process that exits meanwhile fails at once with its log."""
    watched = list(processes)
    deadline = time.monotonic() + timeout
    while not ok():
        for p in watched:
            if not p.alive():
                raise StartFailed(f"{p.name} exited while waiting for {what}:\n{p.tail()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.tail(8)}" for p in watched)
            raise StartFailed(f"timed out waiting for {what}:\n{logs}")
        time.sleep(0.5)


def ready(cp: ControlPlane, host: Host) -> bool:
    try:
        req = urllib.request.Request(host.apiserver_url + "/readyz")
        with urllib.request.urlopen(req, context=cp.context(), timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def leader(cp: ControlPlane, lease: str) -> str | None:
    """The holder of ``kube-system/<lease>`` (the controller-manager's and scheduler's leader election)."""
    try:
        got = cp.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}")
    except urllib.error.HTTPError:
        return None
    holder = got.get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None


def start(cp: ControlPlane, *, hosts: int | None = None, controllers: bool = True) -> None:
    """etcd, then every API server (each to /readyz), then the controller-managers and schedulers (each
    to its healthz, one of each elected leader), as the hosts' kubelets bring the static pods up.
    ``hosts`` starts only the first API server hosts; ``controllers=False`` leaves their controller-managers
    and schedulers stopped (the scale tier's API server for clients under test, with no controller acting)."""
    if hosts is not None:
        for host in cp.hosts[hosts:]:
            host.processes.clear()
        cp.hosts[:] = cp.hosts[:hosts]
    for etcd in cp.etcds:
        for m in etcd.members:
            etcd.start(m)
    for etcd in cp.etcds:
        etcd.wait_healthy(etcd.members)
    for host in cp.hosts:
        host.processes["kube-apiserver"].start()
    for host in cp.hosts:
        wait(f"{host.name} /readyz", lambda h=host: ready(cp, h), [h.processes["kube-apiserver"] for h in cp.hosts])
    if not controllers:
        for host in cp.hosts:
            for pod in STATIC_PODS[1:]:
                del host.processes[pod]
        return
    for host in cp.hosts:
        host.processes["kube-controller-manager"].start()
        host.processes["kube-scheduler"].start()
    everything = list(cp.processes())
    wait("a kube-controller-manager leader", lambda: leader(cp, "kube-controller-manager") is not None, everything)
    wait("a kube-scheduler leader", lambda: leader(cp, "kube-scheduler") is not None, everything)
