"""The host's sync program: apply this host's bundle from Key Vault, at boot and on its timer.

``sync.py boot`` (from boot.py, on every boot until it has booted the host once): write every file
of the bundle, run the boot steps in order, then write ``boot.BOOTED``. ``sync.py run``
(agk-sync.timer): fetch the bundle again and, when it changed, rewrite only the files that differ
(content, mode or owner) and restart exactly what reads them, from the bundle's restart map:

- ``static-pod``: nothing to restart; the manifest carries the hash of every file the pod mounts, so
  a changed certificate or config is a changed manifest and the kubelet recreates the pod (it acts on
  a manifest whose content changes);
- ``restart`` / ``reload`` a unit (after ``systemctl daemon-reload`` when a unit file changed), or run
  a ``command``;
- a ``gate`` holds back what could cost the group its quorum or its last server: an etcd member
  restarts only while every other member reports healthy, then waits until it is healthy itself; an
  API server's manifest is rewritten only while every other API server is ready. A closed gate defers
  the action to the next run (etcd: the restart is remembered; API server: the manifest stays as it
  was, so the next run finds it changed again). A member that is itself down still gets its fix: the
  others decide whether the group can spare it.

On a pool node both also copy the pool's kubelet bootstrap token from its Key Vault secret into the
token file the bootstrap kubeconfig names (``sync.py token``, the boot step before the kubelet, waits
for the first one; node_token.py).

Each run is idempotent (a second run with the same bundle does nothing) and logs one line per action.
The fixed hosts of one role run at different minutes of the hour (their timers' OnCalendar), so two
members never act at once; pool nodes spread over the hour (RandomizedDelaySec).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

if __package__:  # the toolkit imports this as modules.bootstrap.host.sync
    from . import boot, bundle, files, gates, imds, node_token, vault
else:  # a host runs it from /opt/agk/lib
    import boot  # type: ignore[import-not-found, no-redef]
    import bundle  # type: ignore[import-not-found, no-redef]
    import files  # type: ignore[import-not-found, no-redef]
    import gates  # type: ignore[import-not-found, no-redef]
    import imds  # type: ignore[import-not-found, no-redef]
    import node_token  # type: ignore[import-not-found, no-redef]
    import vault  # type: ignore[import-not-found, no-redef]

LOCK = "/run/agk/sync.lock"
PENDING = "/run/agk/sync-pending.json"
"""Gated restarts a run deferred (cleared by a reboot, which starts every unit on the new files)."""
UNIT_DIR = "/etc/systemd/system/"
RUN_DEADLINE_S = 10 * 60.0
"""How long a timer run waits for the vault before it gives up until the next run."""
ETCD_HEALTHY_S = 180.0
APISERVER_SETTLE_S = 30.0
"""The kubelet notices a changed manifest within its file check period (20 s by default) and stops
the old pod first: readiness is asked only after that."""
APISERVER_READY_S = 600.0
TOKEN_RUN_S = 60.0
"""How long a timer run waits for a pool's bootstrap token (the next run tries again)."""
TOKEN_BOOT_S = 30 * 60.0
"""How long a booting pool node waits for its pool's first bootstrap token before the kubelet starts."""


def log(line: str) -> None:
    print(f"agk-sync: {line}", flush=True)


def _systemctl(args: Sequence[str]) -> None:
    subprocess.run(["systemctl", *args], check=True)


def _command(line: str) -> None:
    subprocess.run(["sh", "-c", line], check=True)


@dataclass
class Runtime:
    """Everything a run touches outside its files; the tests hand in their own (no systemd there)."""

    root: str = "/"
    systemctl: Callable[[Sequence[str]], None] = _systemctl
    command: Callable[[str], None] = _command
    etcd_healthy: Callable[[str], bool] = gates.etcd_healthy
    apiserver_ready: Callable[[str, str], bool] = gates.apiserver_ready
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = log
    imds_endpoint: str = imds.ENDPOINT
    vault_deadline_s: float = RUN_DEADLINE_S
    settle_s: float = APISERVER_SETTLE_S

    def path(self, path: str) -> str:
        return self.root.rstrip("/") + path


