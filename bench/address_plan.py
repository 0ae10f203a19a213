"""Address-planning figures for `make bench`: CLI start-up, planning speed, packing quality."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from ipaddress import IPv4Network
from pathlib import Path

from modules.address_plan.layout import naive_in_order
from modules.address_plan.limits import Limits
from modules.address_plan.plan import SubnetRequest, VNetSpec, plan_network

ROOT = Path(__file__).resolve().parents[1]
RUNS = 20


def _median_s(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _process_s(argv: list[str]) -> float:
    return _median_s(lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT), RUNS)


def startup_ratio() -> tuple[float, float, float]:
    """(subnet-calc size seconds, bare interpreter seconds, ratio): medians of 20 runs each.

    The baseline is the same interpreter (the project's .venv), so both pay the same site start-up.
    The command's modules are byte-compiled first, as a regular install leaves them: otherwise a
    PYTHONDONTWRITEBYTECODE environment would time the compiler, not the command.
    """
    import compileall

    for path in ("agk/__init__.py", "agk/subnet_calc.py", "modules/__init__.py", "modules/errors.py"):
        compileall.compile_file(str(ROOT / path), quiet=2)
    compileall.compile_dir(str(ROOT / "modules" / "address_plan"), quiet=2)
    exe = Path(sys.executable)
    calc = exe.parent / "subnet-calc"
    base = _process_s([str(exe), "-c", "import ipaddress"])
    size = _process_s([str(calc), "size", "--plugin", "azure-cni", "--nodes", "4999", "--max-pods", "250"])
    return size, base, size / base


def hub_and_spokes(spokes: int, subnets: int) -> list[VNetSpec]:
    """A hub and ``spokes`` /20 spokes, each needing ``subnets`` subnets of mixed sizes."""
    limits = Limits.default()
    names = tuple(f"spoke-{i:04d}" for i in range(spokes))
    hub = VNetSpec(
        "hub",
        "hub",
        ("10.0.0.0/20",),
        (SubnetRequest("jump", "jump", 4), SubnetRequest("AzureBastionSubnet", "bastion", 59, longest_prefix=26)),
        limits,
        peers=names,
    )
    out = [hub]
    for i, name in enumerate(names):
        base = IPv4Network((int(IPv4Network("10.1.0.0/20").network_address) + i * 4096, 20))
        needs = [(7 * (j + 1) ** 2) % 700 + 3 for j in range(subnets)]
        out.append(
            VNetSpec(
                name,
                "spoke",
                (str(base),),
                tuple(SubnetRequest(f"s{j}", "gpu-pool", n) for j, n in enumerate(needs)),
                limits,
                peers=("hub",),
                # Each cluster its own service range: 1,024 /20s of the shared address space 100.64.0.0/10.
                other_ranges=(("cluster.service_cidr", f"100.{64 + i * 16 // 256}.{i * 16 % 256}.0/20"),),
            )
        )
    return out


def plan_seconds(spokes: int = 1000, subnets: int = 10, runs: int = 5) -> float:
    specs = hub_and_spokes(spokes, subnets)
    return _median_s(lambda: plan_network(specs), runs)


def prod_utilization() -> tuple[str, str]:
    """prod-7500's address span: the planner's largest-first layout vs in-order `cidrsubnets`."""
    from modules.stackplan.addresses import cluster_subnets, plan_stack  # pydantic and the stack model: only here
    from modules.stackplan.config import ClusterStack
    from modules.stackplan.pools import plan_pools

    plan = plan_stack(ROOT / "stacks", "prod-7500")
    vnet = plan.vnet
    assert isinstance(plan.config, ClusterStack)
    space = sum(n.num_addresses for n in vnet.address_space)
    # The same prefixes in the order the stack declares the subnets (control plane first, GPU
    # pools last), placed the `cidrsubnets` way: each at the next aligned address.
    order = [s.name for s in cluster_subnets(plan.config.cluster, plan_pools(plan.config.cluster, vnet.limits))]
    naive = naive_in_order(vnet.address_space[0], [vnet.subnets[n].cidr.prefixlen for n in order])
    naive_span = int(naive[-1].broadcast_address) - int(naive[0].network_address) + 1
    fits = all(any(n.subnet_of(s) for s in vnet.address_space) for n in naive)
    planned = (
        f"{vnet.allocated:,} addresses in {', '.join(map(str, vnet.address_space))} ({space:,}); "
        f"{vnet.ips_needed:,} needed = {vnet.utilization:.1%} utilization"
    )
    naive_text = (
        f"span {naive_span:,} addresses from {naive[0].network_address} "
        f"({vnet.ips_needed / naive_span:.1%} utilization); "
        + ("fits the declared space" if fits else "does not fit the declared space")
    )
    return planned, naive_text


PREVIOUS_UTILIZATION = 0.77
"""prod-7500 before pod IPs became a budget: 204,967 IP configurations in 266,240 addresses."""


def prod_limits() -> list[tuple[str, str]]:
    """prod-7500 against Azure's hard limits, from the same plan `subnet-calc plan` prints."""
    from agk.subnet_calc import plan_json

    doc = plan_json("prod-7500", ROOT / "stacks")
    (vnet,) = doc["vnets"]
    hub = next(g for g in doc["peered_groups"] if g["vnet"] == "hub")
    limit = doc["vnet_ip_limit"]["value"]
    return [
        ("prod-7500 IP configurations in its VNet", f"{vnet['ips_needed']:,} of {limit:,} (hard limit; was 204,967)"),
        (
            "hub peered group (hub + every spoke)",
            f"{hub['ips_needed']:,} of {hub['limit']['value']:,} (hard limit; prod-7500 + hub was 205,030)",
        ),
        ("prod-7500 address utilization", f"{vnet['utilization']:.3f} (target >= 0.90; was {PREVIOUS_UTILIZATION})"),
    ]


def rows() -> list[tuple[str, str]]:
    size, base, ratio = startup_ratio()
    planned, naive = prod_utilization()
    return [
        *prod_limits(),
        (
            "subnet-calc size start-up / python -c 'import ipaddress'",
            f"{ratio:.2f}x ({size * 1000:.1f} ms / {base * 1000:.1f} ms, median of {RUNS}; target <= 2.0)",
        ),
        ("plan 1,000 spokes x 10 subnets", f"{plan_seconds():.3f} s (median of 5; target < 0.5 s)"),
        ("prod-7500 largest-first layout", planned),
        ("prod-7500 naive in-order (cidrsubnets)", naive),
    ]
