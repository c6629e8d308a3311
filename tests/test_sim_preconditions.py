"""The simulator's preconditions actor (issue 38, "approvals bound to fingerprints and
preconditions"): an approved order goes out only against the venue state its approver saw;
the position moving in between sends it back for a new approval. Invariant 6."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from effectgate._sim.actors import default_actors
from effectgate._sim.actors.preconditions import Preconditions
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with


def test_invariant_6_an_approval_holds_only_for_the_state_it_was_given_against() -> None:
    """Over the seeds: approved orders are sent, orders whose instrument moved after their
    approval come back (``precondition_changed``), and no check of the actor fails."""
    seen: Counter[str] = Counter()
    for seed in range(16):
        result = run_seed(seed, actors=[Preconditions()])
        assert not result.violations, (seed, result.violations)
        for line in result.history:
            if " pc-" not in line:
                continue
            seen.update(re.findall(r"\[(precondition_\w+)", line))
            seen["sent"] += bool(
                re.search(r"dispatch -> acknowledged|pc-\d+ -> acknowledged", line)
            )
    assert seen["precondition_changed"] > 0 and seen["sent"] > 0, seen
    assert "preconditions" in {a.name for a in default_actors()}


def test_a_seed_replays() -> None:
    one, two = run_seed(7, actors=[Preconditions()]), run_seed(7, actors=[Preconditions()])
    assert one.digest == two.digest


@pytest.mark.parametrize("name", ["precondition_bindings_unread"])
def test_its_mutations_are_caught_only_when_the_actor_runs(name: str) -> None:
    """Invariant 6: a precondition stage that reads no binding goes unseen without the actor
    and is caught with it."""
    assert_caught_only_with(name, Preconditions, clean_seeds=3)
