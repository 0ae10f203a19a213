"""subnet-calc: how many VNet addresses a cluster needs, and a whole stack's address plan.

``size`` must answer instantly (``make bench`` holds it to twice the start-up of a bare
``python3 -c "import ipaddress"``), so this shell uses argparse and imports neither pydantic nor
pulumi until ``plan`` needs the stack config.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from agk import args as checks
from agk.errors import Exit, guard, status_of
from modules.address_plan.fit import FIT_PLUGINS, Budget, Fit, most_nodes, most_pod_ips
from modules.address_plan.limits import Limits
from modules.address_plan.subnet_sizes import DEFAULT_MAX_PODS, PLUGINS, Sizing, parse_surge, size
from modules.errors import AgkError

STACKS_DIR = "stacks"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No abbreviations (--form for --format): click's `agk` takes none, and an abbreviation
        # that works today becomes ambiguous, or another option, when an option is added.
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        commands = getattr(self, "commands", ())
        if message == "the following arguments are required: command" and commands:
            # argparse's wording for a missing subcommand names the metavar, not the commands.
            message = f"name a command: {', '.join(commands[:-1])} or {commands[-1]}"
        print(f"error: {message}: see '{self.prog} --help'", file=sys.stderr)
        raise SystemExit(Exit.BAD_INPUT)


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked (start-up budget)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        from importlib.metadata import version

        print(f"{parser.prog} {version('azure-gpu-k8s')}")
        raise SystemExit(0)


def _parser() -> _Parser:
    parser = _Parser(prog="subnet-calc", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--version", nargs=0, action=_Version, help="Print the version and exit.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    s = sub.add_parser("size", help="Address needs of one pool for a network plugin.")
    s.add_argument("--plugin", required=True, choices=PLUGINS, help="Network plugin.")
    s.add_argument("--nodes", required=True, help="Nodes in the pool (autoscaled pools: the maximum).")
    s.add_argument(
        "--max-pods",
        default=None,
        help="Pods per node (default per plugin: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_MAX_PODS.items()) + ").",
    )
    s.add_argument("--surge", default="1", help="Surge nodes: a count or a percentage like 10%% (default 1).")
    s.add_argument("--infiniband", action="store_true", help="Scale sets capped at one placement group (100).")
    s.add_argument("--static-blocks", action="store_true", help="Pod subnet in static /28 block mode.")
    s.add_argument("--format", choices=("text", "json"), default="text", help="A readable table or one JSON object.")
    f = sub.add_parser("fit", help="The most pod IPs per node (or nodes) that fit one VNet and its peered group.")
    f.add_argument("--plugin", required=True, choices=FIT_PLUGINS, help="Network plugin.")
    what = f.add_mutually_exclusive_group(required=True)
    what.add_argument("--nodes", help="Nodes (autoscaled pools: the maximum): prints the most pod IPs per node.")
    what.add_argument("--pod-ips", help="Pod IPs per node (azure-cni): prints the most nodes.")
    f.add_argument("--surge", default="1", help="Surge nodes: a count or a percentage like 10%% (default 1).")
    f.add_argument("--infiniband", action="store_true", help="Scale sets capped at one placement group (100).")
    f.add_argument(
        "--stack",
        default=None,
        help="Answer for this stack's GPU pools: its other subnets and the rest of its peered groups are taken.",
    )
    f.add_argument("--stacks-dir", default=STACKS_DIR, help="Where the stack files are.")
    f.add_argument("--format", choices=("text", "json"), default="text", help="A readable table or one JSON object.")
    p = sub.add_parser("plan", help="A stack's whole address plan, laid out.")
    p.add_argument("--stack", required=True, help="Stack name (stacks/Pulumi.<stack>.yaml).")
    p.add_argument("--stacks-dir", default=STACKS_DIR, help="Where the stack files are.")
    p.add_argument(
        "--format", choices=("text", "json", "markdown"), default="text", help="Table, JSON, or a PR-comment table."
    )
    parser.commands = tuple(sub.choices)  # type: ignore[attr-defined]
    return parser


def _count(text: str, flag: str, fix: str) -> int:
    digits = text.strip()
    # ASCII only: int() also reads '٣' and '1_000', which no user means as a count.
    if not (digits.removeprefix("-").isascii() and digits.removeprefix("-").isdigit()):
        raise AgkError(f"{flag}: {text!r} is not a whole number: {fix}")
    value = int(digits)
    if value < 1:
        raise AgkError(f"{flag}: {value} is not a positive count: {fix}")
    return value


def size_text(result: Sizing) -> str:
    lines = [
        f"plugin            {result.plugin}",
        f"nodes             {result.nodes:,} + {result.surge_nodes:,} surge",
        f"max pods          {result.max_pods}",
        f"VNet IPs needed   {result.vnet_ips_needed:,}",
        (
            f"subnet            /{result.prefix_length} ({result.usable_ips:,} usable)"
            if result.prefix_length is not None
            else "subnet            none: larger than any Azure subnet"
        ),
    ]
    if result.plugin == "azure-cni":
        lines.append(f"IP configs / NIC  {result.ip_configs_per_nic}")
    if result.pod_subnet is not None:
        pod = result.pod_subnet
        where = f"/{pod.prefix_length} ({pod.usable_ips:,} usable)" if pod.prefix_length is not None else "none fits"
        lines.append(f"pod subnet        {pod.ips_needed:,} IPs, {where}")
    if result.pod_cidr_prefix is not None:
        lines.append(f"pod CIDR          /{result.pod_cidr_prefix} (one /24 per node, outside every VNet)")
    lines.append("warnings          " + ("none" if not result.warnings else ""))
    lines += [f"  [{w.code}] {w.message}" for w in result.warnings]
    return "\n".join(lines)


def stack_budgets(stack: str, stacks_dir: Path) -> tuple[Budget, ...]:
    """What ``stack``'s GPU pools may take: its VNet and every peered group it is in, less the rest."""
    from modules.stackplan.addresses import plan_stack

    plan = plan_stack(stacks_dir, stack)
    network, vnet = plan.network, plan.vnet
    if vnet.kind == "hub":
        spokes = ", ".join(sorted(n for n, v in network.vnets.items() if v.kind != "hub")) or "none"
        raise AgkError(f"--stack {stack}: a hub stack has no GPU pools: give a cluster stack ({spokes})")
    gpu = sum(s.ips_needed for s in vnet.subnets.values() if s.role == "gpu-pool")
    budgets = [Budget("vnet-private-ips", plan.limits["vnet-private-ips"], vnet.ips_needed - gpu, f"VNet {stack}")]
    for head in [stack, *vnet.peers]:
        used = network.group_ips(head) - gpu
        limit = plan.limits["peered-group-private-ips"]
        budgets.append(Budget("peered-group-private-ips", limit, used, f"peered group of {head}"))
    return tuple(budgets)


