"""The simulator's grants actor (issue 38, "grants, delegation and revocation"): an operator
grants the agent, the agent delegates narrower grants to a sub-agent (and hostile wider ones,
which must be refused), revocations reach every delegation beneath, and nothing is dispatched
without a live grant chain covering its target. Invariant 6."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from effectgate._sim.actors.grants import Grants
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with

SEEDS = range(40)


def _outcomes() -> Counter[str]:
    seen: Counter[str] = Counter()
    for seed in SEEDS:
        result = run_seed(seed, actors=[Grants()])
        assert not result.violations, (seed, result.violations)
        for line in result.history:
            seen.update(f"wider:{a}" for a in re.findall(r"delegate (\w+) -> refused", line))
            seen["delegated"] += "delegated " in line
            seen["revoked-beneath"] += bool(re.search(r"revoked [2-9]", line))
            seen.update(
                f"sub:{state}:{code}"
                for state, code in re.findall(r"sub-\d+ -> (\w+)(?: \[(\w+))?", line)
            )
    return seen


def test_invariant_6_delegation_is_contained_and_hostile_ones_are_refused_on_every_axis() -> None:
    """Over the seeds every hostile axis is drawn and refused (the actor's check turns an
    accepted one into a violation), contained delegations are made, the sub-agent is served
    under one and refused outside its target, and revocations reach beneath."""
    seen = _outcomes()
    for axis in ("targets", "actions", "expires_at", "hops", "break_glass", "holder"):
        assert seen[f"wider:{axis}"] > 0, (axis, seen)
    assert seen["delegated"] > 0 and seen["revoked-beneath"] > 0, seen
    assert seen["sub:acknowledged:"] > 0 and seen["sub:rejected:grant_target"] > 0, seen
    assert seen["sub:rejected:grant_missing"] > 0, seen


def test_a_seed_replays() -> None:
    assert run_seed(5, actors=[Grants()]).digest == run_seed(5, actors=[Grants()]).digest


@pytest.mark.parametrize(
    "name", ["delegation_wider_accepted", "grant_target_unchecked", "revocation_not_transitive"]
)
def test_its_mutations_are_caught_only_when_the_grants_actor_runs(name: str) -> None:
    """Invariant 6: a planted bug of containment, target coverage or transitive revocation
    goes unseen without the actor and is caught with it; the failing seed replays."""
    assert_caught_only_with(name, Grants, clean_seeds=3)
