"""The boot, replayed with the real programs on throwaway hosts (see hostsim.py).

- The step runner retries, records, and stops the boot after a failure.
- The boot health endpoint answers the Application Health extension's rich states truthfully.
- GPU nodes read their InfiniBand island from IMDS (a stand-in at 169.254.169.254) and the kubelet
  gets the label.
- Pod IPs that cloud-init bound on the first boot come off the host, from IMDS's list.
- systemd-sysctl applies our sysctls after the image's /etc/sysctl.conf.
- Each pool node's boot, replayed in order from the image's state (the HPC image: Docker's FORWARD
  DROP; Ubuntu: pod IPs bound by cloud-init) and its node image's manifest (the first step checks it),
  ends with pod-to-API traffic forwarded; a host booted from another role's image stops at that step.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from modules import labels
from modules.bootstrap.context import BOOT_HEALTH_PATH, BOOT_HEALTH_PORT, IMDS_API_VERSION, BootstrapContext
from modules.bootstrap.layout import PATHS
from modules.bootstrap.roles import NodeBundle, bundle, names
from modules.bootstrap.roles.parts import NODE_IDENTITY_UNIT, POD_IMDS_BLOCKED
from modules.bootstrap.roles.pool import KUBELET_CLIENT_CERT
from modules.images.recipe import MANIFEST, image_role, recipe

from .hostsim import (
    background,
    eth0_with,
    fake_imds,
    in_private_host,
    namespaces,
    network_route,
    nic_ips,
    nic_metadata,
    private_host,
    run,
)

SCALE_SET_ROUTE = f"/metadata/instance/compute/vmScaleSetName?api-version={IMDS_API_VERSION}&format=text"


def _script(node: NodeBundle, name: str) -> str:
    return node.file(name).content


def _ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


def _execs(text: str) -> list[str]:
    """A oneshot unit's ExecStart lines, in the order systemd runs them."""
    return [
        line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ExecStart=") and line != "ExecStart="
    ]


