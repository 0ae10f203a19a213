"""The rendered image build script, run for real with bash, curl, tar, sha256sum, apt and dpkg in a Debian chroot.

The base is ``debootstrap --variant=minbase --include=curl bookworm`` (curl: Ubuntu's server and HPC images
ship it), made once into a cache folder ($XDG_CACHE_HOME/agk, else ~/.cache/agk) with the apt indexes and
the .debs the tested roles install already downloaded, then copied per test; apt still runs ``update``
against deb.debian.org as the script does, but installs from the staged .debs.

Stand-ins, named as such: a loopback HTTP server (Python's http.server on 127.0.0.1) stands in for GitHub's
and dl.k8s.io's release downloads. It serves etcd-v3.6.14-linux-amd64.tar.gz packed here from the REAL etcd,
etcdctl and etcdutl that ``make components`` builds at the table's version (upstream's layout), and small
shell-script fakes for containerd, runc, crictl, the CNI plugins, kubelet and kubectl, whose real releases
are not on this machine. The recipes take those archives' sha256s through ``recipe(rows=...)``; every other
line of the script is the production rendering. needrestart itself is not installed in the chroot (its
dependencies are large): its configuration is evaluated by the chroot's real perl exactly as
needrestart.conf evaluates conf.d files.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import http.server
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from modules.bootstrap import versions
from modules.images.build import APT_CONF, NEEDRESTART_CONF, script
from modules.images.recipe import MANIFEST, ImageRole, Recipe, recipe
from tests.bootstrap.conftest import tool

pytestmark = pytest.mark.realtool

SUITE = "bookworm"
DEBIAN = "http://deb.debian.org/debian"
STAGED = ("prometheus-node-exporter", "iptables")
"""The packages of the roles these tests build (etcd, system-node), downloaded into the cached root."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _root_user() -> None:
    if os.geteuid() != 0:
        pytest.fail(
            "the image build test must run as root (debootstrap, chroot, apt inside the chroot): run pytest as root, "
            "as CI and `make test` do",
            pytrace=False,
        )


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agk"


