"""A plan as a person reads it: terminal text, a pull-request comment (Markdown + Mermaid), JSON."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from agk.plan import change_report, teams, wire
from agk.plan.blast import BlastRadius
from agk.plan.diff import StackDiff
from agk.plan.engine import StackPlan
from agk.plan.prices import Prices
from agk.plan.topology import Topology, topology

Changes = tuple[StackDiff, BlastRadius, Prices | None]
"""The diff against the base, its blast radius, and the list prices its cost line uses (if given)."""
"""A stack's diff against ``--base`` and its blast radius."""

NOTHING_DEPLOYED = "Offline plan under Pulumi's mock runtime: nothing was deployed, no cloud API was called."


def counts_by_type(plan: StackPlan) -> dict[str, int]:
    counts = Counter(r.type for r in plan.resources if r.type != "pulumi:pulumi:Stack")
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _summary(plan: StackPlan) -> str:
    kinds = Counter(
        "provider"
        if r.type.startswith("pulumi:providers:")
        else "stack reference"
        if r.type == "pulumi:pulumi:StackReference"
        else "cloud"
        if r.custom
        else "component"
        for r in plan.resources
        if r.type != "pulumi:pulumi:Stack"
    )
    parts = [
        _plural(kinds[k], noun)
        for k, noun in (
            ("cloud", "cloud resource"),
            ("component", "component"),
            ("provider", "provider"),
            ("stack reference", "stack reference"),
        )
        if kinds[k]
    ]
    return f"{_plural(sum(kinds.values()), 'resource')}: {', '.join(parts)}"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _sizing(plan: StackPlan) -> list[dict[str, str]]:
    """The cluster program's `sizing` output: recommended vs chosen VM size per role."""
    raw = wire.plain(plan.outputs["sizing"]) if "sizing" in plan.outputs else {}
    return [dict(row) for row in raw.values()] if isinstance(raw, dict) else []


def _sizes(plan: StackPlan) -> tuple[str, list[dict[str, Any]]]:
    """The cluster program's `sizes` output (every count-driven size in force, modules/vm_sizing/formulas.py)
    and a heading naming the node count they are sized for (its `sized_for` output)."""
    raw = wire.plain(plan.outputs["sizes"]) if "sizes" in plan.outputs else []
    if not isinstance(raw, list) or not raw:
        return "", []
    sized = wire.plain(plan.outputs["sized_for"]) if "sized_for" in plan.outputs else {}
    peak, step = (sized.get("peak_nodes"), sized.get("nodes")) if isinstance(sized, dict) else (None, None)
    head = f"Sizes for {_num(step)} nodes (the sizing step of {_num(peak)} peak nodes; modules/vm_sizing/formulas.py)"
    return head, [dict(row) for row in raw]