@dataclass
class Outcome:
    written: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    """Actions taken (``restart etcd.service``, ``static-pod kube-apiserver``, ...)."""
    deferred: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def changed_files(doc: Mapping[str, Any], rt: Runtime) -> dict[str, str]:
    """Path -> why it must be written (new, content, mode, owner), for every file that differs. Files
    marked ``boot_only`` are the first boot's alone (a boot step removes them)."""
    out: dict[str, str] = {}
    for f in doc["files"]:
        if f.get("boot_only"):
            continue
        disk = files.read(rt.path(f["path"]))
        if disk.data is None:
            out[f["path"]] = "new"
        elif disk.data != f["content"].encode():
            out[f["path"]] = "content"
        elif disk.mode != int(f["mode"], 8):
            out[f["path"]] = "mode"
        elif os.geteuid() == 0 and (ids := files.ids(f["owner"])) is not None and ids != (disk.uid, disk.gid):
            out[f["path"]] = "owner"
    return out


def _write(doc: Mapping[str, Any], paths: Iterable[str], why: Mapping[str, str], rt: Runtime, out: Outcome) -> None:
    by_path = {f["path"]: f for f in doc["files"]}
    for path in paths:
        f = by_path[path]
        owned = files.write(rt.path(path), f["content"].encode(), int(f["mode"], 8), f["owner"])
        note = "" if owned else f"; owner {f['owner']} does not exist yet, root until a later run"
        rt.log(f"wrote {path} ({why[path]}{note})")
        out.written.append(path)


def _load_pending(rt: Runtime) -> set[str]:
    try:
        with open(rt.path(PENDING)) as f:
            return set(json.load(f))
    except (FileNotFoundError, ValueError):
        return set()


def _save_pending(rt: Runtime, pending: set[str]) -> None:
    files.write(rt.path(PENDING), json.dumps(sorted(pending)).encode(), 0o600)


def _unready(doc: Mapping[str, Any], kind: str, rt: Runtime) -> list[str]:
    """The other members of this host's group that cannot spare it now (empty: the gate is open)."""
    gate = doc["gates"][kind]
    others = {n: u for n, u in gate["members"].items() if n != gate["self"]}
    if kind == "etcd":
        return [n for n, u in sorted(others.items()) if not rt.etcd_healthy(u)]
    return [n for n, u in sorted(others.items()) if not rt.apiserver_ready(u, rt.path(gate["ca"]))]


def apply(doc: Mapping[str, Any], rt: Runtime) -> Outcome:
    """One timer run's changes to this host, given its current bundle."""
    out = Outcome()
    why = changed_files(doc, rt)
    held: set[str] = set()
    restarts = doc["restarts"]
    for r in restarts:
        if r["action"] == "static-pod" and r.get("gate") and set(r["paths"]) & why.keys():
            unready = _unready(doc, r["gate"], rt)
            if unready:
                held |= set(r["paths"])
                rt.log(f"deferred {r['unit']}: {', '.join(unready)} not ready; its manifest stays as it is")
                out.deferred.append(f"static-pod {r['unit']}")
    _write(doc, [p for p in why if p not in held], why, rt, out)
    written = set(out.written)
    if any(p.startswith(UNIT_DIR) for p in written):
        rt.systemctl(["daemon-reload"])
        rt.log("systemctl daemon-reload (unit files changed)")
    pending = _load_pending(rt)
    for r in restarts:
        unit, action = r["unit"], r["action"]
        if not (set(r["paths"]) & written or (action != "static-pod" and unit in pending)):
            continue
        try:
            if action == "static-pod":
                _static_pod(doc, r, rt, out)
            elif r.get("gate") == "etcd":
                _etcd_restart(doc, r, rt, out, pending)
            else:
                _act(r, rt)
                out.done.append(f"{action} {unit}")
                pending.discard(unit)
        except (subprocess.CalledProcessError, OSError) as err:
            rt.log(f"failed: {action} {unit}: {err}")
            out.failed.append(f"{action} {unit}")
    _save_pending(rt, pending)
    if not (out.written or out.done or out.deferred or out.failed):
        rt.log(f"{doc['role']} {doc['name']}: bundle {bundle.digest(doc)[:12]} already applied, nothing to do")
    return out