def _in_root(root: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` chrooted into ``root``, with its own /proc in a private mount namespace (gone when it exits)."""
    inner = f'mount -t proc proc "$1/proc" && shift && exec {tool("chroot")} "$@"'
    return subprocess.run(
        [
            tool("unshare"),
            "--mount",
            "--propagation",
            "private",
            "--fork",
            "sh",
            "-c",
            inner,
            "sh",
            str(root),
            str(root),
            *argv,
        ],
        env={"PATH": PATH, "HOME": "/root", "LC_ALL": "C", **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@functools.cache
def _cached_base() -> Path:
    """The minbase root with apt's indexes and the staged .debs, made once (a lock keeps parallel runs apart)."""
    key = hashlib.sha256(f"{SUITE} minbase curl {' '.join(STAGED)} v1".encode()).hexdigest()[:12]
    cache = _cache_dir() / f"debootstrap-{SUITE}-minbase-{key}"
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{cache}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (cache / ".complete").is_file():
            return cache / "root"
        shutil.rmtree(cache, ignore_errors=True)
        root = cache / "root"
        root.mkdir(parents=True)
        made = subprocess.run(
            [tool("debootstrap"), "--variant=minbase", "--include=curl", SUITE, str(root), DEBIAN],
            capture_output=True,
            text=True,
            check=False,
        )
        assert made.returncode == 0, f"debootstrap failed:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}"
        shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
        for argv in (
            ("apt-get", "-q", "update"),
            ("apt-get", "-q", "-y", "install", "--download-only", "--no-install-recommends", *STAGED),
        ):
            done = _in_root(root, *argv)
            assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        (cache / ".complete").touch()
        return root


@pytest.fixture
def base_root(tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the cached minbase root (removed afterwards: a root is about 200 MB)."""
    _root_user()
    for name in ("debootstrap", "chroot", "unshare"):
        tool(name)
    started = time.monotonic()
    cached = _cached_base()
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", str(cached), str(root)], check=True)
    print(f"base root ready in {time.monotonic() - started:.1f}s")
    yield root
    shutil.rmtree(root, ignore_errors=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server (the stand-in for the release downloads) and the folder it serves."""
    served = tmp_path / "served"
    served.mkdir()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(served)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


def _script(text: str) -> bytes:
    return ("#!/bin/sh\n" + text).encode()


def _tgz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    # Level 1: the real etcd binaries are tens of MB, and the level changes nothing the test checks.
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), 0o755, 1001, 1001
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _etcd_tarball() -> bytes:
    """etcd-v3.6.14-linux-amd64.tar.gz in upstream's layout, of the REAL binaries make components built."""
    v = versions.ETCD
    return _tgz({f"etcd-v{v}-linux-amd64/{b}": Path(tool(b)).read_bytes() for b in ("etcd", "etcdctl", "etcdutl")})


AZURE_CNI_BINARIES = ("azure-vnet", "azure-vnet-ipam")


def _fakes(release: str) -> dict[str, bytes]:
    """Small stand-ins for the rows whose real downloads are not on this machine, in upstream's layout."""
    a = versions.ARTIFACTS
    say = "echo {}\n"
    return {
        "containerd": _tgz(
            {
                "bin/containerd": _script(
                    say.format(f"containerd github.com/containerd/containerd/v2 v{a['containerd'].version} fake")
                ),
                "bin/ctr": _script(say.format("ctr fake")),
                "bin/containerd-shim-runc-v2": _script(say.format("shim fake")),
            }
        ),
        "runc": _script(say.format(f"runc version {a['runc'].version} fake")),
        "crictl": _tgz({"crictl": _script(say.format(f"crictl version v{a['crictl'].version} fake"))}),
        "cni-plugins": _tgz({f"./{p}": _script(say.format(f"{p} fake")) for p in ("loopback", "portmap", "bridge")}),
        # Azure CNI is built from its Go module in production (minutes of compiling on 2 cores): the test serves
        # a prebuilt stand-in tarball instead, so the row goes through the download path (_serve drops go_module).
        "azure-cni": _tgz({b: _script(say.format(f"{b} v{a['azure-cni'].version} fake")) for b in AZURE_CNI_BINARIES}),
        "kubelet": _script(say.format(f"Kubernetes v{release} fake")),
        "kubectl": _script(say.format(f"Client Version: v{release} fake")),
    }


def _serve(
    role: ImageRole, minor: str, base: str, served: Path, *, dead_urls: bool = False, corrupt: str = ""
) -> Recipe:
    """The role's recipe whose rows are served by the loopback server at ``<name>/<version>/<file>``.

    ``dead_urls``: the rows' own URLs point nowhere (only the mirror variable can reach them).
    ``corrupt``: that row's served file has one byte changed after its sha256 was taken.
    """
    production = recipe(role, minor)
    fakes = _fakes(production.release)
    rows: dict[str, versions.Artifact] = {}
    for i in production.installs:
        body = _etcd_tarball() if i.row.name == "etcd" else fakes[i.row.name]
        path = served / i.mirror_path
        path.parent.mkdir(parents=True, exist_ok=True)
        sha = hashlib.sha256(body).hexdigest()
        if i.row.name == corrupt:
            body = bytes([body[0] ^ 0x01]) + body[1:]
        path.write_bytes(body)
        host = "http://127.0.0.1:9" if dead_urls else base
        rows[i.row.name] = replace(i.row, url=f"{host}/{i.mirror_path}", sha256=sha, go_module=None)
    return recipe(role, minor, rows=rows)


def _build(root: Path, r: Recipe, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (root / "build-image.sh").write_text(script(r))
    started = time.monotonic()
    done = _in_root(root, "/bin/bash", "/build-image.sh", env=env)
    print(f"{r.role} build: {time.monotonic() - started:.1f}s")
    return done


def _out(root: Path, *argv: str) -> str:
    done = _in_root(root, *argv)
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_etcd_image(base_root: Path, server: tuple[str, Path]) -> None:
    """The etcd image: upstream etcd 3.6.14 in /usr/local/bin, node-exporter installed and held, automatic
    upgrades off, needrestart list-only and never selecting etcd, the manifest; no policy-rc.d left behind."""
    base, served = server
    r = _serve("etcd", "1.35", base, served)
    done = _build(base_root, r)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    assert "etcd Version: 3.6.14" in _out(base_root, "/usr/local/bin/etcd", "--version")
    assert "etcdctl version: 3.6.14" in _out(base_root, "/usr/local/bin/etcdctl", "version")
    assert "etcdutl version: 3.6.14" in _out(base_root, "/usr/local/bin/etcdutl", "version")
    assert not (base_root / "usr/bin/etcd").exists(), "Debian's etcd-server is not installed"
    assert (base_root / "usr/local/bin/etcd").stat().st_uid == 0

    assert _out(base_root, "apt-mark", "showhold").split() == ["prometheus-node-exporter"]
    status = _out(base_root, "dpkg-query", "-W", "-f=${db:Status-Abbrev}${Package}\n", "prometheus-node-exporter")
    assert status.split() == ["hi", "prometheus-node-exporter"], "installed (i), selected as held (h)"
    assert not (base_root / "usr/sbin/policy-rc.d").exists()

    dump = _out(base_root, "apt-config", "dump")
    for line in (
        'APT::Periodic::Enable "0";',
        'APT::Periodic::Update-Package-Lists "0";',
        'APT::Periodic::Unattended-Upgrade "0";',
        'Unattended-Upgrade::Package-Blacklist:: "^prometheus-node-exporter$";',
    ):
        assert line in dump.splitlines(), f"apt-config dump lacks {line}"
    # What apt.systemd.daily reads before it does anything (apt's debian/apt.systemd.daily).
    assert _out(base_root, "apt-config", "shell", "E", "APT::Periodic::Enable").strip() == "E='0'"

    # needrestart.conf's own conf.d loop (liske/needrestart ex/needrestart.conf), over part of its defaults.
    perl = r"""
        our %nrconf = (restart => 'i', override_rc => { qr(^dbus) => 0 });
        my $fn = shift @ARGV;
        eval do { local(@ARGV, $/) = $fn; <> };
        die "evaluating $fn: $@" if $@;
        my %selected;
        for my $unit (@ARGV) {
            my $sel = 1;
            for my $re (keys %{$nrconf{override_rc}}) { if ($unit =~ /$re/) { $sel = $nrconf{override_rc}{$re}; last } }
            print "$unit=$sel\n";
        }
        print "restart=$nrconf{restart}\n";
    """
    units = ("etcd.service", "kubelet.service", "containerd.service", "dbus.service", "ssh.service", "etcd-x.service")
    got = dict(line.split("=") for line in _out(base_root, "perl", "-e", perl, NEEDRESTART_CONF, *units).split())
    assert got == {
        "etcd.service": "0",
        "kubelet.service": "0",
        "containerd.service": "0",
        "dbus.service": "0",
        "ssh.service": "1",
        "etcd-x.service": "1",
        "restart": "l",
    }

    manifest = json.loads((base_root / MANIFEST.lstrip("/")).read_text())
    assert manifest == r.manifest()
    assert manifest["artifacts"] == [{"name": "etcd", "version": "3.6.14", "sha256": r.installs[0].sha256}]
    assert manifest["release"] == "1.35.8" and manifest["role"] == "etcd"


def test_system_node_image_from_a_mirror(base_root: Path, server: tuple[str, Path]) -> None:
    """Every row lands where upstream's instructions put it, fetched from AGK_ARTIFACT_BASE (the rows' own
    URLs are dead); iptables installed and held."""
    base, served = server
    r = _serve("system-node", "1.36", base, served, dead_urls=True)
    done = _build(base_root, r, env={"AGK_ARTIFACT_BASE": base + "/"})
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    a = versions.ARTIFACTS
    assert _out(base_root, "containerd", "--version").startswith(
        f"containerd github.com/containerd/containerd/v2 v{a['containerd'].version}"
    )
    for path in ("usr/local/bin/containerd", "usr/local/bin/ctr", "usr/local/bin/containerd-shim-runc-v2"):
        assert (base_root / path).stat().st_uid == 0, f"{path} keeps the tarball's owner"
    assert _out(base_root, "/usr/local/sbin/runc").startswith(f"runc version {a['runc'].version}")
    assert _out(base_root, "/usr/local/bin/crictl").startswith(f"crictl version v{a['crictl'].version}")
    assert sorted(p.name for p in (base_root / "opt/cni/bin").iterdir()) == [
        "azure-vnet",
        "azure-vnet-ipam",
        "bridge",
        "loopback",
        "portmap",
    ]
    assert _out(base_root, "/opt/cni/bin/azure-vnet").startswith(f"azure-vnet v{a['azure-cni'].version}")
    assert _out(base_root, "/usr/local/bin/kubelet").startswith("Kubernetes v1.36.4")
    # The base units of the image's containerd and kubelet (their tarballs have none), which the bundle's
    # drop-ins extend; systemd reads /usr/local/lib/systemd/system before the distribution's units.
    for unit, program in (
        ("containerd.service", "/usr/local/bin/containerd"),
        ("kubelet.service", "/usr/local/bin/kubelet"),
    ):
        text = (base_root / "usr/local/lib/systemd/system" / unit).read_text()
        assert f"ExecStart={program}\n" in text, unit
    assert _out(base_root, "apt-mark", "showhold").split() == ["iptables"]
    assert "iptables v1.8" in _out(base_root, "iptables", "--version")
    assert json.loads((base_root / MANIFEST.lstrip("/")).read_text()) == r.manifest()


def test_checksum_mismatch_stops_the_build(base_root: Path, server: tuple[str, Path]) -> None:
    """One byte changed in runc's download: the build stops at runc with one line naming the row, the
    expected and the actual sha256; containerd (before it) is installed, nothing after it is: no crictl,
    kubelet or kubectl, no packages or holds, no apt or needrestart configuration, no manifest."""
    base, served = server
    r = _serve("apiserver", "1.35", base, served, corrupt="runc")
    runc = next(i for i in r.installs if i.row.name == "runc")
    got = hashlib.sha256((served / runc.mirror_path).read_bytes()).hexdigest()
    done = _build(base_root, r)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"agk image build (apiserver): runc 1.4.3: sha256 mismatch for {runc.row.url}: expected {runc.sha256}, got {got}"
    )
    assert (base_root / "usr/local/bin/containerd").is_file()
    for path in ("usr/local/sbin/runc", "usr/local/bin/crictl", "usr/local/bin/kubelet", "usr/local/bin/kubectl"):
        assert not (base_root / path).exists(), f"{path} was installed after the mismatch"
    for path in (MANIFEST, APT_CONF, NEEDRESTART_CONF, "/usr/sbin/policy-rc.d"):
        assert not (base_root / path.lstrip("/")).exists(), path
    assert _out(base_root, "apt-mark", "showhold").split() == []
    assert _in_root(base_root, "dpkg-query", "-W", "prometheus-node-exporter").returncode != 0