def fit_text(result: Fit) -> str:
    name, value = result.binding_limit
    lines = [
        f"plugin            {result.plugin}",
        f"nodes             {result.nodes:,} + {result.surge_nodes:,} surge"
        + (" (the most that fit)" if result.max_nodes is not None else ""),
        f"pod IPs / node    {result.pod_ips_per_node}"
        + ("" if result.max_nodes is not None else " (the most that fit)"),
        f"VNet IPs needed   {result.vnet_ips_needed:,}",
        f"binding limit     {name} = {value:,}",
        f"scale sets        {result.scale_sets}",
    ]
    for budget in result.budgets:
        lines.append(
            f"  {budget.scope:<27} {budget.name:<25} {budget.value:>8,} - {budget.used:>7,} used = {budget.left:>8,} left"
        )
    if result.pod_ips_per_node == 0 or (result.max_nodes == 0):
        lines.append("warning           nothing fits: split the workload across clusters (each its own VNet and hub)")
    return "\n".join(lines)


def _fit(args: argparse.Namespace) -> Fit:
    limits = Limits.default()
    budgets = None
    if args.stack is not None:
        budgets = stack_budgets(checks.stack_name(args.stack), checks.stacks_dir(args.stacks_dir))
    if args.pod_ips is not None:
        if args.plugin != "azure-cni":
            raise AgkError(f"--pod-ips: answers for azure-cni only (not {args.plugin}): use --plugin azure-cni")
        pod_ips = _count(args.pod_ips, "--pod-ips", "use pod IPs per node like 7")
        parse_surge(args.surge, 1, where="--surge")
        return most_nodes(pod_ips, args.surge, limits, infiniband=args.infiniband, budgets=budgets)
    nodes = _count(args.nodes, "--nodes", "use a node count like 7500")
    return most_pod_ips(
        args.plugin,
        nodes,
        parse_surge(args.surge, nodes, where="--surge"),
        limits,
        infiniband=args.infiniband,
        budgets=budgets,
    )


def plan_json(stack: str, stacks_dir: Path) -> dict[str, Any]:
    """The address plan of one stack as `subnet-calc plan --format json` prints it."""
    from modules.stackplan.addresses import plan_stack

    plan = plan_stack(stacks_dir, stack)
    network = plan.network
    vnet = plan.vnet
    # The stack's VNet belongs to its own peered group and, as a spoke, to its hub's (the hub plus every
    # spoke peered with it): Azure's 128,000 counts the group of each VNet with its direct peers.
    group_heads = [stack, *(p for p in vnet.peers if network.vnets[p].kind == "hub")]
    out: dict[str, Any] = {
        "stack": stack,
        "vnets": [vnet.to_dict()],
        "vnet_ip_limit": {"name": "vnet-private-ips", "value": plan.limits["vnet-private-ips"]},
        "peered_group_ips": network.group_ips(stack),
        "peered_groups": [
            {
                "vnet": head,
                "members": [head, *network.vnets[head].peers],
                "ips_needed": network.group_ips(head),
                "limit": {"name": "peered-group-private-ips", "value": plan.limits["peered-group-private-ips"]},
            }
            for head in group_heads
        ],
        "limits": [
            {"name": r.name, "value": r.value, "reason": r.reason, "kind": r.kind, "source": r.source}
            for r in plan.limits.overridden()
        ],
        "warnings": [w.to_dict() for w in plan.warnings],
    }
    return out


