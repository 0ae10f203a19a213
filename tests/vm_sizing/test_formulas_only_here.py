"""No size follows the node or pod count outside modules/vm_sizing/formulas.py (issue 22, item 3).

A lint over the source (modules/, infra/, agk/, policies/): arithmetic (+ - * / // % **) or an ordering
comparison with a node or pod count as an operand is a formula driven by that count. Each place that does it
for a reason other than sizing a component (the address plan, scale-set packing, counting GPUs, validating
input) is listed below with that reason; anything else fails, naming the file, line and expression.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORMULAS = "modules/vm_sizing/formulas.py"
# The names the code gives node and pod counts (pools, plans, the boot context, the add-ons spec).
COUNTS = frozenset(
    {
        "nodes",
        "peak_nodes",
        "sizing_nodes",
        "max_nodes",
        "system_nodes",
        "gpu_nodes",
        "pods",
    }
)
ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)

# (file, function) -> why its node-count arithmetic is not a component's size.
ALLOWED = {
    ("modules/address_plan/fit.py", "most_pod_ips"): "address plan: addresses a node count takes",
    ("modules/address_plan/fit.py", "most_nodes"): "address plan: nodes that fit a VNet",
    ("modules/address_plan/subnet_sizes.py", "parse_surge"): "address plan: surge nodes from a percentage",
    ("modules/address_plan/subnet_sizes.py", "_azure_cni"): "address plan: IPs per node",
    ("modules/address_plan/subnet_sizes.py", "_overlay"): "address plan: the CNI's maxPods range",
    ("modules/address_plan/subnet_sizes.py", "_pod_subnet"): "address plan: pod subnet blocks",
    ("modules/address_plan/subnet_sizes.py", "size"): "address plan: input checks and nodes + surge",
    ("modules/stackplan/pools.py", "peak_nodes"): "the count itself: maximum + surge",
    ("modules/stackplan/pools.py", "subnet_ips"): "address plan: IP configurations a pool takes",
    ("modules/stackplan/pools.py", "gpus"): "counting GPUs, not sizing",
    ("modules/stackplan/prepare.py", "cluster_egress"): "counting the hosts a NAT gateway serves",
    ("modules/stackplan/egress.py", "public_ips_for"): "address plan: NAT public IPs against Azure's per-IP limit",
    ("modules/stackplan/config.py", "_max_nodes"): "input check: max_nodes >= nodes",
    ("modules/vm_sizing/scale_sets.py", "split_pool"): "packing nodes into scale sets",
    ("modules/cluster/spec.py", "addons_spec"): "input check: at least one system node",
    ("modules/cluster/spec.py", "_dns"): "placement: hard anti-affinity when the system pool has a node per replica",
    ("modules/cluster/spec.py", "_teams"): "counting a team's GPUs for its quota",
    ("modules/cluster/objects/queues.py", "nominal"): "counting a team's GPUs in a pool for its queue",
    ("modules/cluster/spec.py", "_balloons"): "input check: balloons fit their pool",
    ("modules/cluster/spec.py", "retest_per_run"): "a rate (nodes re-tested per run), not a size",
    ("modules/cluster/objects/gang.py", "example"): "the example gang's GPUs (a workload, not a size)",
    ("modules/cluster/scripts/remediate_xid.py", "cap_of"): "the remediation's fencing cap, computed in-cluster",
    ("agk/plan/blast.py", "_gpus"): "counting the GPUs a change touches",
}


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def count_arithmetic() -> dict[tuple[str, str], list[str]]:
    """Every expression that does arithmetic or ordering on a node or pod count, by (file, function)."""
    found: dict[tuple[str, str], list[str]] = {}
    for folder in ("modules", "infra", "agk", "policies"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == FORMULAS:
                continue
            tree = ast.parse(path.read_text(), rel)
            owner: dict[int, str] = {}
            for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
                for sub in ast.walk(fn):
                    owner[id(sub)] = fn.name  # the innermost function wins: ast.walk visits outer ones first
            for node in ast.walk(tree):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ARITHMETIC):
                    operands = [node.left, node.right]
                elif isinstance(node, ast.Compare) and any(isinstance(op, ORDERING) for op in node.ops):
                    operands = [node.left, *node.comparators]
                else:
                    continue
                if any(_name(o) in COUNTS for o in operands):
                    key = (rel, owner.get(id(node), "<module>"))
                    found.setdefault(key, []).append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_node_count_arithmetic_outside_the_formulas_module() -> None:
    found = count_arithmetic()
    stray = [line for key, lines in found.items() if key not in ALLOWED for line in lines]
    assert not stray, "node-count arithmetic outside modules/vm_sizing/formulas.py (move it there):\n" + "\n".join(
        stray
    )


def test_every_allowed_place_still_does_it() -> None:
    """An entry whose arithmetic moved or went away is removed, so the list stays the true exceptions."""
    assert sorted(set(ALLOWED) - set(count_arithmetic())) == []


def test_the_lint_sees_the_formulas_module_itself() -> None:
    """The check is not vacuous: the formulas module, where the arithmetic belongs, is full of it."""
    tree = ast.parse((ROOT / FORMULAS).read_text())
    hits = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ARITHMETIC) and {_name(n.left), _name(n.right)} & COUNTS
    ]
    assert len(hits) >= 10