@pytest.mark.realtool
def test_step_runner_retries_records_and_stops_the_boot_after_a_failure(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("unshare")
    node = bundle(dev, "system-node", "system")
    step = PATHS.script("agk-step")
    state = PATHS.boot_state
    lines = [
        *private_host(tmp_path, node),
        "export AGK_STEP_BACKOFF=0",
        # Succeeds on its second try.
        f"{step} flaky 3 'test -e /run/flaky || {{ touch /run/flaky; exit 1; }}'",
        f"test -e {state}/flaky.done",
        # Never succeeds: recorded, and every later step refuses to run.
        f"! {step} broken 2 'exit 7'",
        f'test "$(cat {state}/failed)" = broken',
        f"! {step} later 3 'touch /run/later-ran'",
        "test ! -e /run/later-ran",
        f"test ! -e {state}/later.done",
        "echo replayed",
    ]
    out = in_private_host(None, lines)
    assert out.stdout.strip().endswith("replayed")
    assert "agk-boot: flaky (try 2 of 3)" in out.stderr
    assert "agk-boot: later skipped: step broken failed" in out.stderr


HEALTH_DRIVER = textwrap.dedent(
    """
    import http.server, json, os, shutil, ssl, subprocess, sys, threading, time, urllib.request, urllib.error
    script, steps, port, path, kubeconfig, state, healthz, cert, api, pems = sys.argv[1:11]
    steps, pems = json.loads(steps), json.loads(pems)
    env = dict(os.environ, AGK_BOOT_HEALTH_API_EVERY="0")
    proc = subprocess.Popen([sys.executable, script], env=env)
    url = f"http://127.0.0.1:{port}{path}"

    def probe(u=url):
        for _ in range(100):
            try:
                with urllib.request.urlopen(u, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, None
            except OSError:
                time.sleep(0.05)
        raise SystemExit("boot health endpoint never answered")

    def serve(server):
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    out = {"booting": probe()}
    os.makedirs(state, exist_ok=True)
    for s in steps:
        open(os.path.join(state, s + ".done"), "w").close()
    out["steps done"] = probe()

    # The kubelet started with its bootstrap kubeconfig: healthz answers and it has written its own
    # kubeconfig, which names a client certificate that does not exist until the CSR is signed.
    class Kubelet(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    host, kport = healthz.split(":")
    serve(http.server.ThreadingHTTPServer((host, int(kport)), Kubelet))
    os.makedirs(os.path.dirname(kubeconfig), exist_ok=True)
    open(kubeconfig, "w").write("kind: Config  # users[0] names " + cert + "\\n")
    out["kubelet up, CSR not signed"] = probe()

    # The API server: serves this node's Node to a client the cluster CA signed, Ready or not.
    ready = {"status": "False"}
    class Api(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            subject = dict(x[0] for x in self.connection.getpeercert()["subject"])
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            if subject.get("commonName") != "system:node:" + name:
                self.send_response(403); self.end_headers(); return
            body = json.dumps({"kind": "Node", "status": {"conditions": [{"type": "Ready", **ready}]}}).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a): pass
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pems["apiserver.crt"], pems["apiserver.key"])
    tls.load_verify_locations(pems["ca.crt"])
    tls.verify_mode = ssl.CERT_REQUIRED
    api_host, api_port = api.removeprefix("https://").split(":")
    apiserver = http.server.ThreadingHTTPServer((api_host, int(api_port)), Api)
    apiserver.socket = tls.wrap_socket(apiserver.socket, server_side=True)
    serve(apiserver)

    os.makedirs(os.path.dirname(cert), exist_ok=True)
    for case in ("other CA", "expired", "other node"):
        shutil.copy(pems[case], cert)
        out[f"certificate: {case}"] = probe()
    shutil.copy(pems["node"], cert)
    out["joined, Node NotReady"] = probe()
    ready["status"] = "True"
    out["joined, Node Ready"] = probe()
    apiserver.shutdown(); apiserver.server_close()
    out["joined, API server down"] = probe()
    open(os.path.join(state, "failed"), "w").write(steps[-1])
    out["a step failed"] = probe()
    out["wrong path"] = probe(f"http://127.0.0.1:{port}/")
    proc.kill()
    print(json.dumps(out))
    """
)
NODE_NAME = "agk-h-000007"


def _health_pems(ctx: BootstrapContext, tmp: Path) -> dict[str, str]:
    """The cluster CA and an API server certificate (ClusterPki's spec), and kubelet client
    certificates as the controller-manager signs them: this node's, another node's, an expired one
    and one from a CA the cluster does not trust. Certificate and key in one file, as the kubelet
    writes kubelet-client-current.pem. Returns name -> file."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from modules.bootstrap import pki

    from .certs import issue, leaf

    spec = pki.pki_spec(ctx)
    apiserver = pki.apiserver_cert(names(ctx, "apiserver")[0])
    pems = issue(spec, only={apiserver})
    other = issue(spec, only=set())
    files = {
        "ca.crt": pems[f"cert:{pki.KUBERNETES_CA}"],
        "apiserver.crt": pems[f"cert:{apiserver}"],
        "apiserver.key": pems[f"key:{apiserver}"],
    }

    def kubelet(ca: dict[str, str], cn: str, now: dt.datetime, hours: int = 24) -> str:
        ca_key = serialization.load_pem_private_key(ca[f"key:{pki.KUBERNETES_CA}"].encode(), None)
        ca_cert = x509.load_pem_x509_certificate(ca[f"cert:{pki.KUBERNETES_CA}"].encode())
        spec_ = pki.CertSpec("kubelet-client", pki.KUBERNETES_CA, cn, "system:nodes", validity_hours=hours)
        key, cert = leaf(spec_, ca_key, ca_cert, now)  # type: ignore[arg-type]
        return (
            cert
            + key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
            ).decode()
        )

    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    files |= {
        "node": kubelet(pems, f"system:node:{NODE_NAME}", now),
        "other node": kubelet(pems, "system:node:agk-h-000008", now),
        "expired": kubelet(pems, f"system:node:{NODE_NAME}", now - dt.timedelta(days=3), hours=24),
        "other CA": kubelet(other, f"system:node:{NODE_NAME}", now),
    }
    out = {}
    for name, text in files.items():
        path = tmp / f"pem-{name.replace(' ', '-')}"
        path.write_text(text)
        out[name] = str(path)
    return out


@pytest.mark.realtool
@pytest.mark.parametrize("pool", ["system", "a100"])
def test_boot_health_is_healthy_only_once_the_node_has_joined(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, pool: str
) -> None:
    require("ip")
    require("unshare")
    require("openssl")
    node = bundle(dev, dev.pool(pool).role, pool)
    driver = tmp_path / "driver.py"
    driver.write_text(HEALTH_DRIVER)
    pems = _health_pems(dev, tmp_path)
    args = [
        PATHS.script("boot-health.py"),
        json.dumps([s.name for s in node.steps]),
        str(BOOT_HEALTH_PORT),
        BOOT_HEALTH_PATH,
        PATHS.kubelet_kubeconfig,
        PATHS.boot_state,
        "127.0.0.1:10248",
        KUBELET_CLIENT_CERT,
        dev.apiserver_url,
        json.dumps(pems),
    ]
    with namespaces("node") as ns:  # its own loopback: the ports are free; the API server VIP on it
        run("ip", "addr", "add", f"{dev.apiserver_vip}/32", "dev", "lo", ns=ns["node"])
        ca = Path(pems["ca.crt"]).read_text()
        command = " ".join([sys.executable, str(driver), *map(shlex.quote, args)])
        lines = [
            *private_host(tmp_path, node, {f"{PATHS.pki}/ca.crt": ca}),
            # The node's own host name (a UTS namespace), as the kubelet registers it.
            f"exec unshare -u sh -c {shlex.quote(f'hostname {NODE_NAME.upper()} && exec {command}')}",
        ]
        out = in_private_host(ns["node"], lines)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    healthy, unhealthy = [200, {"ApplicationHealthState": "Healthy"}], [200, {"ApplicationHealthState": "Unhealthy"}]
    assert result == {
        "booting": unhealthy,
        "steps done": unhealthy,
        "kubelet up, CSR not signed": unhealthy,
        "certificate: other CA": unhealthy,
        "certificate: expired": unhealthy,
        "certificate: other node": unhealthy,
        "joined, Node NotReady": unhealthy,
        "joined, Node Ready": healthy,
        "joined, API server down": healthy,
        "a step failed": unhealthy,
        "wrong path": [404, None],
    }, out.stderr
    # Each Unhealthy answer says why, once per change, in the journal.
    for why in (
        "the kubelet's CSR is not signed yet",
        "does not chain to the cluster CA or is out of date",
        "not CN=system:node:agk-h-000007,O=system:nodes",
        "Node not Ready",
    ):
        assert why in out.stderr, out.stderr


def _expand(exec_start: str, env: dict[str, str]) -> list[str]:
    """systemd's ${VAR} expansion on a command line (systemd.service: one word, the variable's value)."""
    return [re.sub(r"\$\{([A-Za-z0-9_]+)\}", lambda m: env.get(m.group(1), ""), w) for w in exec_start.split()]


@pytest.mark.realtool
def test_gpu_nodes_register_with_their_infiniband_island(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("ip")
    require("unshare")
    node = bundle(dev, "gpu-node", "h100")
    key = labels.key(dev.label_domain, labels.IB_ISLAND)
    routes = {SCALE_SET_ROUTE: {"body": "h100-01", "fail_first": 2}}  # IMDS busy at first: retried
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, routes):
        lines = [
            *private_host(tmp_path, node),
            "export http_proxy=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9",  # IMDS must bypass proxies
            "export AGK_IMDS_RETRY_DELAY=1",
            *_execs(node.file(f"systemd/{NODE_IDENTITY_UNIT}").content),
            f"cat {PATHS.kubelet_env}",
        ]
        out = in_private_host(ns["node"], lines)
    env_line = out.stdout.strip().splitlines()[-1]
    name, _, value = env_line.partition("=")
    env = {name: value}
    assert env == {"AGK_NODE_LABELS": f"{key}=h100-01"}
    unit = _ini(node.file("systemd/kubelet.service.d/10-agk.conf").content)
    assert unit.get("Service", "EnvironmentFile") == PATHS.kubelet_env
    exec_start = [v for v in _execs(node.file("systemd/kubelet.service.d/10-agk.conf").content)][-1]
    flag = next(w for w in _expand(exec_start, env) if w.startswith("--node-labels="))
    assert flag.endswith(f",{key}=h100-01")
    assert f"{dev.label_domain}/pool=h100" in flag


@pytest.mark.realtool
def test_a_scale_set_name_that_is_no_label_value_stops_the_kubelet(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    node = bundle(dev, "gpu-node", "h100")
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, {SCALE_SET_ROUTE: {"body": "not a label!"}}):
        lines = [*private_host(tmp_path, node), f"sh {PATHS.script('node-identity.sh')}"]
        out = in_private_host(ns["node"], lines, check=False)
    assert out.returncode != 0
    assert "is not a Kubernetes label value" in out.stderr


@pytest.mark.realtool
def test_pod_ips_that_cloud_init_bound_come_off_the_host(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    require("ip")
    pool = dev.pool("system")
    node = bundle(dev, "system-node", "system")
    network = nic_metadata(pool)
    ips = nic_ips(network)
    prefix = pool.subnet.prefixlen
    # What cloud-init 22.4's Azure datasource writes with apply_network_config (netplan v2).
    netplan = {
        "network": {
            "version": 2,
            "ethernets": {
                "eth0": {
                    "dhcp4": True,
                    "addresses": [f"{ip}/{prefix}" for ip in ips[1:]],
                    "match": {"macaddress": "00:0d:3a:00:00:00"},
                    "set-name": "eth0",
                }
            },
        }
    }
    with namespaces("node") as ns, fake_imds(ns["node"], tmp_path, network_route(network)):
        eth0_with(ns["node"], ips, prefix)
        lines = [
            *private_host(tmp_path, node, {"/etc/netplan/50-cloud-init.yaml": json.dumps(netplan)}),
            f"/usr/bin/python3 {PATHS.script('pod-ips-off-host.py')}",
            "cat /etc/netplan/50-cloud-init.yaml",
        ]
        out = in_private_host(ns["node"], lines)
        left = run("ip", "-j", "-4", "addr", "show", "dev", "eth0", ns=ns["node"]).stdout
    bound = [a["local"] for link in json.loads(left) for a in link["addr_info"]]
    assert bound == [ips[0]]  # only the node's own address
    plan_text = out.stdout[out.stdout.index("network:") :]
    assert not any(ip in plan_text for ip in ips[1:])
    assert "dhcp4: true" in plan_text


def _per_netns_sysctls(text: str, ns: str) -> str:
    """Our sysctl file without the keys a network namespace does not have (host-global ones: they
    would change the machine running the tests)."""
    keep = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if "=" in line and not line.startswith("#"):
            path = "/proc/sys/" + key.replace(".", "/")
            if run("test", "-e", path, ns=ns, check=False).returncode != 0 or not key.startswith("net."):
                continue
        keep.append(line)
    return "\n".join(keep) + "\n"


@pytest.mark.realtool
def test_our_sysctls_win_over_the_images_sysctl_conf(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    node = bundle(dev, "gpu-node", "a100")
    sysctl_d = Path("/lib/systemd/systemd-sysctl")
    assert sysctl_d.exists(), "systemd-sysctl is part of Debian's systemd package"
    with namespaces("node") as ns:
        ours = _per_netns_sysctls(node.file("sysctl.d/999-agk.conf").content, ns["node"])
        assert "net.ipv4.ip_forward = 1" in ours
        files = {
            "/etc/sysctl.conf": "# the image's own settings\nnet.ipv4.ip_forward = 0\n",
            PATHS.sysctl: ours,
        }
        lines = [
            *private_host(tmp_path, node, files),
            "test -L /etc/sysctl.d/99-sysctl.conf",  # Debian's link to /etc/sysctl.conf
            f"{sysctl_d} --prefix=net.ipv4.ip_forward",
            "cat /proc/sys/net/ipv4/ip_forward",
        ]
        out = in_private_host(ns["node"], lines)
    assert out.stdout.strip().splitlines()[-1] == "1"


API_SERVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
    print("ready", flush=True)
    while True:
        c, _ = s.accept(); c.sendall(b"api"); c.close()
    """
)
POD_CLIENT = textwrap.dedent(
    """
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as c:
            print(c.recv(16).decode())
    except OSError as e:
        print(f"unreachable: {e}")
    """
)
IMDS_CLIENT = textwrap.dedent(
    """
    import sys, urllib.request
    url = "http://169.254.169.254" + sys.argv[1]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers={"Metadata": "true"}), timeout=3) as r:
            print(f"imds {r.status}")
    except OSError as e:
        print(f"unreachable: {e}")
    """
)
# What each image does to the host before customData is read (research notes, azhpc-images): the
# HPC image's Docker sets FORWARD DROP (iptables-nft, the default backend) and cloud-init leaves
# networking alone; Ubuntu's cloud-init binds every IP configuration in IMDS to eth0.
IMAGE_STATE = {"gpu-node": ["iptables-nft -P FORWARD DROP"], "system-node": []}


