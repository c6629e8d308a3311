"""The simulator's tenants actor (issue 38, "no tenant sees another's records"): five scopes
whose names sort next to each other share operation ids on one ledger; each scope's view holds
its own records only. Invariants 1, 2 and 5, each test naming its own."""

from __future__ import annotations

import pytest

from effectgate._sim.actors.tenants import SCOPES, Tenants
from effectgate._sim.simulator import run_seed
from effectgate.store.base import scope_key_range
from simkit import assert_caught_only_with


def test_the_scopes_are_byte_neighbours_of_each_other() -> None:
    """The world is only hostile if a one-character slip in a scope filter lets a neighbour
    in: every other scope's keys sort right next to ``t``'s range, on both sides."""
    low, high = scope_key_range("t")
    neighbours = [f"{s}:ord-1" for s in SCOPES if s != "t"]
    below = [k for k in neighbours if k < low]
    above = [k for k in neighbours if k >= high]
    assert below and above and len(below) + len(above) == len(neighbours)
    assert all(k > "t" for k in below)  # inside ["t", "t;"): a range from the bare scope


def test_clean_code_keeps_every_view_to_its_tenant_and_replays() -> None:
    """Invariants 1, 2 and 5 hold over seeds that drive every tenant step; a seed replays."""
    drove = {"tenant-propose": 0, "tenant-look": 0, "tenant-inject": 0}
    conflicts = 0
    for seed in range(16):
        result = run_seed(seed, actors=[Tenants()])
        assert not result.violations, result.violations
        for line in result.history:
            for kind in drove:
                drove[kind] += f" {kind}: " in line
            conflicts += "changed -> idempotency_conflict" in line
    assert all(drove.values()) and conflicts > 0, (drove, conflicts)
    assert run_seed(3, actors=[Tenants()]).digest == run_seed(3, actors=[Tenants()]).digest


@pytest.mark.parametrize(
    "name", ["tenant_scope_as_prefix", "tenant_get_by_id_only", "tenant_key_range_one_off"]
)
def test_its_mutations_are_caught_only_when_the_tenants_run(name: str) -> None:
    """Invariant 2: without the tenants actor the bug goes unseen (every other actor works in
    one scope each); with it, it is caught and the failing seed replays to the same digest."""
    assert_caught_only_with(name, Tenants, clean_seeds=3, invariants={2})