def _act(r: Mapping[str, Any], rt: Runtime) -> None:
    if r["action"] == "command":
        rt.command(r["command"])
        rt.log(f"ran {r['command']} ({r['unit']})")
    else:
        rt.systemctl([r["action"], r["unit"]])
        rt.log(f"systemctl {r['action']} {r['unit']}")


def _static_pod(doc: Mapping[str, Any], r: Mapping[str, Any], rt: Runtime, out: Outcome) -> None:
    rt.log(f"{r['unit']}: manifest changed, the kubelet recreates the pod")
    out.done.append(f"static-pod {r['unit']}")
    if r.get("gate") != "apiserver":
        return
    gate = doc["gates"]["apiserver"]
    url, ca = gate["members"][gate["self"]], rt.path(gate["ca"])
    rt.sleep(rt.settle_s)
    ready = gates.wait_until(lambda: rt.apiserver_ready(url, ca), APISERVER_READY_S, sleep=rt.sleep, clock=rt.clock)
    if ready:
        rt.log(f"{r['unit']} ready again")
    else:
        rt.log(f"failed: {r['unit']} not ready {APISERVER_READY_S:.0f}s after its new manifest")
        out.failed.append(f"ready {r['unit']}")


def _etcd_restart(doc: Mapping[str, Any], r: Mapping[str, Any], rt: Runtime, out: Outcome, pending: set[str]) -> None:
    unit = r["unit"]
    unready = _unready(doc, "etcd", rt)
    if unready:
        pending.add(unit)
        rt.log(f"deferred restart {unit}: {', '.join(unready)} not healthy; the next run retries")
        out.deferred.append(f"restart {unit}")
        return
    gate = doc["gates"]["etcd"]
    rt.systemctl(["restart", unit])
    rt.log(f"systemctl restart {unit} (every other member healthy)")
    pending.discard(unit)
    url = gate["members"][gate["self"]]
    if gates.wait_until(lambda: rt.etcd_healthy(url), ETCD_HEALTHY_S, sleep=rt.sleep, clock=rt.clock):
        rt.log(f"{gate['self']} healthy again")
        out.done.append(f"restart {unit}")
    else:
        rt.log(f"failed: {gate['self']} not healthy {ETCD_HEALTHY_S:.0f}s after its restart")
        out.failed.append(f"restart {unit}")


def token_config(doc: Mapping[str, Any]) -> node_token.TokenConfig | None:
    """A pool node's bootstrap token settings, from its bundle (None on other hosts)."""
    for f in doc["files"]:
        if f["path"] == node_token.CONFIG:
            return node_token.TokenConfig.from_json(f["content"])
    return None


def refresh_token(config: node_token.TokenConfig, host: boot.HostConfig, rt: Runtime, deadline_s: float) -> bool:
    """Copy the pool's current bootstrap token into the token file; False (logged) when there is none."""
    try:
        node_token.refresh(
            host.vault,
            host.client_id,
            config,
            root=rt.root,
            deadline_s=deadline_s,
            imds_endpoint=rt.imds_endpoint,
            sleep=rt.sleep,
            clock=rt.clock,
            log=rt.log,
        )
    except (node_token.NoTokenYet, vault.VaultError) as err:
        rt.log(f"bootstrap token: {err}")
        return False
    return True


def fetch(host: boot.HostConfig, rt: Runtime) -> dict[str, Any]:
    value = boot.fetch(
        host, deadline_s=rt.vault_deadline_s, imds_endpoint=rt.imds_endpoint, sleep=rt.sleep, clock=rt.clock, log=rt.log
    )
    return _checked(bundle.decode(value), host)


def _checked(doc: dict[str, Any], host: boot.HostConfig) -> dict[str, Any]:
    if (doc["role"], doc["name"]) != (host.role, host.name):
        raise bundle.BundleError(
            f"the secret holds {doc['role']} {doc['name']}'s bundle, not {host.role} {host.name}'s"
        )
    return doc


HOLD = "/etc/agk/hold"
"""While this file exists a timer run changes nothing (an operator's maintenance, e.g. the etcd restore
runbook, which moves static pod manifests away that a run would otherwise put back). Its text says why."""