def _replay(node: NodeBundle) -> tuple[list[str], list[str]]:
    """The boot steps in order: each step that starts one of our oneshot units runs the unit's commands, as
    systemd runs a oneshot; the rest (and our long-running services, e.g. the Scheduled Events agent, which
    needs the kubelet's credential) are named with the reason they cannot run here."""
    units = {f.rel.removeprefix("systemd/"): f.content for f in node.files if f.path.startswith("/etc/systemd/system/")}
    commands, skipped = [], []
    for step in node.steps:
        if step.name == "image":
            # The image check is a program of ours: it runs for real, against the manifest the image carries.
            commands += [f"echo step:{step.name}", step.command]
            continue
        started = re.fullmatch(r"systemctl enable (\S+) && systemctl restart (\S+)", step.command)
        long_running = (
            started and started.group(1).endswith(".service") and "Type=oneshot" not in units.get(started.group(1), "")
        )
        if started and started.group(1) in units and not long_running:
            commands += [f"echo step:{step.name}", *_execs(units[started.group(1)])]
        else:
            skipped.append(step.name)
    return commands, skipped


@pytest.mark.realtool
@pytest.mark.parametrize("pool", ["a100", "system"])
def test_replayed_boot_forwards_pod_traffic_to_the_api_server(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path, pool: str
) -> None:
    require("ip")
    require("iptables")
    require("unshare")
    plan = dev.pool(pool)
    node = bundle(dev, plan.role, pool)
    network = nic_metadata(plan)
    ips = nic_ips(network)
    node_ip, pod_ip, vip = ips[0], ips[1], str(dev.apiserver_vip)
    routes = network_route(network) | {SCALE_SET_ROUTE: {"body": f"{pool}-00"}}
    commands, skipped = _replay(node)
    # Service starts cannot run here; they are steps of their own, in this order (the boot installs nothing).
    # nvidia-ctk (gpu-isolation) ships only on the HPC image, so it is a step of its own too. The token
    # wait reads Key Vault (tests/bootstrap/host/test_node_token.py runs it against the loopback vault).
    later = ("gpu-isolation", "containerd", "bootstrap-token", "kubelet", "scheduled-events")
    assert [s for s in skipped if s not in later] == [
        s.name for s in node.steps[1 : node.steps.index(next(s for s in node.steps if s.name == "host-network"))]
    ]
    assert skipped[-4:] == ["containerd", "bootstrap-token", "kubelet", "scheduled-events"]
    # IMDS sits beyond eth0, as in Azure (here in the namespace that stands for the VNet side).
    with namespaces("node", "pod", "api") as ns, fake_imds(ns["api"], tmp_path, routes):
        n, p, a = ns["node"], ns["pod"], ns["api"]
        # pod --azv veth-- node --eth0-- API server (the VNet routes it; here a link)
        run("ip", "link", "add", "azv0c0ffee", "netns", n, "type", "veth", "peer", "name", "eth0", "netns", p)
        run("ip", "link", "add", "eth0", "netns", n, "type", "veth", "peer", "name", "eth0", "netns", a)
        for name, link in ((n, "azv0c0ffee"), (n, "eth0"), (p, "eth0"), (a, "eth0")):
            run("ip", "link", "set", link, "up", ns=name)
        run("ip", "addr", "add", f"{node_ip}/{plan.subnet.prefixlen}", "dev", "eth0", ns=n)
        if plan.role == "system-node":  # cloud-init's work on the Ubuntu image
            for ip in ips[1:]:
                run("ip", "addr", "add", f"{ip}/{plan.subnet.prefixlen}", "dev", "eth0", ns=n)
        run("ip", "route", "add", f"{vip}/32", "dev", "eth0", ns=n)
        run("ip", "route", "add", "169.254.169.254/32", "dev", "eth0", ns=n)  # Azure's DHCP route to IMDS
        # Azure's default route via the subnet's gateway (.1): proxy ARP answers pods for 169.254.1.1.
        run("ip", "route", "add", "default", "via", str(plan.subnet.network_address + 1), "dev", "eth0", ns=n)
        # Azure CNI transparent mode: a /32 route to the pod's veth, the pod routes via 169.254.1.1.
        run("ip", "route", "add", f"{pod_ip}/32", "dev", "azv0c0ffee", ns=n)
        run("sysctl", "-qw", "net.ipv4.conf.azv0c0ffee.proxy_arp=1", ns=n)
        run("ip", "addr", "add", f"{pod_ip}/32", "dev", "eth0", ns=p)
        run("ip", "route", "add", "169.254.1.1", "dev", "eth0", ns=p)
        run("ip", "route", "add", "default", "via", "169.254.1.1", "dev", "eth0", ns=p)
        run("ip", "addr", "add", f"{vip}/32", "dev", "eth0", ns=a)
        run("ip", "route", "add", f"{node_ip}/32", "dev", "eth0", ns=a)
        run("ip", "route", "add", f"{pod_ip}/32", "via", node_ip, "dev", "eth0", "onlink", ns=a)
        for cmd in IMAGE_STATE[plan.role]:
            run(*cmd.split(), ns=n)
        client = tmp_path / "client.py"
        client.write_text(POD_CLIENT)
        server = tmp_path / "server.py"
        server.write_text(API_SERVER)
        imds = tmp_path / "imds_client.py"
        imds.write_text(IMDS_CLIENT)
        with background(a, sys.executable, str(server), vip, "6443"):
            before = run(sys.executable, str(client), vip, "6443", ns=p).stdout.strip()
            files = {
                PATHS.sysctl: _per_netns_sysctls(node.file("sysctl.d/999-agk.conf").content, n),
                # What the pool's node image carries (modules/images): its manifest, of the cluster's release.
                MANIFEST: recipe(image_role(plan.role), dev.kubernetes_version).manifest_json(),
            }
            out = in_private_host(n, [*private_host(tmp_path, node, files), *commands, "iptables-legacy -S FORWARD"])
            after = run(sys.executable, str(client), vip, "6443", ns=p).stdout.strip()
            probe = f"/metadata/instance/compute/vmScaleSetName?api-version={IMDS_API_VERSION}&format=text"
            pod_imds = run(sys.executable, str(imds), probe, ns=p).stdout.strip()
            host_imds = run(sys.executable, str(imds), probe, ns=n).stdout.strip()
        assert before.startswith("unreachable"), before
        assert after == "api", f"{after}\n{out.stdout}{out.stderr}"
        # The host keeps IMDS (node identity, its own token); a pod on a GPU node gets nothing from it.
        assert host_imds == "imds 200", host_imds
        if plan.role in POD_IMDS_BLOCKED:
            assert pod_imds.startswith("unreachable"), pod_imds
        else:
            assert pod_imds == "imds 200", pod_imds
        replayed = [line.removeprefix("step:") for line in out.stdout.splitlines() if line.startswith("step:")]
        # The last step starts agk-sync.timer, which runs nothing now (agk-sync.service waits for its hour).
        expected = [
            "image",
            "host-network",
            *(["node-identity"] if plan.gpus else []),
            "egress-accounting",
            "sync-timer",
        ]
        assert replayed == expected
        # Every pod packet went through the host's FORWARD chain: the accounting rules saw them.
        assert "-A FORWARD -j AGK-FORWARD" in out.stdout


