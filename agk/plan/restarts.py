"""Which processes on which hosts a change restarts, and how: the hosts' bundles and their VMs.

A fixed host's configuration lives in its Key Vault bundle (modules/bootstrap/host/bundle.py); its
hourly sync writes every file that differs and acts on the bundle's restart map (restart or reload a
unit, recreate a static pod), gated so one etcd member and one API server go at a time. So decoding
the bundles of the base and of the plan, file by file, says exactly what each host will restart, the
same way the sync decides it (``boot_only`` files are left to the first boot). A VM that Azure
restarts (a resize) or replaces is a restart of everything on it; those come from the diff.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agk.plan import wire
from agk.plan.diff import StackDiff, State
from modules.bootstrap.host import bundle

SECRET = "azure-native:keyvault:Secret"
VM = "azure-native:compute:VirtualMachine"


@dataclass(frozen=True)
class HostRestart:
    host: str
    role: str
    actions: tuple[str, ...]
    """``restart etcd.service``, ``static-pod kube-apiserver``, ``reload prometheus.service``, or the VM's fate."""
    how: str
    """``sync`` (the host's timer applies its new bundle, gated) or ``vm`` (`pulumi up` restarts or replaces the VM)."""

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, "role": self.role, "actions": list(self.actions), "how": self.how}


def _secret_values(resources: Iterable[State]) -> dict[str, str]:
    out: dict[str, str] = {}
    for res in resources:
        if res.get("type") != SECRET:
            continue
        inputs = wire.plain(res.get("inputs") or {})
        if not isinstance(inputs, dict):
            continue
        name, value = inputs.get("secretName"), (inputs.get("properties") or {}).get("value")
        if isinstance(name, str) and isinstance(value, str) and value.startswith(bundle.PART_TAG):
            out[name] = value
    return out


def bundles(resources: Iterable[State]) -> dict[str, dict[str, Any]]:
    """Host name to its decoded bundle, for every bundle whose parts are all in ``resources``."""
    values = _secret_values(resources)
    out: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if not value.startswith(f"{bundle.PART_TAG} 1/"):
            continue
        try:
            doc = bundle.decode(bundle.join(values.__getitem__, name))
        except (bundle.BundleError, KeyError):
            continue  # a part the state lacks or an encrypted value: nothing to compare
        out[str(doc["name"])] = doc
    return out


def _files(doc: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {f["path"]: (f["content"], f["mode"], f["owner"]) for f in doc.get("files") or [] if not f.get("boot_only")}


def sync_actions(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """What the host's sync does when its bundle goes from ``before`` to ``after`` (as sync.apply decides)."""
    old, new = _files(before), _files(after)
    changed = {p for p in new if old.get(p) != new[p]}
    return tuple(
        f"{r['action']} {r['unit']}" for r in after.get("restarts") or [] if set(r.get("paths") or ()) & changed
    )


def host_restarts(diff: StackDiff) -> list[HostRestart]:
    """Every host whose processes the change restarts: by its bundle (the sync) or by its VM (`pulumi up`)."""
    out: list[HostRestart] = []
    seen: set[str] = set()
    for change in diff.changes:
        if change.type != VM or change.before is None:
            continue
        role = str((wire.plain(change.before.get("inputs") or {}).get("tags") or {}).get("agk-role", ""))
        if change.action in ("replace", "delete"):
            fate = "VM replaced: down until the new one boots" if change.action == "replace" else "VM deleted"
            out.append(HostRestart(change.name, role, (fate,), "vm"))
            seen.add(change.name)
        elif change.restarts:
            out.append(HostRestart(change.name, role, (f"VM restarted by Azure ({', '.join(change.restarts)})",), "vm"))
            seen.add(change.name)
    old, new = bundles(diff.base_resources), bundles(diff.head_resources)
    for host in sorted(new.keys() & old.keys()):
        if host in seen:
            continue
        actions = sync_actions(old[host], new[host])
        if actions:
            out.append(HostRestart(host, str(new[host].get("role", "")), actions, "sync"))
    return sorted(out, key=lambda r: (r.role, r.host))