def plan_text(doc: dict[str, Any]) -> str:
    lines = [f"stack {doc['stack']}"]
    for vnet in doc["vnets"]:
        lines.append(
            f"VNet {vnet['name']} ({vnet['kind']})  {', '.join(vnet['address_space'])}  "
            f"{vnet['ips_needed']:,} IPs needed, {vnet['utilization']:.1%} of the address space; "
            f"peers: {', '.join(vnet['peers']) or 'none'}"
        )
        lines.append(f"  {'subnet':<20} {'cidr':<18} {'role':<18} {'needed':>9} {'usable':>9}")
        for s in vnet["subnets"]:
            lines.append(
                f"  {s['name']:<20} {s['cidr']:<18} {s['role']:<18} {s['ips_needed']:>9,} {s['usable_ips']:>9,}"
            )
    limit = doc["vnet_ip_limit"]
    for vnet in doc["vnets"]:
        lines.append(f"VNet {vnet['name']}: {vnet['ips_needed']:,} of {limit['value']:,} private IPs ({limit['name']})")
    for group in doc["peered_groups"]:
        lines.append(
            f"peered group of {group['vnet']} ({' + '.join(group['members'])}): {group['ips_needed']:,} of "
            f"{group['limit']['value']:,} private IPs ({group['limit']['name']})"
        )
    for row in doc["limits"]:
        lines.append(f"declared quota: {row['name']} = {row['value']:,} ({row['kind']}): {row['reason']}")
    lines.append("warnings: " + ("none" if not doc["warnings"] else ""))
    lines += [f"  [{w['code']}] {w['message']}" for w in doc["warnings"]]
    return "\n".join(lines)


def plan_markdown(doc: dict[str, Any]) -> str:
    lines = [f"### Address plan: `{doc['stack']}`", ""]
    for vnet in doc["vnets"]:
        lines += [
            f"**VNet `{vnet['name']}`** ({vnet['kind']}): `{', '.join(vnet['address_space'])}`, "
            f"{vnet['ips_needed']:,} IPs needed ({vnet['utilization']:.1%} of the address space)",
            "",
            "| subnet | CIDR | role | needed | usable |",
            "|---|---|---|---:|---:|",
        ]
        lines += [
            f"| `{s['name']}` | `{s['cidr']}` | {s['role']} | {s['ips_needed']:,} | {s['usable_ips']:,} |"
            for s in vnet["subnets"]
        ]
        lines.append("")
    limit = doc["vnet_ip_limit"]
    for vnet in doc["vnets"]:
        lines.append(f"- VNet `{vnet['name']}`: {vnet['ips_needed']:,} of {limit['value']:,} private IPs")
    for group in doc["peered_groups"]:
        lines.append(
            f"- peered group of `{group['vnet']}` ({' + '.join(group['members'])}): {group['ips_needed']:,} of "
            f"{group['limit']['value']:,} private IPs"
        )
    for row in doc["limits"]:
        lines.append(f"- declared quota `{row['name']}` = {row['value']:,} ({row['kind']}): {row['reason']}")
    lines += [f"- :warning: `{w['code']}`: {w['message']}" for w in doc["warnings"]]
    return "\n".join(lines) + "\n"


def run(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "size":
        nodes = _count(args.nodes, "--nodes", "use a node count like 50")
        max_pods = None if args.max_pods is None else _count(args.max_pods, "--max-pods", "use 10 to 250")
        result = size(
            args.plugin,
            nodes,
            max_pods=max_pods,
            surge=parse_surge(args.surge, nodes, where="--surge"),
            infiniband=args.infiniband,
            static_pod_blocks=args.static_blocks,
        )
        if args.format == "json":
            import json  # only here: text output must not pay for it

            print(json.dumps(result.to_dict(), indent=2))
        else:
            print(size_text(result))
        return 0
    if args.command == "fit":
        fit = _fit(args)
        if args.format == "json":
            import json

            print(json.dumps(fit.to_dict(), indent=2))
        else:
            print(fit_text(fit))
        return 0
    stack, stacks_dir = checks.stack_name(args.stack), checks.stacks_dir(args.stacks_dir)
    doc = plan_json(stack, stacks_dir)
    if args.format == "json":
        import json

        print(json.dumps(doc, indent=2))
    else:
        print(plan_markdown(doc) if args.format == "markdown" else plan_text(doc))
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    code = guard(lambda: run(argv))
    try:
        sys.stdout.flush()  # a full disk shows here, while the exit status can still say so
    except OSError as err:
        code = code or status_of(err)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
