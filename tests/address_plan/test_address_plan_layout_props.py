"""Properties of the allocator and the network planner, checked by hypothesis."""

from __future__ import annotations

import itertools
from ipaddress import IPv4Network

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from modules.address_plan.addressing import AddressError
from modules.address_plan.layout import Block, allocate, naive_in_order
from modules.address_plan.limits import Limits
from modules.address_plan.plan import SubnetRequest, VNetSpec, plan_network, plan_vnet
from modules.address_plan.subnet_sizes import usable

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A VNet space: a private prefix /8../24 at an aligned address inside 10.0.0.0/8.
space_prefix = st.integers(min_value=12, max_value=24)


@st.composite
def spaces(draw: st.DrawFn) -> IPv4Network:
    prefix = draw(space_prefix)
    index = draw(st.integers(min_value=0, max_value=2 ** (prefix - 8) - 1))
    return IPv4Network((int(IPv4Network("10.0.0.0/8").network_address) + index * 2 ** (32 - prefix), prefix))


@st.composite
def space_and_blocks(draw: st.DrawFn, fill: float = 1.0) -> tuple[IPv4Network, list[Block]]:
    """A space and blocks whose total aligned size fits it (up to ``fill`` of it)."""
    space = draw(spaces())
    room = int(space.num_addresses * fill)
    blocks: list[Block] = []
    sizes = draw(st.lists(st.integers(min_value=space.prefixlen, max_value=29), min_size=1, max_size=24))
    for i, prefix in enumerate(sizes):
        if 2 ** (32 - prefix) <= room:
            blocks.append(Block(f"b{i:02d}", prefix))
            room -= 2 ** (32 - prefix)
    assume(blocks)
    return space, blocks


def _assert_valid(spaces_: list[IPv4Network], blocks: list[Block], placed: dict[str, IPv4Network]) -> None:
    assert set(placed) >= {b.name for b in blocks}
    nets = sorted(placed.values())
    for a, b in itertools.pairwise(nets):
        assert not a.overlaps(b), (a, b)
    for block in blocks:
        net = placed[block.name]
        assert net.prefixlen == block.prefix
        assert int(net.network_address) % net.num_addresses == 0  # aligned
        assert any(net.subnet_of(s) for s in spaces_)


@PROPS
@given(space_and_blocks())
def test_largest_first_never_fails_when_the_aligned_total_fits(case: tuple[IPv4Network, list[Block]]) -> None:
    space, blocks = case
    placed = allocate([space], blocks)
    _assert_valid([space], blocks, placed)


@PROPS
@given(space_and_blocks(), st.randoms(use_true_random=False))
def test_layout_depends_only_on_names_and_sizes(case: tuple[IPv4Network, list[Block]], rnd: object) -> None:
    space, blocks = case
    shuffled = list(blocks)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert allocate([space], shuffled) == allocate([space], blocks)


def _free_blocks(space: IPv4Network, placed: dict[str, IPv4Network]) -> list[IPv4Network]:
    """The space no block holds, as maximal aligned blocks (an independent oracle: ipaddress's own
    address_exclude, not the allocator's free list)."""
    free = [space]
    for net in placed.values():
        free = [
            piece for block in free for piece in ([block] if not block.overlaps(net) else block.address_exclude(net))
        ]
    return sorted(free)


@st.composite
def pinned_and_more(draw: st.DrawFn) -> tuple[IPv4Network, list[Block], list[Block]]:
    """A laid-out space and new blocks that do fit around it: each takes at most one free block, no
    larger than that block (so a placement exists, and largest-first must find one: for sizes that are
    powers of two, first-fit decreasing packs whenever anything does)."""
    space, blocks = draw(space_and_blocks(fill=0.5))
    free = _free_blocks(space, allocate([space], blocks))
    chosen = draw(st.lists(st.sampled_from(range(len(free))), min_size=1, max_size=6, unique=True))
    more = [
        Block(f"new{i}", draw(st.integers(min_value=free[slot].prefixlen, max_value=29)))
        for i, slot in enumerate(chosen)
        if free[slot].prefixlen <= 29
    ]
    assume(more)
    return space, blocks, more


