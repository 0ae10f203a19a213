"""A stand-in for the kubelet's container runtime: runs one container of a real pod on this machine.

No container runtime or image can exist here, so a pod the real API server, scheduler and controllers
made (a DaemonSet's pod on a kwok node, a CronJob's Job pod, a Deployment's pod) has one of its
containers run as a process the way a kubelet would set it up:

- its volumes at their ``mountPath``s, in a mount namespace over a root that shares this machine's
  programs (/usr, /lib, ...) and nothing else: ``emptyDir``; ``configMap`` and ``secret`` read from the
  API server; the ``projected`` service-account volume the API server's ServiceAccount admission
  added (a TokenRequest bound to the pod, ``kube-root-ca.crt``, the namespace), so in-cluster clients
  read /var/run/secrets/kubernetes.io/serviceaccount as in a pod;
- its environment: ``value``, ``fieldRef``, ``configMapKeyRef``, ``secretKeyRef``, and the
  ``KUBERNETES_SERVICE_HOST``/``PORT`` a pod gets (here the first API server on loopback: kube-proxy's
  Service translation is the other stand-in);
- its ``securityContext`` user and group (``setpriv``), and its memory limit as a cgroup (v1 memory
  controller, ``memory.limit_in_bytes``, as the kubelet sets it): over it the kernel kills the process
  (OOM), and ``memory.max_usage_in_bytes`` is the peak the test reads.

The image is the one thing replaced: each image repository maps to the program that stands for it
(``IMAGE_PROGRAMS``): the stdlib-only Python scripts run on this machine's python3, the
scheduler-plugins image on the binary built from its module (tools/bin).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modules.bootstrap import versions
from modules.cluster import images
from tests.bootstrap.conftest import tool

from .cluster import ControlPlane

HOST_DIRS = ("usr", "lib", "lib64", "lib32", "bin", "sbin", "etc", "root", "opt", "dev", "proc", "sys")
"""This machine's directories every stand-in container sees (its 'image' is this machine's programs). The
checkout is not among them: it lies anywhere (CI clones into another folder), so the folder of the program
that stands for the image is bound in at its own path instead (``program_mounts``)."""
CGROUP = Path("/sys/fs/cgroup/memory/agk-test")


def _python() -> str:
    for candidate in ("/usr/bin/python3", sys.executable):
        if Path(candidate).exists():
            return candidate
    raise RuntimeError("no python3 for the stdlib-only scripts")


def image_programs() -> dict[str, dict[str, str]]:
    """Image repository -> {command[0] in the pod: the program that stands for it here}."""
    return {
        images.IMAGES["python"].repository: {"python3": _python(), "python": _python()},
        versions.GANG_SCHEDULER_REPO: {"/bin/kube-scheduler": tool("gang-scheduler")},
        # No command: the image's entrypoint (/kube-state-metrics) takes the args.
        versions.KUBE_STATE_METRICS_REPO: {"": tool("kube-state-metrics")},
    }


def _components() -> Any:
    """tools/components/components.py (a script, not a package): its SUBSTITUTES table."""
    path = Path(__file__).resolve().parents[2] / "tools" / "components" / "components.py"
    spec = importlib.util.spec_from_file_location("agk_components", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("agk_components", module)
    spec.loader.exec_module(module)
    return module


def built_module_version(program: str, module: str) -> str:
    """The version of ``module`` a Go binary was built from (its build information, `go version -m`)."""
    out = subprocess.run(["go", "version", "-m", program], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if parts[:2] == ["mod", module] or parts[:2] == ["dep", module]:
            return parts[2]
    raise AssertionError(f"{program} was not built from {module}")


def check_gang_build(image: str, program: str) -> str:
    """The scheduler-plugins release that stands for ``image``: its own tag, or the substitute
    tools/components builds in its place (named, never silent). Another tag fails: the pod would run a
    release the rendered add-ons do not pin."""
    tag = image.split("@", 1)[0].rsplit(":", 1)[-1]
    built = built_module_version(program, "sigs.k8s.io/scheduler-plugins")
    if built == tag:
        return f"{image} runs {program}, built from scheduler-plugins {built}"
    sub = _components().SUBSTITUTES.get(("sigs.k8s.io/scheduler-plugins", tag))
    assert sub is not None and sub.version == built, f"{image}: {program} is scheduler-plugins {built}, not {tag}"
    return f"{image} runs {program}, built from scheduler-plugins {built} IN PLACE OF {tag}: {sub.why}"


def repository(image: str) -> str:
    return image.split("@", 1)[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@", 1)[0]


def quantity_bytes(q: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return int(float(q[: -len(suffix)]) * factor)
    return int(q)


def memory_cgroup(name: str, limit: int) -> Path:
    """A new v1 memory cgroup holding at most ``limit`` bytes, as a kubelet makes a container's."""
    cgroup = CGROUP / f"{name}-{time.monotonic_ns()}"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.limit_in_bytes").write_text(str(limit))
    # No swap: the limit is the memory the process may hold, as a kubelet's cgroup on a swapless node.
    swap = cgroup / "memory.memsw.limit_in_bytes"
    if swap.exists():
        swap.write_text(str(limit))
    return cgroup


