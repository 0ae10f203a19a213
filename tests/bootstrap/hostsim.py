"""Throwaway hosts for the boot tests: network namespaces, private mount namespaces, a fake IMDS.

Nothing here changes the machine the tests run on: every address, route and iptables rule lives in
a network namespace deleted afterwards, and every file a boot step writes under /etc, /var/lib,
/run or /opt lands in an overlay of that directory inside a private mount namespace.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from modules.bootstrap.context import IMDS_API_VERSION, PoolBoot
from modules.bootstrap.roles import NodeBundle

IMDS_ADDRESS = "169.254.169.254"
FAKE_IMDS = Path(__file__).with_name("fake_imds.py")
OVERLAID = ("/etc", "/var/lib", "/var/cache", "/var/log", "/run", "/opt")


def run(*args: str, ns: str | None = None, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {out.stdout}{out.stderr}")
    return out  # type: ignore[no-any-return]


@contextmanager
def namespaces(*roles: str) -> Iterator[dict[str, str]]:
    tag = f"agk{os.getpid() % 100000}{uuid.uuid4().hex[:5]}"
    names = {role: f"{tag}-{role}" for role in roles}
    made = []
    try:
        for name in names.values():
            run("ip", "netns", "add", name)
            made.append(name)
            run("ip", "link", "set", "lo", "up", ns=name)
        yield names
    finally:
        for name in made:
            run("ip", "netns", "del", name, check=False)


@contextmanager
def background(ns: str, *cmd: str) -> Iterator[subprocess.Popen[str]]:
    """A server in ``ns`` that prints 'ready' once it listens."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line != "ready":
            proc.kill()
            raise AssertionError(f"{' '.join(cmd)} did not start: {line} {proc.stderr.read() if proc.stderr else ''}")
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextmanager
def fake_imds(ns: str, tmp: Path, routes: dict[str, dict[str, object]]) -> Iterator[None]:
    """IMDS at 169.254.169.254:80 inside ``ns``."""
    run("ip", "addr", "add", f"{IMDS_ADDRESS}/32", "dev", "lo", ns=ns)
    table = tmp / f"imds-{uuid.uuid4().hex[:6]}.json"
    table.write_text(json.dumps(routes))
    with background(ns, sys.executable, str(FAKE_IMDS), IMDS_ADDRESS, "80", str(table)):
        yield


def network_route(network: dict[str, object]) -> dict[str, dict[str, object]]:
    return {f"/metadata/instance/network?api-version={IMDS_API_VERSION}": {"body": network}}


def nic_metadata(pool: PoolBoot, index: int = 0) -> dict[str, object]:
    """IMDS network metadata of one node's NIC: ipconfig1 (the node), then one secondary per pod IP."""
    base = pool.subnet.network_address + 4 + index * (1 + pool.pod_ips)
    return {
        "interface": [
            {
                "macAddress": f"000D3A{index:06X}",
                "ipv4": {
                    "subnet": [{"address": str(pool.subnet.network_address), "prefix": str(pool.subnet.prefixlen)}],
                    "ipAddress": [
                        {"privateIpAddress": str(base + i), "publicIpAddress": ""} for i in range(1 + pool.pod_ips)
                    ],
                },
                "ipv6": {"ipAddress": []},
            }
        ]
    }


def nic_ips(network: dict[str, object]) -> list[str]:
    nic = network["interface"][0]  # type: ignore[index]
    return [a["privateIpAddress"] for a in nic["ipv4"]["ipAddress"]]


def eth0_with(ns: str, ips: Sequence[str], prefix: int) -> None:
    """Give the node namespace an eth0 (one end of a veth pair) holding ``ips``, as the NIC's IP
    configurations would be bound to it."""
    run("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer", ns=ns)
    run("ip", "link", "set", "eth0", "up", ns=ns)
    for ip in ips:
        run("ip", "addr", "add", f"{ip}/{prefix}", "dev", "eth0", ns=ns)


def private_host(tmp: Path, node: NodeBundle, files: dict[str, str] | None = None) -> list[str]:
    """Shell lines (for `unshare -m`) that overlay /etc, /var/lib, /run and /opt and put the node's
    files (and ``files``: path -> text) there, as cloud-init's write_files would."""
    stage = tmp / f"stage-{uuid.uuid4().hex[:6]}"
    wanted = {f.path: (f.content, f.mode) for f in node.files} | {p: (t, "0644") for p, t in (files or {}).items()}
    for path, (text, mode) in wanted.items():
        if not path.startswith(tuple(d + "/" for d in OVERLAID)):
            continue
        target = stage / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(int(mode, 8))
    lines = ["set -eu"]
    for d in OVERLAID:
        upper, work = tmp / f"up{d.replace('/', '-')}", tmp / f"work{d.replace('/', '-')}"
        upper.mkdir(exist_ok=True)
        work.mkdir(exist_ok=True)
        lines.append(f"mount -t overlay agk -o lowerdir={d},upperdir={upper},workdir={work} {d}")
    lines.append(f"cp -a {shlex.quote(str(stage))}/. /")
    return lines


def in_private_host(ns: str | None, lines: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines), ns=ns, check=check)