def run(rt: Runtime) -> Outcome:
    """A timer run: fetch, apply (serialised by a lock: a manual run and the timer never overlap)."""
    held = files.read(rt.path(HOLD))
    if held.data is not None:
        reason = held.data.decode(errors="replace").strip() or "no reason given"
        rt.log(f"held by {HOLD} ({reason}): this run changes nothing; remove the file to resume")
        return Outcome()
    host = boot.HostConfig.load(rt.path(boot.HOST_CONFIG))
    with _exclusive(rt) as mine:
        if not mine:
            rt.log("another sync is running; this run does nothing")
            return Outcome()
        doc = fetch(host, rt)
        out = apply(doc, rt)
        config = token_config(doc)
        # A joined node no longer reads it; one that has not joined yet (or whose certificate expired)
        # joins with the current token. No token yet is not a failure of this run.
        if config is not None:
            refresh_token(config, host, rt, TOKEN_RUN_S)
        return out


@contextmanager
def _exclusive(rt: Runtime) -> Iterator[bool]:
    """Whether this process holds the host's sync lock (never waits: the holder is doing the work)."""
    lock_path = rt.path(LOCK)
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


class Busy(RuntimeError):
    """Another boot or sync holds the host's lock."""


def first_boot(rt: Runtime, value: str | None = None) -> int:
    """Write every file, then run the boot steps in order (each line through agk-step, which records
    and stops after a failure), then write ``boot.BOOTED``. Returns the number of lines that failed.
    Under the sync lock, and once per host: a boot that finds another one running raises ``Busy``; one
    that finds BOOTED (another boot finished while this one fetched) does nothing."""
    host = boot.HostConfig.load(rt.path(boot.HOST_CONFIG))
    with _exclusive(rt) as mine:
        if not mine:
            raise Busy(f"another boot or sync of {host.role} {host.name} is running ({rt.path(LOCK)})")
        done = files.read(rt.path(boot.BOOTED)).data
        if done is not None:
            # Another boot finished while this one fetched: its steps ran (restarts included); not again.
            rt.log(f"{host.role} {host.name}: booted already ({done.decode(errors='replace').strip()}); nothing to do")
            return 0
        doc = _checked(bundle.decode(value), host) if value is not None else fetch(host, rt)
        out = Outcome()
        _write(doc, [f["path"] for f in doc["files"]], {f["path"]: "boot" for f in doc["files"]}, rt, out)
        failed = 0
        for line in doc["boot"]:
            if subprocess.run(["sh", "-c", line], check=False).returncode != 0:
                failed += 1
        digest = bundle.digest(doc)
        rt.log(f"{host.role} {host.name}: boot of bundle {digest[:12]} done, {failed} step lines failed")
        files.write(rt.path(boot.BOOTED), f"bundle {digest}, {failed} step lines failed\n".encode(), 0o644)
        return failed


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="sync.py", description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("boot", "run", "token"))
    parser.add_argument("--root", default="/", help="where the host's file system is (tests)")
    parser.add_argument("--bundle-file", help="boot: the value boot.py fetched (deleted once read)")
    parser.add_argument(
        "--deadline", type=float, default=TOKEN_BOOT_S, help="token: seconds to wait for the pool's first token"
    )
    args = parser.parse_args(argv)
    rt = Runtime(root=args.root)
    try:
        if args.mode == "token":
            # The pool node's boot step before the kubelet: its bundle's files are on disk by then.
            host = boot.HostConfig.load(rt.path(boot.HOST_CONFIG))
            with open(rt.path(node_token.CONFIG)) as f:
                config = node_token.TokenConfig.from_json(f.read())
            return 0 if refresh_token(config, host, rt, args.deadline) else 1
        if args.mode == "boot":
            value = None
            if args.bundle_file:
                with open(args.bundle_file) as f:
                    value = f.read()
                os.unlink(args.bundle_file)
            return 1 if first_boot(rt, value) else 0
        out = run(rt)
    except (vault.VaultError, bundle.BundleError, OSError, ValueError, Busy) as err:
        rt.log(f"no bundle applied: {err}")
        return 1
    return 1 if out.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