@dataclass
class Running:
    """One stand-in container: its process, its log and its memory cgroup."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    cgroup: Path | None
    limit: int | None

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def peak_bytes(self) -> int:
        assert self.cgroup is not None, f"{self.name} has no memory limit"
        return int((self.cgroup / "memory.max_usage_in_bytes").read_text())

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of the container's processes so far, from /proc (the v1 memory cgroup
        lists them; no cpuacct controller is needed)."""
        assert self.cgroup is not None, f"{self.name} has no cgroup"
        total = 0
        for pid in (self.cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # exited since the listing
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime (stat fields 14 and 15)
        return total / os.sysconf("SC_CLK_TCK")

    def oom_killed(self) -> bool:
        """The kernel's OOM killer ended a process of this cgroup (memory.oom_control ``oom_kill``)."""
        if self.cgroup is None or not (self.cgroup / "memory.oom_control").exists():
            return False
        fields = dict(line.split() for line in (self.cgroup / "memory.oom_control").read_text().splitlines())
        return int(fields.get("oom_kill", "0")) > 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def remove(self) -> None:
        """Drop the cgroup (after its figures are read)."""
        self.stop()
        if self.cgroup is not None and self.cgroup.exists():
            with contextlib.suppress(OSError):  # a process of it may still be exiting
                self.cgroup.rmdir()


class Runtime:
    """Runs containers of pods of ``cp`` under ``root`` (one directory per container)."""

    def __init__(self, cp: ControlPlane, root: Path) -> None:
        self.cp, self.root = cp, root
        self.running: list[Running] = []

    def pod_dir(self, pod: dict[str, Any]) -> Path:
        """The pod's directory: its volumes (shared by its containers, as on a node) and one folder per container."""
        return self.root / f"{pod['metadata']['namespace']}-{pod['metadata']['name']}"

    def volume(self, pod: dict[str, Any], name: str) -> Path:
        """The pod's volume ``name`` (an emptyDir another container would have written, say)."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        return self._volume_dir(pod, volumes[name], self.pod_dir(pod))

    def _volume_dir(self, pod: dict[str, Any], volume: dict[str, Any], base: Path) -> Path:
        ns = pod["metadata"]["namespace"]
        path = base / "volumes" / volume["name"]
        if path.exists() and "emptyDir" in volume:
            return path  # shared by the pod's containers
        path.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in volume:
            path.chmod(0o777)
        elif "configMap" in volume:
            self._write_items(
                path, self._get(f"/api/v1/namespaces/{ns}/configmaps/{volume['configMap']['name']}"), False
            )
        elif "secret" in volume:
            self._write_items(
                path, self._get(f"/api/v1/namespaces/{ns}/secrets/{volume['secret']['secretName']}"), True
            )
        elif "projected" in volume:
            for source in volume["projected"]["sources"]:
                self._projected(pod, source, path)
        else:
            raise NotImplementedError(
                f"volume {volume['name']}: {sorted(volume)} has no stand-in (hostPath: a node's files)"
            )
        return path

    def _get(self, path: str) -> dict[str, Any]:
        code, body = self.cp.call("GET", path)
        assert code == 200, (path, body)
        return body

    @staticmethod
    def _write_items(path: Path, obj: dict[str, Any], encoded: bool) -> None:
        for key, value in (obj.get("data") or {}).items():
            (path / key).write_bytes(base64.b64decode(value) if encoded else value.encode())
            (path / key).chmod(0o644)

    def _projected(self, pod: dict[str, Any], source: dict[str, Any], path: Path) -> None:
        meta = pod["metadata"]
        if "serviceAccountToken" in source:
            spec = source["serviceAccountToken"]
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [spec["audience"]] if spec.get("audience") else None,
                    "expirationSeconds": spec.get("expirationSeconds", 3607),
                    "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                },
            }
            account = pod["spec"].get("serviceAccountName", "default")
            code, body = self.cp.call(
                "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", request
            )
            assert code == 201, body
            (path / spec["path"]).write_text(body["status"]["token"])
        elif "configMap" in source:
            cm = self._get(f"/api/v1/namespaces/{meta['namespace']}/configmaps/{source['configMap']['name']}")
            for item in source["configMap"].get("items") or [{"key": k, "path": k} for k in cm.get("data", {})]:
                (path / item["path"]).write_text(cm["data"][item["key"]])
        elif "downwardAPI" in source:
            for item in source["downwardAPI"]["items"]:
                (path / item["path"]).write_text(_field(pod, item["fieldRef"]["fieldPath"]))
        for child in path.iterdir():
            child.chmod(0o644)

    def env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        out = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": pod["metadata"]["name"],
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.cp.hosts[0].ports[6443]),
        }
        for var in container.get("env") or []:
            if "value" in var:
                out[var["name"]] = var["value"]
                continue
            ref = var["valueFrom"]
            if "fieldRef" in ref:
                out[var["name"]] = _field(pod, ref["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in ref:
                cm = self._get(f"/api/v1/namespaces/{ns}/configmaps/{ref['configMapKeyRef']['name']}")
                out[var["name"]] = cm["data"][ref["configMapKeyRef"]["key"]]
            elif "secretKeyRef" in ref:
                sec = self._get(f"/api/v1/namespaces/{ns}/secrets/{ref['secretKeyRef']['name']}")
                out[var["name"]] = base64.b64decode(sec["data"][ref["secretKeyRef"]["key"]]).decode()
            else:
                raise NotImplementedError(f"env {var['name']}: {sorted(ref)}")
        return out

    def start(
        self,
        pod: dict[str, Any],
        container_name: str,
        *,
        extra_env: Mapping[str, str] | None = None,
        memory_limit: bool = True,
    ) -> Running:
        """Run ``container_name`` of ``pod`` (as the API server holds it) until it exits or is stopped."""
        spec = pod["spec"]
        every = spec.get("initContainers", []) + spec["containers"]
        (container,) = [c for c in every if c["name"] == container_name]
        name = f"{pod['metadata']['namespace']}-{pod['metadata']['name']}-{container_name}"
        base = self.pod_dir(pod)
        rootfs = base / container_name / "rootfs"
        rootfs.mkdir(parents=True, exist_ok=True)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        made: dict[str, Path] = {}
        mounts = []
        for m in container.get("volumeMounts", []):
            src = made.get(m["name"]) or made.setdefault(m["name"], self._volume_dir(pod, volumes[m["name"]], base))
            mounts.append((src, m["mountPath"]))
        programs = image_programs().get(repository(container["image"]))
        assert programs is not None, f"{container['image']}: no program stands for this image here"
        command = list(container.get("command") or [""])
        assert command[0] in programs, f"{container['image']}: {command[:1]} has no stand-in program"
        argv = [programs[command[0]], *command[1:], *(container.get("args") or [])]
        mounts += program_mounts(argv[0])
        notes = []
        if repository(container["image"]) == versions.GANG_SCHEDULER_REPO:
            notes.append(f"stand-in: {check_gang_build(container['image'], argv[0])}\n")
        env = self.env(pod, container) | dict(extra_env or {})
        limit = None
        cgroup = None
        if memory_limit and (mem := (container.get("resources", {}).get("limits") or {}).get("memory")):
            limit = quantity_bytes(mem)
            cgroup = memory_cgroup(name, limit)
        security = spec.get("securityContext", {}) | container.get("securityContext", {})
        script = _script(rootfs, mounts, cgroup, security, env, argv)
        log = base / container_name / "log"
        with log.open("ab") as out:
            out.write("".join(notes).encode())
            out.flush()
            proc = subprocess.Popen(
                [tool("unshare"), "--mount", "--propagation", "private", "--", "sh", "-ec", script],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
        running = Running(name, proc, log, cgroup, limit)
        self.running.append(running)
        return running

    def stop(self) -> None:
        for r in self.running:
            r.remove()


def program_mounts(program: str) -> list[tuple[Path, str]]:
    """The program's folder at its own path, where no host directory already shows it (a built
    component in the checkout's tools/bin)."""
    folder = Path(program).parent
    if folder.parts[1] in HOST_DIRS:
        return []
    return [(folder, str(folder))]


def _field(pod: dict[str, Any], path: str) -> str:
    value: Any = pod
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)


