"""The simulator's gateway and operator actors (issue 38, "simulate the whole boundary"): the
MCP gateway's handler in front of a simulated upstream tool, and an operator's quarantine,
releases, policy versions and actions taken while a dispatch is in flight. Invariants 1, 3, 5,
6, 7 and 10, each test naming its own."""

from __future__ import annotations

import pytest

from effectgate._sim.actor import Actor
from effectgate._sim.actors.gateway import GatewayActor
from effectgate._sim.actors.operator import OperatorActor
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with

SEEDS = range(3)


def _lines(actor: type[GatewayActor | OperatorActor], seeds: range, mark: str) -> list[str]:
    return [line for s in seeds for line in run_seed(s, actors=[actor()]).history if mark in line]


class TestGatewayActor:
    def test_clean_code_holds_every_invariant_through_the_gateway(self) -> None:
        """Invariants 1, 3, 5, 6 on a few seeds, the gateway alone; the same seed gives the
        same digest twice (no socket, no wall clock, no minted id)."""
        for seed in SEEDS:
            alone = run_seed(seed, actors=[GatewayActor()])
            assert alone.violations == [], (seed, alone.violations)
            assert run_seed(seed, actors=[GatewayActor()]).digest == alone.digest

    def test_calls_are_answered_and_hostile_calls_refused(self) -> None:
        """Invariant 6: charges are acknowledged (some left uncertain by the upstream's faults)
        and every hostile call is an error result."""
        lines = _lines(GatewayActor, range(8), " gw-")
        text = " ".join(lines)
        assert "error=False acknowledged" in text, lines
        assert "fault=twice" in text and "fault=timeout" in text, lines
        hostile = [x for x in lines if " gw-hostile: " in x]
        assert hostile and all("error=False" not in x for x in hostile), hostile


class TestOperatorActor:
    def test_clean_code_holds_every_invariant_under_the_operator(self) -> None:
        """Invariants 6, 7, 10 on a few seeds, the operator alone; replays byte for byte."""
        for seed in SEEDS:
            alone = run_seed(seed, actors=[OperatorActor()])
            assert alone.violations == [], (seed, alone.violations)
            assert run_seed(seed, actors=[OperatorActor()]).digest == alone.digest

    def test_it_quarantines_releases_and_acts_mid_dispatch(self) -> None:
        """Invariants 7, 10: across a few seeds rows are taken over and released, and each
        operator action is run while a request is in flight."""
        text = " ".join(_lines(OperatorActor, range(8), " op-"))
        assert "-> quarantined" in text and "released -> validated" in text, text
        for mid in ("kill", "policy", "revoke"):
            assert f"mid={mid} " in text, mid


@pytest.mark.parametrize(
    ("name", "actor", "invariant"),
    [
        ("gateway_duplicate_key_ignored", GatewayActor, 6),
        ("kill_switch_unrecorded", OperatorActor, 7),
        ("take_over_records_nothing", OperatorActor, 10),
    ],
)
def test_its_mutations_are_caught_only_when_the_actor_runs(
    name: str, actor: type[Actor], invariant: int
) -> None:
    """A planted bug of the gateway or the operator's actions is caught by its actor alone;
    the failing seed replays to the same digest under the mutation."""
    assert_caught_only_with(name, actor, clean_seeds=3, invariants={invariant})
