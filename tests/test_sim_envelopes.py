"""The simulator's envelopes actor (issue 38, staged authority): a class's ceiling,
allowlist, rate and exposure window hold at the dispatch, an operator moves them by recorded
steps, and a widening names evidence the boundary measured. Invariant 12."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from effectgate._sim.actors import default_actors
from effectgate._sim.actors.envelopes import Envelopes
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with


def test_invariant_12_what_an_envelope_allows_is_never_overdrawn() -> None:
    """Over the seeds every axis is narrowed and lifted again, orders are held by the
    envelope and sent later, an order off the allowlist is refused, invented evidence is
    refused, and no check of the actor fails."""
    seen: Counter[str] = Counter()
    for seed in range(12):
        result = run_seed(seed, actors=[Envelopes()])
        assert not result.violations, (seed, result.violations)
        for line in result.history:
            if " env-" not in line:
                continue
            seen.update(f"narrowed:{a}" for a in re.findall(r"env-tighten: (\w+) ->", line))
            seen.update(f"lifted:{a}" for a in re.findall(r"env-widen: (\w+) -> open", line))
            seen["held"] += line.count("-> validated [held]")
            seen["refused"] += line.count("-> rejected")
            seen["retried"] += bool(re.search(r"env-retry: env-\d+ -> acknowledged", line))
            seen["invented"] += "invented evidence -> refused" in line
    for axis in ("max_value", "allowed_targets", "rate", "exposure"):
        assert seen[f"narrowed:{axis}"] > 0, (axis, seen)
    assert sum(v for k, v in seen.items() if k.startswith("lifted:")) > 0, seen
    assert seen["held"] > 0 and seen["refused"] > 0 and seen["invented"] > 0, seen
    assert seen["retried"] > 0, seen
    assert "envelopes" in {a.name for a in default_actors()}


def test_a_seed_replays() -> None:
    assert run_seed(4, actors=[Envelopes()]).digest == run_seed(4, actors=[Envelopes()]).digest


@pytest.mark.parametrize(
    "name",
    ["envelope_ceiling_ignored", "envelope_windows_uncounted", "widening_evidence_unverified"],
)
def test_its_mutations_are_caught_only_when_the_actor_runs(name: str) -> None:
    """Invariant 12: an envelope that stops checking its ceiling or its windows, or a widening
    that takes its evidence as named, goes unseen without the actor and is caught with it."""
    assert_caught_only_with(name, Envelopes, clean_seeds=3)