def _script(
    rootfs: Path,
    mounts: list[tuple[Path, str]],
    cgroup: Path | None,
    security: dict[str, Any],
    env: dict[str, str],
    argv: list[str],
) -> str:
    q = shlex.quote
    lines = [f"R={q(str(rootfs))}"]
    if cgroup is not None:
        lines.append(f"echo $$ > {q(str(cgroup / 'cgroup.procs'))}")
    inside = {d for _, dest in mounts for d in HOST_DIRS if dest.startswith(f"/{d}/")}
    for d in HOST_DIRS:
        lines.append(
            f'if [ -L /{d} ]; then ln -sfn "$(readlink /{d})" "$R/{d}"; elif [ -d /{d} ]; then mkdir -p "$R/{d}"'
        )
        if d in inside:
            # A volume lands inside this directory: an overlay, so its mount point is made there, not on the host.
            lines.append(f'  mkdir -p "$R/.overlay/{d}/up" "$R/.overlay/{d}/work"')
            lines.append(
                f'  mount -t overlay overlay -o "lowerdir=/{d},upperdir=$R/.overlay/{d}/up,workdir=$R/.overlay/{d}/work" "$R/{d}"'
            )
        else:
            lines.append(f'  mount --rbind /{d} "$R/{d}"')
        lines.append("fi")
    lines.append('mkdir -p "$R/tmp" "$R/var" "$R/run" && chmod 1777 "$R/tmp"')
    for src, dest in mounts:
        lines.append(f'mkdir -p "$R"{q(dest)} && mount --bind {q(str(src))} "$R"{q(dest)}')
    user = [
        "setpriv",
        f"--reuid={security.get('runAsUser', 0)}",
        f"--regid={security.get('runAsGroup', security.get('runAsUser', 0))}",
        "--clear-groups",
    ]
    environment = ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
    lines.append(f'exec chroot "$R" {" ".join(q(a) for a in [*user, *environment, *argv])}')
    return "\n".join(lines)


def pods_of(cp: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    code, body = cp.call("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    assert code == 200, body
    return list(body["items"])


def wait_pods(
    cp: ControlPlane, namespace: str, selector: str, count: int, timeout: float = 120
) -> list[dict[str, Any]]:
    """``count`` pods matching ``selector`` bound to nodes (scheduled), as the API server has them."""
    deadline = time.monotonic() + timeout
    while True:
        pods = [p for p in pods_of(cp, namespace, selector) if p["spec"].get("nodeName")]
        if len(pods) >= count:
            return pods
        assert time.monotonic() < deadline, (
            f"{len(pods)} of {count} pods {selector} scheduled: {json.dumps(pods)[:2000]}"
        )
        time.sleep(0.5)
