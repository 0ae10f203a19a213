"""The real components the test tiers run, built from their published Go modules.

Each component is a small Go module under ``tools/components/<name>/`` whose ``go.mod`` this
script writes from the versions table (``modules/bootstrap/versions.py``), so a version is typed
once: bump the row, run ``make components`` (it rewrites ``go.mod``, runs ``go mod tidy`` and
rebuilds), commit ``go.mod`` and ``go.sum``. With ``go.sum`` committed, later builds need only the
module proxy's cached modules, never the checksum database.

    python tools/components/components.py build DIR   # go.mod current? then build what is stale
    python tools/components/components.py check       # go.mod files agree with the table (no network)
    python tools/components/components.py versions    # what the table pins, as JSON

A built component is stale when its ``go.mod``, ``go.sum``, build flags or the Go toolchain changed
(``DIR/.<name>.stamp`` holds their hash); Go's build cache makes a rebuild of unchanged packages
cheap. Under CI (``CI=true``) a ``go.mod`` that disagrees with the table is an error instead of
being rewritten: the repository must carry the modules it is tested with.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from modules.bootstrap import versions  # noqa: E402
from modules.cluster import images  # noqa: E402

GO_LINE = "1.25.0"
"""The oldest Go the modules declare; ``go mod tidy`` raises it to what the dependencies need."""
HEADER = (
    "// Written by tools/components/components.py from modules/bootstrap/versions.py: edit the table, not this file.\n"
)
KUBERNETES = "k8s.io/kubernetes"
STATIC = "0"
"""CGO_ENABLED for every build: static binaries, as Kubernetes' and etcd's release builds are (a chroot or
namespace with no libc runs them)."""
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
"""Where Kubernetes' own build (hack/lib/version.sh) stamps the release into every binary."""


@dataclass(frozen=True)
class Substitute:
    """A release built in place of the table's because the module proxy will not serve the table's."""

    version: str
    kubernetes: str | None
    """The k8s.io/kubernetes release the substitute's own go.mod requires (upstream built it on this)."""
    why: str


SUBSTITUTES: dict[tuple[str, str], Substitute] = {
    ("sigs.k8s.io/scheduler-plugins", "v0.35.7"): Substitute(
        "v0.34.7",
        "1.34.9",
        "the module proxy serves v0.35.7's .info and .mod but answers its source zip, and the k8s.io/kubernetes "
        "v1.35.7 it requires, with 403 'This module version is not available' (2026-12-01); v0.34.7 is the newest "
        "release whose source it serves, built here on k8s.io/kubernetes v1.34.9 because several v0.34.7 staging "
        "modules are refused too (same minor, newer patch). A 1.34 kube-scheduler is within the skew of a 1.35 "
        "API server and one minor outside it for 1.36",
    ),
    ("sigs.k8s.io/kueue", "v0.19.5"): Substitute(
        "v0.19.2",
        None,
        "the module proxy answers v0.19.3, v0.19.4 and v0.19.5 with 403 'This module version is not available' "
        "(2026-12-02); v0.19.2 is the newest release of the same minor whose source it serves, and the CRDs, RBAC "
        "rules and webhooks the add-ons render are vendored from it (modules/cluster/objects/kueue); what the "
        "v0.19.3 to v0.19.5 patches changed is not exercised here",
    ),
}
"""Checked on every build: a substitute is printed, never silent (the tests name it too)."""

LOCAL_MODULES: dict[str, str] = {
    "monis.app/mlog": "the module proxy answers every version of monis.app/mlog (a logging library "
    "azure-workload-identity's webhook imports) with 403 (2026-12-02): tools/components/azure-workload-identity/mlog "
    "stands in for it, the functions the webhook calls over go-logr's funcr; logging only, the webhook's own code "
    "is built unchanged",
}
"""Dependencies replaced by a module in the component's folder (``local`` below): printed on every build."""


class Failure(Exception):
    """One line for the user: what failed and what to do."""