@pytest.mark.realtool
def test_a_host_booted_from_the_wrong_image_stops_at_the_first_step(
    dev: BootstrapContext, require: Callable[[str], str], tmp_path: Path
) -> None:
    """The image check (host/image.py) run by the step runner as the boot runs it: the etcd image under a GPU
    pool's bundle fails the boot with one line naming what it found and what it needs, and no later step runs."""
    require("unshare")
    node = bundle(dev, "gpu-node", "a100")
    wrong = recipe("etcd", dev.kubernetes_version).manifest_json()
    image_step = node.steps[0]
    lines = [
        *private_host(tmp_path, node, {MANIFEST: wrong}),
        "export AGK_STEP_BACKOFF=0",
        f"! {image_step.runcmd}",
        f'test "$(cat {PATHS.boot_state}/failed)" = image',
        f"! {node.steps[1].runcmd}",
        "echo stopped",
    ]
    out = in_private_host(None, lines)
    assert out.stdout.strip().endswith("stopped"), out.stderr
    message = next(line for line in out.stderr.splitlines() if line.startswith("agk image: "))
    assert message.startswith("agk image: this host booted an image with role 'etcd', not 'gpu-node'; no containerd")
    assert message.endswith(
        "it needs the gpu-node image 36.4.1 (Kubernetes 1.36.4): boot it from that gallery image version"
        " (cluster.node_images; docs/images.md)"
    )
    assert f"agk-boot: {node.steps[1].name} skipped: step image failed" in out.stderr