def _node_images(plan: StackPlan) -> dict[str, str]:
    """The cluster program's `node_images` output: the gallery image version each role boots."""
    raw = wire.plain(plan.outputs["node_images"]) if "node_images" in plan.outputs else {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _versions(plan: StackPlan) -> list[dict[str, Any]]:
    """The cluster program's `versions` output: every pinned release, its sha256 and source."""
    raw = wire.plain(plan.outputs["versions"]) if "versions" in plan.outputs else []
    return [dict(row) for row in raw] if isinstance(raw, list) else []


def masked_outputs(plan: StackPlan) -> dict[str, Any]:
    return {k: "[secret]" if wire.is_secret(v) else wire.plain(v) for k, v in sorted(plan.outputs.items())}


def _pct(value: Any) -> str:
    return f"{float(value):.0%}" if isinstance(value, int | float) else "-"


def _num(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def _value(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _subnet_of(topo: Topology, subnet_id: str) -> str:
    vnet = topo.vnet_of(subnet_id)
    if vnet is None:
        return subnet_id.rsplit("/", 1)[-1]
    return next(s.name for s in vnet.subnets if s.id.lower() == subnet_id.lower())


# -- text ----------------------------------------------------------------------------------------
def text(
    plan: StackPlan,
    addresses: dict[str, Any],
    review: str | None,
    referenced: tuple[StackPlan, ...] = (),
    changes: Changes | None = None,
) -> str:
    topo = topology(plan, referenced)
    lines = [f"Stack {plan.stack} ({plan.project}): {_summary(plan)}", f"  {NOTHING_DEPLOYED}", ""]
    if changes is not None:
        lines += [*change_report.text(*changes), ""]
    if plan.references:
        lines += [f"Reads outputs of: {', '.join(plan.references)}", ""]
    lines.append("Resources by type:")
    lines += [f"  {count:>6,}  {type_}" for type_, count in counts_by_type(plan).items()]
    if addresses.get("vnets"):
        lines += ["", "Address plan:"]
        for vnet in addresses["vnets"]:
            lines.append(
                f"  {vnet['name']}  {vnet['cidr']}  needs {_num(vnet.get('ips_needed'))} IPs,"
                f" {_pct(vnet.get('utilization'))} used"
            )
            for subnet in vnet.get("subnets", []):
                lines.append(
                    f"    {subnet['name']:<28} {subnet['cidr']:<18} {_num(subnet.get('usable_ips')):>9} usable"
                    f"  {_num(subnet.get('ips_needed')):>9} needed  {subnet.get('role') or ''}".rstrip()
                )
        for warning in addresses.get("warnings", []):
            lines.append(f"  warning [{warning.get('code')}]: {warning.get('message')}")
    if topo.peerings:
        lines += ["", "Peerings:"]
        names = {v.id.lower(): v.name for v in topo.vnets}
        lines += [f"  {names[p.local.lower()]} -> {names[p.remote.lower()]}  ({p.name})" for p in topo.peerings]
    if topo.pools:
        lines += ["", "Pools and scale sets:"]
        for pool in topo.pools:
            subnets = ", ".join(_subnet_of(topo, s) for s in pool.subnet_ids) or "-"
            lines.append(
                f"  {pool.name:<18} {pool.role:<12} {pool.vm_size:<26} {_plural(pool.scale_sets, 'scale set'):>13}"
                f" {pool.nodes:>6,} nodes  subnet {subnets}"
            )
    lines += teams.text(plan)
    if topo.vms_by_role:
        lines += ["", "Virtual machines: " + ", ".join(f"{role} {n}" for role, n in topo.vms_by_role.items())]
    sizing = _sizing(plan)
    if sizing:
        lines += ["", "VM sizes (recommended by the sizing rules / chosen):"]
        lines += [
            f"  {r['role']:<12} {r['recommended']:<20} {r['chosen']:<20}{'' if r['chosen'] == r['recommended'] else '  (override)'}"
            f"  {r['rule']}"
            for r in sizing
        ]
    head, sizes = _sizes(plan)
    if sizes:
        lines += ["", f"{head}:"]
        lines += [f"  {r['name']:<52} {_value(r['value']):>18}  {r['formula']}: {r['source']}" for r in sizes]
    images = _node_images(plan)
    if images:
        lines += ["", "Node images (gallery image versions each role boots; docs/images.md):"]
        lines += [f"  {role:<20} {version}" for role, version in images.items()]
    pinned = _versions(plan)
    if pinned:
        lines += [
            "",
            "Versions in force (modules/bootstrap/versions.py; UNVERIFIED: no public sha256, not deployable):",
        ]
        lines += [f"  {r['name']:<20} {r['version']:<10} {r['checked_by']:<10} {r['source']}" for r in pinned]
    outputs = masked_outputs(plan)
    if outputs:
        lines += ["", f"Stack outputs: {', '.join(outputs)}"]
    needed = change_report.prerequisites(plan.outputs)
    if needed is not None:
        lines += ["", *change_report.prerequisites_text(needed)]
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    lines += ["", f"Review: {review}" if review else "Review: not run (agk review is not available)"]
    return "\n".join(lines)


# -- markdown ------------------------------------------------------------------------------------
class _Ids:
    """Short Mermaid node ids (v1, s2, p3) for long ARM ids, stable within one diagram."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def __call__(self, prefix: str, key: str) -> str:
        return self._ids.setdefault(f"{prefix}:{key.lower()}", f"{prefix}{len(self._ids) + 1}")


def _label(text_: str) -> str:
    return text_.replace('"', "#quot;")


def mermaid(topo: Topology) -> str:
    """A flowchart of the hub-and-spoke topology: VNets, their subnets with sizes, peerings, pools."""
    lines = ["flowchart LR"]
    ids = _Ids()
    for vnet in topo.vnets:
        where = " (another stack)" if vnet.external else ""
        kind = f" · {vnet.kind}" if vnet.kind else ""
        title = f"{vnet.name}{kind} · {', '.join(vnet.cidrs) or '?'}{where}"
        lines.append(f'  subgraph {ids("v", vnet.id)}["{_label(title)}"]')
        lines.append("    direction TB")
        for subnet in vnet.subnets:
            size = f"{subnet.cidr} · {subnet.usable:,} usable"
            lines.append(f'    {ids("s", subnet.id)}["{_label(subnet.name)}<br/>{size}"]')
        if not vnet.subnets:
            lines.append(f'    {ids("s", vnet.id)}["{_label(vnet.name)}"]')
        lines.append("  end")
    seen: set[frozenset[str]] = set()
    for peering in topo.peerings:
        pair = frozenset({peering.local.lower(), peering.remote.lower()})
        if pair in seen:
            continue
        seen.add(pair)
        lines.append(f"  {ids('v', peering.local)} <-->|peering| {ids('v', peering.remote)}")
    for pool in topo.pools:
        pid = ids("p", pool.name)
        label = f"pool {pool.name}: {pool.nodes:,} × {pool.vm_size}<br/>{_plural(pool.scale_sets, 'scale set')}"
        lines.append(f'  {pid}(["{_label(label)}"])')
        for subnet_id in pool.subnet_ids:
            if topo.vnet_of(subnet_id) is not None:
                lines.append(f"  {ids('s', subnet_id)} --- {pid}")
    return "\n".join(lines)


def markdown(
    plan: StackPlan,
    addresses: dict[str, Any],
    review: str | None,
    referenced: tuple[StackPlan, ...] = (),
    changes: Changes | None = None,
) -> str:
    topo = topology(plan, referenced)
    out = [f"### `agk plan` · stack `{plan.stack}`", ""]
    if changes is not None:
        out += change_report.markdown(*changes)
    out += [f"> {NOTHING_DEPLOYED}", "", f"**{_summary(plan)}**"]
    if plan.references:
        out.append(f"Reads the outputs of {', '.join(f'`{r}`' for r in plan.references)}.")
    out.append("")
    if review:
        out += [f"**Review:** {review}", ""]
    needed = change_report.prerequisites(plan.outputs)
    if needed is not None:
        out += change_report.prerequisites_markdown(needed)
    if topo.vnets:
        out += ["```mermaid", mermaid(topo), "```", ""]
    if addresses.get("vnets"):
        out += ["#### Address plan", "", "| VNet / subnet | CIDR | usable | needed | role |", "|---|---|--:|--:|---|"]
        for vnet in addresses["vnets"]:
            out.append(
                f"| **{vnet['name']}** | {vnet['cidr']} | {_num(vnet.get('usable_ips'))} |"
                f" {_num(vnet.get('ips_needed'))} | {_pct(vnet.get('utilization'))} used |"
            )
            for s in vnet.get("subnets", []):
                out.append(
                    f"| {s['name']} | {s['cidr']} | {_num(s.get('usable_ips'))} | {_num(s.get('ips_needed'))} |"
                    f" {s.get('role') or ''} |"
                )
        for warning in addresses.get("warnings", []):
            out.append(f"\n> **{warning.get('code')}**: {warning.get('message')}")
        out.append("")
    if topo.pools:
        out += [
            "#### Pools and scale sets",
            "",
            "| pool | role | VM size | scale sets | nodes |",
            "|---|---|---|--:|--:|",
        ]
        out += [f"| {p.name} | {p.role} | {p.vm_size} | {p.scale_sets} | {p.nodes:,} |" for p in topo.pools]
        out.append("")
    out += teams.markdown(plan)
    if topo.vms_by_role:
        out += ["Virtual machines: " + ", ".join(f"{role} × {n}" for role, n in topo.vms_by_role.items()), ""]
    sizing = _sizing(plan)
    if sizing:
        out += ["| role | recommended | chosen | rule |", "|---|---|---|---|"]
        out += [f"| {r['role']} | {r['recommended']} | {r['chosen']} | {r['rule']} |" for r in sizing]
        out.append("")
    head, sizes = _sizes(plan)
    if sizes:
        out += [f"#### {head}", "", "| size | value | formula | source |", "|---|--:|---|---|"]
        out += [f"| {r['name']} | {_value(r['value'])} | `{r['formula']}` | {r['source']} |" for r in sizes]
        out.append("")
    images = _node_images(plan)
    if images:
        out += ["#### Node images", "", "| role | gallery image version |", "|---|---|"]
        out += [f"| {role} | {version} |" for role, version in images.items()]
        out.append("")
    pinned = _versions(plan)
    if pinned:
        out += ["<details><summary>Versions in force</summary>", "", "| component | version | checked by | source |"]
        out += ["|---|---|---|---|"] + [
            f"| {r['name']} | {r['version']} | {r['checked_by']} | {r['source']} |" for r in pinned
        ]
        out += ["", "</details>", ""]
    out += ["<details><summary>Resources by type</summary>", "", "| type | count |", "|---|--:|"]
    out += [f"| `{t}` | {n:,} |" for t, n in counts_by_type(plan).items()]
    out += ["", "</details>", ""]
    for warning in plan.warnings:
        out.append(f"> warning: {warning}")
    return "\n".join(out).rstrip() + "\n"


# -- json ----------------------------------------------------------------------------------------
def as_json(
    plan: StackPlan,
    addresses: dict[str, Any],
    review: str | None,
    referenced: tuple[StackPlan, ...] = (),
    changes: Changes | None = None,
) -> dict[str, Any]:
    topo = topology(plan, referenced)
    extra: dict[str, Any] = change_report.as_json(*changes) if changes is not None else {}
    needed = change_report.prerequisites(plan.outputs)
    if needed is not None:
        extra["prerequisites"] = needed
    return {
        "stack": plan.stack,
        "project": plan.project,
        "deployed": False,
        "resources": len(plan.resources),
        "counts_by_type": counts_by_type(plan),
        "references": plan.references,
        "outputs": masked_outputs(plan),
        "addresses": addresses,
        "topology": {
            "vnets": [asdict(v) for v in topo.vnets],
            "peerings": [asdict(p) for p in topo.peerings],
            "pools": [asdict(p) for p in topo.pools],
            "vms_by_role": topo.vms_by_role,
        },
        "teams": teams.rows(plan),
        "sizes": _sizes(plan)[1],
        "node_images": _node_images(plan),
        "warnings": plan.warnings,
        "review": review,
        **extra,
    }
