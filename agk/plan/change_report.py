"""The parts of a plan a reviewer reads first: what the change does against the base, what goes with
it (the blast radius), and what must exist before `pulumi up` (the program's ``prerequisites``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agk.plan import wire
from agk.plan.blast import VM, VMSS, BlastRadius, SubnetMove, props_of
from agk.plan.diff import ACTIONS, Change, StackDiff
from agk.plan.prices import HOURS_PER_MONTH, Prices
from modules.vm_sizing.skus import SKUS
from policies.rules import fields
from policies.rules.replacements import refusals

SHOWN_CHANGES = 40
"""Text and markdown list this many changes besides the scale sets (every one of those is listed); JSON lists all."""
_RANK = {
    "azure-native:compute:VirtualMachineScaleSet": 0,
    "azure-native:compute:VirtualMachine": 1,
    "azure-native:compute:Disk": 2,
    "azure-native:network:LoadBalancer": 3,
    "azure-native:network:VirtualNetwork": 4,
    "azure-native:network:Subnet": 4,
    "azure-native:network:VirtualNetworkPeering": 4,
    "azure-native:authorization:RoleDefinition": 8,
    "azure-native:authorization:RoleAssignment": 8,
    "azure-native:keyvault:Secret": 9,
}
_ORDER = {action: i for i, action in enumerate(("replace", "delete", "update", "create"))}


def shown(diff: StackDiff) -> tuple[list[Change], int]:
    """What a reviewer reads first: machines (every scale set, whatever the count), their disks and network,
    and the Key Vault secrets and role assignments last; and how many rows are left out."""
    ordered = sorted(diff.changes, key=lambda c: (_RANK.get(c.type, 5), _ORDER[c.action], c.type, c.urn))
    sets = sum(c.type == "azure-native:compute:VirtualMachineScaleSet" for c in ordered)
    limit = sets + SHOWN_CHANGES
    return ordered[:limit], max(0, len(ordered) - limit)


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _short_type(type_: str) -> str:
    return type_.rsplit(":", 1)[-1]


def counts_line(diff: StackDiff) -> str:
    counts = diff.counts()
    parts = [f"{counts[a]:,} to {a}" for a in ACTIONS if counts[a]]
    return ", ".join(parts) if parts else "no changes"


def _subnets(moves: Sequence[SubnetMove]) -> str:
    return "; ".join(
        f"{m.subnet} {', '.join(m.before)} -> {', '.join(m.after) or 'gone'}"
        f" ({_plural(m.ip_configurations, 'IP configuration')}, {_plural(m.machines, 'machine')})"
        for m in moves
    )


def restarts_line(radius: BlastRadius) -> str:
    if not radius.restarts:
        return "Processes restarted: none"
    by_sync = [r for r in radius.restarts if r.how == "sync"]
    by_vm = [r for r in radius.restarts if r.how == "vm"]
    parts = []
    if by_vm:
        parts.append("by `pulumi up`: " + "; ".join(f"{r.host} ({', '.join(r.actions)})" for r in by_vm))
    if by_sync:
        parts.append(
            "by each host's hourly sync (an etcd member or an API server only while the others are healthy): "
            + "; ".join(f"{r.host} ({', '.join(r.actions)})" for r in by_sync)
        )
    return f"Processes restarted on {_plural(len(radius.restarts), 'host')}: " + "; ".join(parts)


def radius_lines(radius: BlastRadius) -> list[str]:
    """The blast radius in a few plain lines (the same words in text and markdown)."""
    sets = len(radius.scale_sets)
    scaled_in = any(s.action == "scale-in" for s in radius.scale_sets)
    lines = [
        f"{_plural(radius.nodes, 'node')} ({_plural(radius.gpus, 'GPU')}) in {_plural(sets, 'scale set')}"
        + (" replaced, deleted or scaled in" if scaled_in else " replaced or deleted"),
    ]
    if radius.scale_sets:
        # Which VMs go is known before `pulumi up`: a scaled-in set removes its newest instances (NewestVM) and
        # a pool shrinks from its newest sets (split_pool), so these are the VMs to drain first.
        lines.append(
            "VMs removed: " + "; ".join(s.removed() for s in radius.scale_sets) + "; drain them first (docs/day2.md)"
        )
    if radius.created:
        lines.append(
            f"{_plural(radius.nodes_created, 'node')} ({_plural(radius.gpus_created, 'GPU')}) created in"
            f" {_plural(len(radius.created), 'scale set')}"
        )
    lines += [
        f"{_plural(len(radius.etcd_members), 'etcd member')} lost"
        + (f" ({', '.join(radius.etcd_members)})" if radius.etcd_members else ""),
        f"{_plural(len(radius.subnets_moved), 'subnet')} in use moved"
        + (f": {_subnets(radius.subnets_moved)}" if radius.subnets_moved else ""),
    ]
    if radius.subnets_removed:
        lines.append(
            f"{_plural(len(radius.subnets_removed), 'subnet')} in use removed: {_subnets(radius.subnets_removed)}"
        )
    lines.append("API endpoint: " + ("; ".join(radius.api_endpoint) if radius.api_endpoint else "unaffected"))
    lines.append(restarts_line(radius))
    if radius.to_roll:
        nodes = sum(r.nodes for r in radius.to_roll)
        lines.append(
            f"{_plural(len(radius.to_roll), 'scale set')} ({_plural(nodes, 'running node')}) "
            f"{'gets' if len(radius.to_roll) == 1 else 'get'} a new model that "
            f"running nodes boot only once reimaged: {', '.join(r.name for r in radius.to_roll)}"
            " (docs/day2.md, 'Rolling a scale set')"
        )
    return lines


def _vms(res: Any) -> tuple[str, str, int] | None:
    """A VM or scale set's region, VM size and VM count (a scale set's capacity)."""
    if res is None or res.get("type") not in (VMSS, VM):
        return None
    props = props_of(res)
    region = str(props.get("location", ""))
    if res.get("type") == VMSS:
        size, count = str(fields.get(props, "sku.name", "")), fields.number(fields.get(props, "sku.capacity")) or 0
    else:
        size, count = str(fields.get(props, "hardwareProfile.vmSize", "")), 1
    return region, size, count


def _vcpus_by_family(res: Any) -> dict[str, int]:
    """Regional vCPUs a VM or scale set takes (capacity x the size's vCPUs), by quota family."""
    vms = _vms(res)
    if vms is None:
        return {}
    _, size, count = vms
    found = SKUS.get(size)
    return {found.family: found.vcpus * count} if found and count else {}


def vm_delta(diff: StackDiff) -> dict[tuple[str, str], int]:
    """VMs the change adds (or removes) per (region, VM size), from what runs today to what it plans."""
    out: dict[tuple[str, str], int] = {}
    for change in diff.changes:
        for res, sign in ((change.before, -1), (change.after, 1)):
            if (sign < 0 and change.action == "create") or (sign > 0 and change.action == "delete"):
                continue
            vms = _vms(res)
            if vms is not None and vms[2]:
                key = (vms[0], vms[1])
                out[key] = out.get(key, 0) + sign * vms[2]
    return {key: n for key, n in sorted(out.items()) if n}


def cost_delta(diff: StackDiff, prices: Prices) -> tuple[dict[str, float], list[str]]:
    """USD per hour the change adds (or saves) per quota family at list price, and the sizes
    (``size in region``) the prices do not cover."""
    out: dict[str, float] = {}
    unpriced: list[str] = []
    for (region, size), n in vm_delta(diff).items():
        price = prices.of(region, size)
        if price is None:
            unpriced.append(f"{size} in {region}")
            continue
        family = SKUS[size].family if size in SKUS else size
        out[family] = out.get(family, 0.0) + n * price
    return {f: d for f, d in sorted(out.items()) if round(d, 2)}, unpriced


def cost_line(diff: StackDiff, prices: Prices | None) -> str:
    if prices is None:
        return (
            "Cost delta: not priced (agk plan --prices FILE with the Azure Retail Prices API's answer;"
            " docs/plan-and-review.md)"
        )
    delta, unpriced = cost_delta(diff, prices)
    missing = f"; not priced: {', '.join(unpriced)} (not in {prices.source})" if unpriced else ""
    if not delta:
        return "Cost delta (Linux pay-as-you-go list price): none" + missing
    total = sum(delta.values())
    parts = "; ".join(f"{f} {_usd(d)}/h" for f, d in delta.items())
    return (
        f"Cost delta (Linux pay-as-you-go list price, per VM family): {parts}; total {_usd(total)}/h,"
        f" {_usd(total * HOURS_PER_MONTH, 0)}/month" + missing
    )


def _usd(amount: float, places: int = 2) -> str:
    return f"{'+' if amount >= 0 else '-'}${abs(amount):,.{places}f}"


def quota_delta(diff: StackDiff) -> dict[str, int]:
    """vCPUs the change adds (or frees) per quota family, counted from what runs today to what it plans."""
    out: dict[str, int] = {}
    for change in diff.changes:
        before = _vcpus_by_family(change.before) if change.action != "create" else {}
        after = _vcpus_by_family(change.after) if change.action != "delete" else {}
        for family in before.keys() | after.keys():
            out[family] = out.get(family, 0) + after.get(family, 0) - before.get(family, 0)
    return {family: delta for family, delta in sorted(out.items()) if delta}


def quota_peak(diff: StackDiff) -> dict[str, int]:
    """vCPUs the update takes at its height: Pulumi creates and grows first and deletes last, so what goes is
    still there while what comes is added (a delete-first replacement frees its vCPUs before)."""
    out: dict[str, int] = {}
    for change in diff.changes:
        if change.action == "delete" or (change.action == "replace" and change.delete_first):
            continue
        before = _vcpus_by_family(change.before) if change.action == "update" else {}
        after = _vcpus_by_family(change.after)
        for family in before.keys() | after.keys():
            grows = after.get(family, 0) - before.get(family, 0)
            if grows > 0:
                out[family] = out.get(family, 0) + grows
    return dict(sorted(out.items()))


def quota_line(diff: StackDiff) -> str:
    delta, peak = quota_delta(diff), quota_peak(diff)
    during = ""
    if peak != {f: d for f, d in delta.items() if d > 0}:
        during = (
            " (during the update, before its deletes run: " + "; ".join(f"{f} +{d:,}" for f, d in peak.items()) + ")"
        )
    if not delta:
        return "vCPU quota delta: none" + during
    return "vCPU quota delta (regional, per VM family): " + "; ".join(f"{f} {d:+,}" for f, d in delta.items()) + during


def sizing(diff: StackDiff) -> dict[str, list[int | None]] | None:
    """The peak node count and the sizing step before and after (``None`` when a side has no cluster)."""

    def read(outputs: Any) -> tuple[int | None, int | None]:
        value = outputs.get("sized_for") if isinstance(outputs, dict) else None
        if not isinstance(value, dict):
            return None, None
        return value.get("peak_nodes"), value.get("nodes")

    (peak_before, step_before), (peak_after, step_after) = read(diff.base_outputs), read(diff.head_outputs)
    if step_before is None and step_after is None:
        return None
    return {"peak_nodes": [peak_before, peak_after], "sized_for": [step_before, step_after]}


def sizing_line(diff: StackDiff) -> str | None:
    found = sizing(diff)
    if found is None or None in found["sized_for"] or None in found["peak_nodes"]:
        return None
    (peak_before, peak_after), (before, after) = found["peak_nodes"], found["sized_for"]
    if before != after:
        return (
            f"Sizing step crossed: sized for {before:,} -> {after:,} nodes (peak {peak_before:,} -> {peak_after:,}):"
            " control-plane and Prometheus VM sizes, etcd IOPS, the Prometheus disk and the API server and client"
            " limits follow it"
        )
    if peak_before != peak_after:
        return (
            f"Sized for {after:,} nodes (peak {peak_before:,} -> {peak_after:,}, inside the step): no control-plane"
            " size or limit changes"
        )
    return None


def refused_lines(diff: StackDiff) -> list[str]:
    """Each change Azure refuses in place, once per row of the table, with the resources and the fix."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for change in diff.changes:
        for rule in refusals(change.type, change.refused):
            groups.setdefault((_short_type(change.type), rule.path, rule.fix), []).append(change.name)
    return [
        f"Azure refuses {path} of {_plural(len(names), kind)} in place ({', '.join(names)}): `pulumi up` would fail"
        f" there. Fix: {fix}"
        for (kind, path, fix), names in groups.items()
    ]


def _describe(change: Change) -> str:
    detail = ""
    if change.action == "replace":
        detail = f"forced by {', '.join(change.keys)}"
        if change.delete_first:
            detail += "; deleted first: down until the new one is up"
    elif change.action == "update" and change.keys:
        detail = ", ".join(change.keys)
    if change.refused:
        detail += f"{'; ' if detail else ''}Azure refuses {', '.join(change.refused)} in place"
    if change.renamed_from:
        detail += f"{'; ' if detail else ''}was {change.renamed_from.rsplit('::', 1)[-1]} (alias)"
    return detail


def text(diff: StackDiff, radius: BlastRadius, prices: Prices | None = None) -> list[str]:
    where = "a new stack: the base has no state for it" if diff.new_stack else diff.base
    lines = [f"Changes against {where}: {counts_line(diff)}"]
    lines += [f"  Blast radius: {line}" for line in radius_lines(radius)[:1]]
    lines += [f"                {line}" for line in radius_lines(radius)[1:]]
    step = sizing_line(diff)
    lines += [f"                {step}"] if step else []
    lines += [f"                {quota_line(diff)}", f"                {cost_line(diff, prices)}"]
    lines += [f"  REFUSED: {line}" for line in refused_lines(diff)]
    rows, more = shown(diff)
    for change in rows:
        detail = _describe(change)
        lines.append(
            f"  {change.action:<8} {_short_type(change.type):<26} {change.name}" + (f"  ({detail})" if detail else "")
        )
    if more:
        lines.append(f"  ... and {more:,} more (--format json lists every change)")
    lines += [f"  warning: {w}" for w in diff.warnings]
    return lines


def markdown(diff: StackDiff, radius: BlastRadius, prices: Prices | None = None) -> list[str]:
    where = "a new stack (the base has no state for it)" if diff.new_stack else f"`{diff.base}`"
    out = ["#### Blast radius", ""]
    out += [f"- {line}" for line in radius_lines(radius)]
    step = sizing_line(diff)
    out += [f"- {step}"] if step else []
    out += [f"- {quota_line(diff)}", f"- {cost_line(diff, prices)}"]
    refused = refused_lines(diff)
    if refused:
        out += ["", "#### Refused by Azure (`pulumi up` would fail)", "", *(f"- {line}" for line in refused)]
    out += ["", f"#### Changes against {where}: {counts_line(diff)}", ""]
    if diff.changes:
        out += ["| action | type | resource | keys |", "|---|---|---|---|"]
        rows, more = shown(diff)
        for change in rows:
            out.append(
                f"| {change.action} | `{_short_type(change.type)}` | `{change.name}` | {_describe(change).replace('|', '/')} |"
            )
        if more:
            out.append(f"| … | | {more:,} more | `agk plan --format json` lists all |")
        out.append("")
    out += [f"> warning: {w}" for w in diff.warnings]
    return out


def as_json(diff: StackDiff, radius: BlastRadius, prices: Prices | None = None) -> dict[str, Any]:
    return {
        "base": diff.base,
        "new_stack": diff.new_stack,
        "changes": [c.as_json() for c in diff.changes],
        "change_counts": diff.counts(),
        "blast_radius": radius.as_json(),
        "change_warnings": diff.warnings,
        "sizing": sizing(diff),
        "quota_delta": quota_delta(diff),
        "quota_peak": quota_peak(diff),
        "vm_delta": [{"region": r, "vm_size": z, "vms": n} for (r, z), n in vm_delta(diff).items()],
        "cost_delta_usd_per_hour": None if prices is None else cost_delta(diff, prices)[0],
    }


# -- before `pulumi up` ----------------------------------------------------------------------------
def prerequisites(outputs: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
    """The program's ``prerequisites`` output (features to register, quotas to raise), if it has one."""
    if "prerequisites" not in outputs:
        return None
    raw = wire.plain(outputs["prerequisites"])
    if not isinstance(raw, dict):
        return None
    return {
        "features": [f for f in raw.get("features") or [] if isinstance(f, dict)],
        "quotas": [q for q in raw.get("quotas") or [] if isinstance(q, dict)],
        "steps": [t for t in raw.get("steps") or [] if isinstance(t, dict)],
        "regional": (
            [{"vcpus": raw["regional_vcpus"], "declared": raw.get("regional_declared")}]
            if isinstance(raw.get("regional_vcpus"), int)
            else []
        ),
        "public_ips": [raw["public_ips"]] if isinstance(raw.get("public_ips"), dict) else [],
        "permissions": [p for p in raw.get("permissions") or [] if isinstance(p, dict)],
    }


def _regional(item: dict[str, Any]) -> str:
    declared = item.get("declared")
    state = f"declared: {declared:,}" if isinstance(declared, int) else "not declared yet"
    return f"Total Regional vCPUs: {item['vcpus']:,} vCPUs; {state}"


def _extra_lines(needed: dict[str, list[dict[str, Any]]], code: str) -> list[str]:
    """Rows after the quotas, in the form ``code`` wraps commands in (markdown backticks or nothing)."""
    out = [f"regional vCPU quota {_regional(item)}" for item in needed.get("regional", [])]
    out += [f"{item.get('count')} {item['why']}" for item in needed.get("public_ips", []) if item.get("count")]
    out += [
        f"role {code}{item.get('role')}{code} on {item.get('scope')} for the identity running `pulumi up` ({item.get('why')})"
        for item in needed.get("permissions", [])
    ]
    return out


def _feature(item: dict[str, Any]) -> tuple[str, str]:
    namespace, name = str(item.get("namespace", "")), str(item.get("name", ""))
    # The program's own command where it gives one; else the registration Azure documents.
    command = item.get("command") or f"az feature register --namespace {namespace} --name {name}"
    return f"{namespace}/{name}", str(command)


def _quota(item: dict[str, Any]) -> str:
    vcpus = item.get("vcpus")
    amount = f"{vcpus:,} vCPUs" if isinstance(vcpus, int) else f"{vcpus} vCPUs"
    sizes = item.get("vm_sizes") or ([item["vm_size"]] if item.get("vm_size") else [])
    size = f" ({', '.join(str(s) for s in sizes)})" if sizes else ""
    declared = item.get("declared")
    if "declared" in item:
        size += f"; declared: {declared:,}" if isinstance(declared, int) else "; not declared yet"
    return f"{item.get('family', '?')}: {amount}{size}"


def prerequisites_text(needed: dict[str, list[dict[str, Any]]]) -> list[str]:
    lines = ["Before `pulumi up`:"]
    for item in needed["features"]:
        feature, command = _feature(item)
        lines.append(f"  register feature {feature}: {command}" + (f"  ({item['why']})" if item.get("why") else ""))
    for item in needed["quotas"]:
        lines.append(f"  regional vCPU quota {_quota(item)}" + (f"  ({item['why']})" if item.get("why") else ""))
    lines += [f"  {line}" for line in _extra_lines(needed, "")]
    for item in needed.get("steps", []):
        lines.append(f"  {item.get('what')}: {item.get('command')}" + (f"  ({item['why']})" if item.get("why") else ""))
    if len(lines) == 1:
        lines.append("  nothing")
    return lines


def prerequisites_markdown(needed: dict[str, list[dict[str, Any]]]) -> list[str]:
    out = ["#### Before `pulumi up`", ""]
    for item in needed["features"]:
        feature, command = _feature(item)
        out.append(
            f"- register the feature `{feature}`: `{command}`" + (f" ({item['why']})" if item.get("why") else "")
        )
    for item in needed["quotas"]:
        out.append(f"- regional vCPU quota {_quota(item)}" + (f" ({item['why']})" if item.get("why") else ""))
    out += [f"- {line}" for line in _extra_lines(needed, "`")]
    for item in needed.get("steps", []):
        out.append(f"- {item.get('what')}: `{item.get('command')}`" + (f" ({item['why']})" if item.get("why") else ""))
    if len(out) == 2:
        out.append("- nothing")
    return [*out, ""]
