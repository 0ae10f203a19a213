"""Host tier: sync.py, the program that keeps a running host on its bundle, in a throwaway root.

systemd cannot run here: ``Runtime.systemctl`` records what would be run; the gates' health checks
are the test's. tests/bootstrap/test_realtool_etcd_renewal.py runs the same code against real etcd.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.host import boot, bundle, files, sync
from tests.bootstrap.host.fakes import FakeVault, azure

ETCD = {"self": "e-0", "members": {"e-0": "http://e0", "e-1": "http://e1", "e-2": "http://e2"}}
API = {"self": "a-0", "members": {"a-0": "https://a0", "a-1": "https://a1"}, "ca": "/etc/k/ca.crt"}


def f(path: str, content: str, mode: str = "0644", owner: str = "root:root") -> dict[str, str]:
    return {"path": path, "mode": mode, "owner": owner, "content": content}


def etcd_doc(cert: str = "cert-1\n", conf: str = "name: e-0\n", **extra: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "role": "etcd",
        "name": "e-0",
        "files": [
            f("/etc/etcd/etcd.conf.yml", conf),
            f("/etc/etcd/pki/peer.crt", cert),
            f("/etc/etcd/pki/peer.key", "key\n", "0600"),
            f("/etc/sysctl.d/999-agk.conf", "vm.x = 1\n"),
            f("/etc/systemd/system/agk-sync.timer", "[Timer]\n"),
            f("/opt/agk/notes", "read by nothing running\n"),
        ],
        "boot": [],
        "restarts": [
            {
                "unit": "sysctl",
                "action": "command",
                "paths": ["/etc/sysctl.d/999-agk.conf"],
                "gate": "",
                "command": "sysctl -p",
            },
            {
                "unit": "agk-sync.timer",
                "action": "restart",
                "paths": ["/etc/systemd/system/agk-sync.timer"],
                "gate": "",
            },
            {
                "unit": "etcd.service",
                "action": "restart",
                "paths": ["/etc/etcd/etcd.conf.yml", "/etc/etcd/pki/peer.crt", "/etc/etcd/pki/peer.key"],
                "gate": "etcd",
            },
        ],
        "gates": {"etcd": ETCD},
        **extra,
    }


class Host:
    """A root directory and a runtime that records what it would do to the host."""

    def __init__(self, root: Path, healthy: set[str] | None = None, ready: set[str] | None = None) -> None:
        self.root, self.calls, self.lines, self.now = root, [], [], 0.0  # type: ignore[var-annotated]
        self.healthy = set(ETCD["members"].values()) if healthy is None else healthy  # type: ignore[arg-type]
        self.ready = set(API["members"].values()) if ready is None else ready  # type: ignore[arg-type]
        self.rt = sync.Runtime(
            root=str(root),
            systemctl=lambda args: self.calls.append(("systemctl", *args)),
            command=lambda line: self.calls.append(("command", line)),
            etcd_healthy=lambda url: url in self.healthy,
            apiserver_ready=lambda url, ca: url in self.ready and ca == str(root) + "/etc/k/ca.crt",
            sleep=self.sleep,
            clock=lambda: self.now,
            log=self.lines.append,
            settle_s=0,
        )

    def sleep(self, seconds: float) -> None:
        self.now += seconds  # time moves only when the program waits

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text()

    def mode(self, path: str) -> int:
        return (self.root / path.lstrip("/")).stat().st_mode & 0o7777


def test_a_first_run_writes_everything_with_its_mode_then_restarts_what_reads_it(tmp_path: Path) -> None:
    host = Host(tmp_path)
    out = sync.apply(etcd_doc(), host.rt)
    assert host.read("/etc/etcd/pki/peer.crt") == "cert-1\n" and host.mode("/etc/etcd/pki/peer.key") == 0o600
    assert host.calls == [
        ("systemctl", "daemon-reload"),
        ("command", "sysctl -p"),
        ("systemctl", "restart", "agk-sync.timer"),
        ("systemctl", "restart", "etcd.service"),
    ]
    assert out.failed == [] and out.deferred == []
    assert "wrote /etc/etcd/pki/peer.key (new)" in host.lines
    assert "systemctl restart etcd.service (every other member healthy)" in host.lines
    assert "e-0 healthy again" in host.lines


def test_a_second_run_with_the_same_bundle_does_nothing(tmp_path: Path) -> None:
    host = Host(tmp_path)
    sync.apply(etcd_doc(), host.rt)
    host.calls.clear()
    host.lines.clear()
    out = sync.apply(etcd_doc(), host.rt)
    assert host.calls == [] and out.written == [] and out.done == []
    assert len(host.lines) == 1 and host.lines[0].startswith("etcd e-0: bundle ") and "nothing to do" in host.lines[0]


def test_only_what_changed_is_written_and_only_what_reads_it_restarts(tmp_path: Path) -> None:
    host = Host(tmp_path)
    sync.apply(etcd_doc(), host.rt)
    untouched = (tmp_path / "etc/sysctl.d/999-agk.conf").stat().st_ino
    host.calls.clear()
    out = sync.apply(etcd_doc(cert="cert-2\n"), host.rt)
    assert out.written == ["/etc/etcd/pki/peer.crt"]
    assert host.calls == [("systemctl", "restart", "etcd.service")]  # no daemon-reload: no unit changed
    assert (tmp_path / "etc/sysctl.d/999-agk.conf").stat().st_ino == untouched
    # A mode change alone is a change too.
    os.chmod(tmp_path / "etc/etcd/pki/peer.key", 0o644)
    host.calls.clear()
    assert sync.apply(etcd_doc(cert="cert-2\n"), host.rt).written == ["/etc/etcd/pki/peer.key"]
    assert "wrote /etc/etcd/pki/peer.key (mode)" in host.lines
    # A file nothing running reads is written and restarts nothing.
    doc = etcd_doc(cert="cert-2\n")
    doc["files"][-1]["content"] = "changed\n"
    host.calls.clear()
    assert sync.apply(doc, host.rt).written == ["/opt/agk/notes"] and host.calls == []


def test_writes_are_whole_or_not_at_all_and_leave_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "manifests" / "kube-proxy.yaml"
    assert files.write(str(target), b"old\n", 0o644)
    seen: list[str] = []
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        seen.append(os.path.basename(src))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        files.write(str(target), b"new\n", 0o644)
    monkeypatch.setattr(os, "replace", real_replace)
    assert target.read_text() == "old\n"
    assert os.listdir(target.parent) == ["kube-proxy.yaml"]
    # The temporary name starts with a dot: the kubelet never reads it as a static pod.
    assert seen[0].startswith(".kube-proxy.yaml.")


def test_an_owner_that_does_not_exist_yet_is_root_until_a_later_run(tmp_path: Path) -> None:
    host = Host(tmp_path)
    doc = etcd_doc()
    doc["files"][1]["owner"] = "agk-no-such-user:agk-no-such-user"
    sync.apply(doc, host.rt)
    assert any(
        line.endswith("owner agk-no-such-user:agk-no-such-user does not exist yet, root until a later run)")
        for line in host.lines
    )


def test_an_etcd_restart_waits_until_every_other_member_is_healthy(tmp_path: Path) -> None:
    host = Host(tmp_path)
    sync.apply(etcd_doc(), host.rt)
    host.calls.clear()
    host.healthy.discard("http://e2")
    out = sync.apply(etcd_doc(cert="cert-2\n"), host.rt)
    assert host.read("/etc/etcd/pki/peer.crt") == "cert-2\n"  # the file is new; the restart waits
    assert host.calls == [] and out.deferred == ["restart etcd.service"]
    assert "deferred restart etcd.service: e-2 not healthy; the next run retries" in host.lines
    assert json.loads(host.read(sync.PENDING)) == ["etcd.service"]
    # Still unhealthy: still deferred, although no file changes any more.
    assert sync.apply(etcd_doc(cert="cert-2\n"), host.rt).deferred == ["restart etcd.service"]
    host.healthy.add("http://e2")
    out = sync.apply(etcd_doc(cert="cert-2\n"), host.rt)
    assert host.calls == [("systemctl", "restart", "etcd.service")] and out.done == ["restart etcd.service"]
    assert json.loads(host.read(sync.PENDING)) == []


def test_a_member_that_is_down_itself_still_gets_its_fix(tmp_path: Path) -> None:
    # Its own health is not the others' concern: restarting a member that is out costs no second one.
    host = Host(tmp_path, healthy={"http://e1", "http://e2"})
    out = sync.apply(etcd_doc(), host.rt)
    assert ("systemctl", "restart", "etcd.service") in host.calls
    assert out.failed == ["restart etcd.service"]  # it did not come back: the run says so and fails
    assert "failed: e-0 not healthy 180s after its restart" in host.lines


def api_doc(cert: str = "c1\n") -> dict[str, Any]:
    return {
        "format": 1,
        "role": "apiserver",
        "name": "a-0",
        "files": [
            f("/etc/k/ca.crt", "ca\n"),
            f("/etc/k/apiserver.crt", cert),
            f("/etc/kubernetes/manifests/kube-apiserver.yaml", f"hash: {cert}"),
            f("/etc/kubernetes/manifests/kube-scheduler.yaml", f"hash: {cert}"),
        ],
        "boot": [],
        "restarts": [
            {
                "unit": "kube-apiserver",
                "action": "static-pod",
                "paths": ["/etc/kubernetes/manifests/kube-apiserver.yaml"],
                "gate": "apiserver",
            },
            {
                "unit": "kube-scheduler",
                "action": "static-pod",
                "paths": ["/etc/kubernetes/manifests/kube-scheduler.yaml"],
                "gate": "",
            },
        ],
        "gates": {"apiserver": API},
    }


def test_an_api_servers_manifest_waits_until_every_other_server_is_ready(tmp_path: Path) -> None:
    host = Host(tmp_path)
    sync.apply(api_doc(), host.rt)
    host.ready.discard("https://a1")
    out = sync.apply(api_doc("c2\n"), host.rt)
    assert host.read("/etc/k/apiserver.crt") == "c2\n"
    assert host.read("/etc/kubernetes/manifests/kube-apiserver.yaml") == "hash: c1\n"  # held: the pod keeps running
    assert host.read("/etc/kubernetes/manifests/kube-scheduler.yaml") == "hash: c2\n"  # not gated
    assert out.deferred == ["static-pod kube-apiserver"] and host.calls == []
    assert "deferred kube-apiserver: a-1 not ready; its manifest stays as it is" in host.lines
    host.ready.add("https://a1")
    out = sync.apply(api_doc("c2\n"), host.rt)
    assert out.written == ["/etc/kubernetes/manifests/kube-apiserver.yaml"]
    assert out.done == ["static-pod kube-apiserver"] and "kube-apiserver ready again" in host.lines
    assert host.calls == []  # the kubelet recreates static pods: nothing to restart


def _host_config(root: Path, url: str, name: str = "e-0") -> None:
    config = root / boot.HOST_CONFIG.lstrip("/")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(boot.HostConfig("etcd", name, "c", url, "e-0-1234", "cid").to_json())


def _publish(kv: FakeVault, doc: dict[str, Any]) -> None:
    for i, part in enumerate(bundle.split(bundle.encode(doc), 2), start=1):
        kv.put(bundle.part_name("e-0-1234", i), part, "cid")


def test_a_timer_run_reads_its_own_secret_and_refuses_another_hosts(tmp_path: Path) -> None:
    kv = FakeVault()
    _publish(kv, etcd_doc())
    with azure(kv) as (url, imds_url):
        host = Host(tmp_path)
        host.rt.imds_endpoint = imds_url
        _host_config(tmp_path, url)
        assert sync.run(host.rt).written
        assert host.read("/etc/etcd/pki/peer.crt") == "cert-1\n"
        _host_config(tmp_path, url, name="e-1")  # the secret holds e-0's bundle, this host is e-1
        with pytest.raises(bundle.BundleError, match="the secret holds etcd e-0's bundle, not etcd e-1's"):
            sync.run(host.rt)


def test_runs_never_overlap(tmp_path: Path) -> None:
    host = Host(tmp_path)
    _host_config(tmp_path, "http://127.0.0.1:9/")
    lock = tmp_path / sync.LOCK.lstrip("/")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert sync.run(host.rt) == sync.Outcome()
    assert host.lines == ["another sync is running; this run does nothing"]


def test_a_hold_file_makes_a_run_change_nothing_until_it_is_removed(tmp_path: Path) -> None:
    kv = FakeVault()
    _publish(kv, etcd_doc())
    with azure(kv) as (url, imds_url):
        host = Host(tmp_path)
        host.rt.imds_endpoint = imds_url
        _host_config(tmp_path, url)
        hold = tmp_path / sync.HOLD.lstrip("/")
        hold.write_text("etcd restore, ops ticket 42\n")
        assert sync.run(host.rt) == sync.Outcome() and host.calls == []
        assert not (tmp_path / "etc/etcd/pki/peer.crt").exists()
        assert host.lines == [
            f"held by {sync.HOLD} (etcd restore, ops ticket 42): this run changes nothing; remove the file to resume"
        ]
        hold.unlink()
        assert sync.run(host.rt).written


def test_boot_installs_the_bundles_programs_and_hands_over_to_its_sync(tmp_path: Path) -> None:
    doc = etcd_doc()
    doc["files"].append(f("/opt/agk/lib/sync.py", "# the bundle's sync.py\n"))
    doc["boot"] = [f"echo one >> {tmp_path}/order", "false", f"echo two >> {tmp_path}/order"]
    kv = FakeVault()
    _publish(kv, doc)
    handed: list[list[str]] = []
    with azure(kv) as (url, imds_url):
        boot.run(
            boot.HostConfig("etcd", "e-0", "c", url, "e-0-1234", "cid"),
            root=str(tmp_path),
            imds_endpoint=imds_url,
            hand_over=lambda argv: handed.append(list(argv)),
        )
    assert (tmp_path / "opt/agk/lib/sync.py").read_text() == "# the bundle's sync.py\n"
    assert not (tmp_path / "etc/etcd").exists()  # only the programs: sync.py writes the rest
    fetched = f"{tmp_path}/run/agk/bundle"
    assert handed == [
        [handed[0][0], f"{tmp_path}/opt/agk/lib/sync.py", "boot", "--root", str(tmp_path), "--bundle-file", fetched]
    ]
    # What sync.py boot then does: every file, then every step in order, a failed one counted.
    _host_config(tmp_path, url)
    host = Host(tmp_path)
    value = Path(fetched).read_text()
    assert not (tmp_path / boot.BOOTED.lstrip("/")).exists()  # a reboot now would fetch and boot again
    assert sync.first_boot(host.rt, value) == 1
    assert (tmp_path / "order").read_text() == "one\ntwo\n"
    assert host.read("/etc/etcd/pki/peer.crt") == "cert-1\n" and host.calls == []
    # Booted, a failed step included: the per-boot script boots nothing on a reboot.
    assert host.read(boot.BOOTED).endswith(", 1 step lines failed\n")


def test_a_host_boots_once_a_failed_fetch_leaves_no_marker_and_a_boot_that_finds_another_running_waits(
    tmp_path: Path,
) -> None:
    """No BOOTED without a boot (the next restart boots again); a boot started by hand while cloud-init's
    is still running does nothing (two runs of the steps at once could record each other's failures)."""
    _host_config(tmp_path, "https://vault.example/")
    host = Host(tmp_path)
    someone_elses = bundle.encode({**etcd_doc(), "name": "e-1"})
    with pytest.raises(bundle.BundleError, match="holds etcd e-1's bundle, not etcd e-0's"):
        sync.first_boot(host.rt, someone_elses)
    assert not (tmp_path / boot.BOOTED.lstrip("/")).exists()
    doc = etcd_doc()
    doc["boot"] = [f"echo ran >> {tmp_path}/ran"]
    lock = tmp_path / sync.LOCK.lstrip("/")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(sync.Busy, match="another boot or sync of etcd e-0 is running"):
            sync.first_boot(host.rt, bundle.encode(doc))
    assert not (tmp_path / "ran").exists() and not (tmp_path / boot.BOOTED.lstrip("/")).exists()
    assert sync.first_boot(host.rt, bundle.encode(doc)) == 0
    assert (tmp_path / "ran").read_text() == "ran\n" and (tmp_path / boot.BOOTED.lstrip("/")).exists()
    # A second boot that fetched while the first ran its steps: booted already, no step runs twice.
    assert sync.first_boot(host.rt, bundle.encode(doc)) == 0
    assert (tmp_path / "ran").read_text() == "ran\n"
    assert any(line.startswith("etcd e-0: booted already (bundle ") for line in host.lines), host.lines