@PROPS
@given(pinned_and_more())
def test_pinned_allocations_never_move_when_blocks_are_added(
    case: tuple[IPv4Network, list[Block], list[Block]],
) -> None:
    space, blocks, extra = case
    first = allocate([space], blocks)
    second = allocate([space], blocks + extra, pinned=first)
    assert {name: second[name] for name in first} == first
    _assert_valid([space], blocks + extra, second)


@PROPS
@given(space_and_blocks(fill=0.5))
def test_blocks_that_do_not_fit_around_the_pins_are_one_error(case: tuple[IPv4Network, list[Block]]) -> None:
    space, blocks = case
    first = allocate([space], blocks)
    largest_free = min(b.prefixlen for b in _free_blocks(space, first))
    too_big = Block("too-big", largest_free - 1)
    assume(too_big.prefix >= space.prefixlen)
    with pytest.raises(AddressError, match="does not fit"):
        allocate([space], [*blocks, too_big], pinned=first)


@PROPS
@given(space_and_blocks())
def test_in_order_allocation_never_spans_less(case: tuple[IPv4Network, list[Block]]) -> None:
    space, blocks = case
    placed = allocate([space], blocks)
    naive = naive_in_order(space, [b.prefix for b in blocks])
    used = max(int(n.broadcast_address) for n in placed.values()) + 1 - int(space.network_address)
    naive_span = int(naive[-1].broadcast_address) + 1 - int(space.network_address)
    assert naive_span >= used


@PROPS
@given(space_and_blocks(), st.integers(min_value=0, max_value=23))
def test_refuses_when_the_total_does_not_fit(case: tuple[IPv4Network, list[Block]], name: int) -> None:
    space, blocks = case
    overflow = Block(f"x{name}", space.prefixlen)  # a block as large as the space, on top
    with pytest.raises(AddressError, match="does not fit"):
        allocate([space], [*blocks, overflow])


needs = st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=12)


@PROPS
@given(needs)
def test_plan_vnet_chosen_prefix_is_minimal_and_holds_the_need(ips: list[int]) -> None:
    spec = VNetSpec(
        "v",
        "spoke",
        ("10.32.0.0/12",),
        tuple(SubnetRequest(f"s{i}", "gpu-pool", n) for i, n in enumerate(ips)),
        Limits.default(),
    )
    plan, _ = plan_vnet(spec)
    nets = sorted(s.cidr for s in plan.subnets.values())
    for a, b in itertools.pairwise(nets):
        assert not a.overlaps(b)
    for i, need in enumerate(ips):
        sub = plan.subnets[f"s{i}"]
        assert sub.cidr.subnet_of(IPv4Network("10.32.0.0/12"))
        assert sub.usable_ips >= need
        # Minimal: one bit longer would not hold it (or it is already Azure's smallest, /29).
        assert sub.cidr.prefixlen == 29 or usable(sub.cidr.prefixlen + 1) < need


@PROPS
@given(st.lists(st.integers(min_value=16, max_value=24), min_size=2, max_size=30), st.data())
def test_plan_network_refuses_exactly_the_overlapping_spokes(prefixes: list[int], data: st.DataObject) -> None:
    # Spokes placed at random aligned addresses in 10.64.0.0/10: the planner refuses iff two overlap.
    nets = []
    for p in prefixes:
        index = data.draw(st.integers(min_value=0, max_value=2 ** (p - 10) - 1))
        nets.append(IPv4Network((int(IPv4Network("10.64.0.0/10").network_address) + index * 2 ** (32 - p), p)))
    names = tuple(f"s{i}" for i in range(len(nets)))
    limits = Limits.default()
    specs = [VNetSpec("hub", "hub", ("10.0.0.0/16",), (SubnetRequest("jump", "jump", 3),), limits, peers=names)]
    specs += [
        VNetSpec(n, "spoke", (str(net),), (SubnetRequest("a", "gpu-pool", 3),), limits, peers=("hub",))
        for n, net in zip(names, nets, strict=True)
    ]
    overlapping = any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    if overlapping:
        with pytest.raises(AddressError, match="give every VNet its own range"):
            plan_network(specs)
    else:
        assert set(plan_network(specs).vnets) == {"hub", *names}