@dataclass(frozen=True)
class Component:
    name: str
    requires: dict[str, str]
    """Go module -> version, from the table."""
    binaries: dict[str, str]
    """Binary name -> main package."""
    kubernetes: str | None = None
    """The k8s.io/kubernetes release whose staging modules (listed as v0.0.0 in its go.mod) are pinned."""
    ldflags: tuple[str, ...] = field(default=())
    data: dict[str, str] = field(default_factory=dict)
    """File in the output folder -> a file of the (first) required module, copied beside the binaries."""
    local: dict[str, str] = field(default_factory=dict)
    """Go module -> folder (in the component's) replacing it: only modules LOCAL_MODULES explains."""
    tags: tuple[str, ...] = field(default=())
    """Go build tags."""

    @property
    def dir(self) -> Path:
        return HERE / self.name


def _kube_ldflags(release: str) -> tuple[str, ...]:
    major, minor, _ = release.split(".")
    out: list[str] = []
    for pkg in VERSION_PACKAGES:
        out += [f"-X {pkg}.gitVersion=v{release}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}"]
        out += [f"-X {pkg}.gitTreeState=clean"]
    return tuple(out)


def components() -> tuple[Component, ...]:
    """Every component, at the versions the table pins: the default minor's control plane, its gang
    scheduler (built on the table's release of the minor it was made for), etcd and kwok."""
    row = versions.release(versions.DEFAULT_MINOR)
    release = row.release()
    gang = row.gang_scheduler
    out = [
        Component(
            "kubernetes",
            {KUBERNETES: f"v{release}"},
            {
                c: f"{KUBERNETES}/cmd/{c}"
                for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
            },
            kubernetes=release,
            ldflags=_kube_ldflags(release),
        ),
        Component(
            "etcd",
            {f"go.etcd.io/etcd/{m}/v3": f"v{versions.ETCD}" for m in ("server", "etcdctl", "etcdutl")},
            {
                "etcd": "go.etcd.io/etcd/server/v3",
                "etcdctl": "go.etcd.io/etcd/etcdctl/v3",
                "etcdutl": "go.etcd.io/etcd/etcdutl/v3",
            },
        ),
        Component(
            "kube-state-metrics",
            {"k8s.io/kube-state-metrics/v2": row.kube_state_metrics},
            {"kube-state-metrics": "k8s.io/kube-state-metrics/v2"},
            # What its Makefile stamps (github.com/prometheus/common/version, as its release images carry).
            ldflags=(f"-X github.com/prometheus/common/version.Version={row.kube_state_metrics.removeprefix('v')}",),
        ),
        Component(
            "kwok",
            {"sigs.k8s.io/kwok": versions.KWOK},
            {"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
            # The node and pod lifecycle stages kwok ships at this release (kwokctl's defaults).
            data={
                f"kwok-stages/{name}": f"kustomize/stage/{name}"
                for name in (
                    "node/fast/node-initialize.yaml",
                    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                    "pod/fast/pod-ready.yaml",
                    "pod/fast/pod-complete.yaml",
                    "pod/fast/pod-delete.yaml",
                )
            },
        ),
    ]
    prometheus = versions.ARTIFACTS["prometheus"].version
    out.append(
        Component(
            "prometheus",
            {"github.com/prometheus/prometheus": prometheus_module(prometheus)},
            {
                "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
                "promtool": "github.com/prometheus/prometheus/cmd/promtool",
            },
            # What its release stamps (.promu.yml), so --version names the release the hosts run.
            ldflags=(f"-X github.com/prometheus/common/version.Version={prometheus}",),
            # The release's netgo; of the service discoveries only Kubernetes', the one the rendered
            # prometheus.yml uses (remove_all_sd keeps file and http: plugins/minimum.go). No builtinassets:
            # the web UI's compiled assets are not in the module, and no test opens the UI.
            tags=("netgo", "remove_all_sd", "enable_kubernetes_sd"),
        )
    )
    for artifact in versions.ARTIFACTS.values():
        if artifact.go_module is not None:
            # What the node images build from source (no published checksum): the same module, the same flags.
            out.append(
                Component(
                    artifact.name,
                    {artifact.go_module: f"v{artifact.version}"},
                    {artifact.binary(p): f"{artifact.go_module}/{p}" for p in artifact.packages},
                    ldflags=artifact.ldflags,
                )
            )
    out.append(
        Component(
            "azure-workload-identity",
            {"github.com/Azure/azure-workload-identity": images.WORKLOAD_IDENTITY},
            {"azure-wi-webhook": "github.com/Azure/azure-workload-identity/cmd/webhook"},
            # What its Makefile stamps into the webhook (pkg/version.BuildVersion).
            ldflags=(
                f"-X github.com/Azure/azure-workload-identity/pkg/version.BuildVersion={images.WORKLOAD_IDENTITY}",
            ),
            local={"monis.app/mlog": "mlog"},
        )
    )
    out.append(
        Component(
            "kube-network-policies",
            {"sigs.k8s.io/kube-network-policies": images.NETWORK_POLICIES},
            # The image's /bin/netpol (its Dockerfile builds the standard flavour by default).
            {"kube-network-policies": "sigs.k8s.io/kube-network-policies/cmd/kube-network-policies/standard"},
        )
    )
    kueue = SUBSTITUTES.get(("sigs.k8s.io/kueue", versions.KUEUE.version))
    kueue_built = kueue.version if kueue is not None else versions.KUEUE.version
    out.append(
        Component(
            "kueue",
            {"sigs.k8s.io/kueue": kueue_built},
            {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
            # What Kueue's Makefile stamps (LD_FLAGS: version_pkg.GitVersion), so its log names the release.
            ldflags=(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={kueue_built}",),
        )
    )
    if gang is not None:
        built_for = versions.release(f"1.{versions.tag_minor(gang)}").release()
        sub = SUBSTITUTES.get(("sigs.k8s.io/scheduler-plugins", gang))
        if sub is not None:
            gang, built_for = sub.version, sub.kubernetes or built_for
        out.append(
            Component(
                "scheduler-plugins",
                {"sigs.k8s.io/scheduler-plugins": gang},
                {"gang-scheduler": "sigs.k8s.io/scheduler-plugins/cmd/scheduler"},
                # Unstamped, as scheduler-plugins' own version string is not a Kubernetes release: the
                # binary's build information (go version -m) names the module versions it was built from.
                kubernetes=built_for,
            )
        )
    return tuple(out)


def prometheus_module(release: str) -> str:
    """The Go module version of a Prometheus 3.x release: v0.3MM.P for 3.MM.P (its
    scripts/get_module_version.sh, RELEASE.md "Tag the library release")."""
    major, minor, patch = release.split(".")
    if major != "3":
        raise Failure(f"prometheus {release}: only 3.x releases map to a Go module version here")
    return f"v0.3{int(minor):02d}.{patch}"


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise Failure(
            "go is not installed: the control-plane tests build kube-apiserver, etcd, the schedulers and kwok "
            "from Go modules; install Go 1.25 or newer (https://go.dev/doc/install) and run make components"
        )
    return go


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise Failure(f"{' '.join(argv[:3])} in {cwd.relative_to(ROOT)} failed: {' / '.join(tail)}")
    return done.stdout


def _staging(go: str, release: str) -> list[str]:
    """The staging modules k8s.io/kubernetes@v<release> requires as v0.0.0 (served as v0.<minor>.<patch>)."""
    info = json.loads(_run([go, "mod", "download", "-json", f"{KUBERNETES}@v{release}"], HERE))
    mod = Path(info["GoMod"]).read_text()
    out = []
    for line in mod.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("k8s.io/") and parts[1] == "v0.0.0":
            out.append(parts[0])
    if not out:
        raise Failure(f"{KUBERNETES}@v{release}: its go.mod lists no v0.0.0 staging modules (did the layout change?)")
    return sorted(set(out))


def _replaces(go: str, c: Component) -> dict[str, str]:
    if c.kubernetes is None:
        return {}
    staging = "v0." + c.kubernetes.split(".", 1)[1]
    out = {m: staging for m in _staging(go, c.kubernetes)}
    if c.requires.get(KUBERNETES) != f"v{c.kubernetes}":
        out[KUBERNETES] = f"v{c.kubernetes}"
    return out


def _render(c: Component, replaces: dict[str, str]) -> str:
    lines = [HEADER, f"module agk.test/components/{c.name}", "", f"go {GO_LINE}", "", "tool ("]
    lines += [f"\t{pkg}" for pkg in sorted(set(c.binaries.values()))]
    lines += [")", "", "require ("]
    lines += [f"\t{m} {v}" for m, v in sorted(c.requires.items())]
    lines += [")"]
    if replaces or c.local:
        lines += ["", "replace ("] + [f"\t{m} => {m} {v}" for m, v in sorted(replaces.items())]
        lines += [f"\t{m} => ./{d}" for m, d in sorted(c.local.items())] + [")"]
    return "\n".join(lines) + "\n"


def _current(go: str, c: Component) -> dict[str, object]:
    """What ``c.dir/go.mod`` pins: requires of the table's modules, replaces, tools."""
    parsed = json.loads(_run([go, "mod", "edit", "-json"], c.dir))
    requires = {r["Path"]: r["Version"] for r in parsed.get("Require") or [] if r["Path"] in c.requires}
    every = parsed.get("Replace") or []
    replaces = {r["Old"]["Path"]: r["New"].get("Version") for r in every if r["New"].get("Version")}
    local = {r["Old"]["Path"]: r["New"]["Path"].removeprefix("./") for r in every if not r["New"].get("Version")}
    tools = sorted(t["Path"] for t in parsed.get("Tool") or [])
    return {"requires": requires, "replaces": replaces, "tools": tools, "local": local}


def stale(go: str, c: Component) -> str | None:
    """Why ``c``'s go.mod disagrees with the table (without network), or None."""
    if not (c.dir / "go.mod").exists() or not (c.dir / "go.sum").exists():
        return "no go.mod/go.sum yet"
    have = _current(go, c)
    if have["requires"] != c.requires:
        return f"pins {have['requires']}, the table {c.requires}"
    if have["tools"] != sorted(set(c.binaries.values())):
        return f"builds {have['tools']}, the table {sorted(set(c.binaries.values()))}"
    if have["local"] != c.local:
        return f"replaces {have['local']} with local modules, the table {c.local}"
    replaces = have["replaces"]
    assert isinstance(replaces, dict)
    if c.kubernetes is None:
        if replaces:
            return f"replaces {sorted(replaces)} but the component links no k8s.io/kubernetes"
        return None
    staging = "v0." + c.kubernetes.split(".", 1)[1]
    wrong = sorted(m for m, v in replaces.items() if m != KUBERNETES and v != staging)
    if wrong or not replaces:
        return f"staging modules {wrong or 'missing'} are not at {staging}"
    if replaces.get(KUBERNETES, f"v{c.kubernetes}") != f"v{c.kubernetes}":
        return f"links {KUBERNETES} {replaces[KUBERNETES]}, the table v{c.kubernetes}"
    return None


def write_mod(go: str, c: Component) -> None:
    """``c``'s go.mod from the table, tidied (network); on failure none is left (a half-written one
    would pass the ``stale`` check and fail every build)."""
    c.dir.mkdir(parents=True, exist_ok=True)
    try:
        _write_mod(go, c)
    except Failure:
        for name in ("go.mod", "go.sum"):
            (c.dir / name).unlink(missing_ok=True)
        raise


def _write_mod(go: str, c: Component) -> None:
    (c.dir / "go.mod").write_text(_render(c, _replaces(go, c)))
    (c.dir / "go.sum").touch()
    try:
        _run([go, "mod", "tidy"], c.dir, {"GOFLAGS": "-mod=mod"})
    except Failure as err:
        if "sumdb" not in str(err):
            raise
        # The checksum database does not know every module the proxy serves (seen: k8s.io/sample-apiserver
        # v0.34.9). go.sum then records the proxy's hashes, and every later build checks against go.sum.
        print(f"tools/components/{c.name}: the checksum database refused a lookup; go mod tidy with GOSUMDB=off")
        _run([go, "mod", "tidy"], c.dir, {"GOFLAGS": "-mod=mod", "GOSUMDB": "off"})


def _stamp(go: str, c: Component) -> str:
    h = hashlib.sha256()
    for part in ((c.dir / "go.mod").read_bytes(), (c.dir / "go.sum").read_bytes(), " ".join(c.ldflags).encode()):
        h.update(hashlib.sha256(part).digest())
    if c.tags:
        h.update(",".join(c.tags).encode())
    h.update(_run([go, "version"], HERE).encode() + STATIC.encode())
    h.update(json.dumps([c.binaries, c.data], sort_keys=True).encode())
    for folder in sorted(c.local.values()):  # a local module's source is part of what is built
        for f in sorted((c.dir / folder).rglob("*")):
            if f.is_file():
                h.update(f.relative_to(c.dir).as_posix().encode() + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def build(go: str, c: Component, out: Path) -> bool:
    """Build ``c`` into ``out`` unless its stamp is current; True when something was built."""
    stamp = out / f".{c.name}.stamp"
    want = _stamp(go, c)
    if stamp.exists() and stamp.read_text() == want and all((out / b).exists() for b in [*c.binaries, *c.data]):
        return False
    flags = " ".join(("-s", "-w", *c.ldflags))
    for binary, pkg in c.binaries.items():
        _run(
            [go, "build", "-trimpath", f"-tags={','.join(c.tags)}", f"-ldflags={flags}", "-o", str(out / binary), pkg],
            c.dir,
            {"CGO_ENABLED": STATIC},
        )
    if c.data:
        module = next(iter(c.requires))
        source = Path(json.loads(_run([go, "list", "-m", "-json", module], c.dir))["Dir"])
        for dest, rel in c.data.items():
            (out / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, out / dest)
    stamp.write_text(want)
    return True


def main(argv: list[str]) -> int:
    try:
        command = argv[0] if argv else ""
        if command == "versions":
            print(json.dumps({c.name: {"requires": c.requires, "kubernetes": c.kubernetes} for c in components()}))
            return 0
        for (module, version), sub in SUBSTITUTES.items():
            print(f"components: {module} {sub.version} is built in place of {version}: {sub.why}", file=sys.stderr)
        for module, reason in LOCAL_MODULES.items():
            print(f"components: {module} is replaced by a local module: {reason}", file=sys.stderr)
        go = _go()
        if command == "check":
            bad = [(c, why) for c in components() if (why := stale(go, c)) is not None]
            for c, why in bad:
                print(
                    f"error: tools/components/{c.name}/go.mod {why}: run make components and commit it", file=sys.stderr
                )
            return 2 if bad else 0
        if command == "build" and len(argv) == 2:
            out = Path(argv[1]).resolve()
            out.mkdir(parents=True, exist_ok=True)
            for c in components():
                why = stale(go, c)
                if why is not None:
                    if os.environ.get("CI") == "true":
                        raise Failure(f"tools/components/{c.name}/go.mod {why}: run make components and commit it")
                    print(f"tools/components/{c.name}/go.mod: {why}: writing it from the versions table", flush=True)
                    write_mod(go, c)
                print(f"components: {c.name} " + ("built" if build(go, c, out) else "up to date"), flush=True)
            return 0
        print(__doc__, file=sys.stderr)
        return 2
    except Failure as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
