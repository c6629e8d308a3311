"""The simulator's door actor (issue 38 item 1): an agent proposes through the HTTP door's
ASGI app and the MCP door's server, in process; hostile bodies are refused and change nothing
but the audit log. Invariants 1, 2, 3 and 6, each test naming its own."""

from __future__ import annotations

import re

import pytest

from effectgate._sim.actors.doors import Doors
from effectgate._sim.actors.gateway import GatewayActor
from effectgate._sim.simulator import run_seed
from simkit import assert_caught_only_with

SEEDS = range(5)


def _lines(seed: int) -> list[str]:
    return [line for line in run_seed(seed, actors=[Doors()]).history if "-propose: " in line]


class TestDoorActor:
    def test_clean_code_holds_every_invariant_through_the_doors(self) -> None:
        """Invariants 1, 2, 3, 6 on a few seeds, the doors alone and among the default actors;
        the same seed gives the same digest twice (no wall clock, no socket, no race)."""
        for seed in SEEDS:
            alone = run_seed(seed, actors=[Doors()])
            assert alone.violations == [], (seed, alone.violations)
            assert run_seed(seed, actors=[Doors()]).digest == alone.digest
            assert run_seed(seed).violations == [], seed

    def test_both_doors_propose_and_refuse_hostile_bodies(self) -> None:
        """Invariant 6: across a few seeds each door acknowledges charges and refuses every
        kind of hostile body it is sent (HTTP 400; MCP an error result)."""
        lines = [line for seed in range(16) for line in _lines(seed)]
        http = [x for x in lines if " http-propose: " in x]
        mcp = [x for x in lines if " mcp-propose: " in x]
        assert any("-> 201 acknowledged" in x for x in http), http
        assert any("-> 200 acknowledged" in x for x in mcp), mcp
        refused = " ".join(lines)
        for name in ("duplicate-key", "nan", "float-amount", "unknown-field"):
            assert re.search(rf"{name} -> 400 ", refused), name
        for name in ("float-amount", "nan", "int-amount", "unknown-field"):
            assert re.search(rf"{name} -> error=True ", refused), name

    @pytest.mark.parametrize("name", ["http_float_accepted", "mcp_float_coerced"])
    def test_its_mutations_are_caught_only_when_the_doors_run(self, name: str) -> None:
        """Invariant 6: a float in the money field let through a door is caught by the door
        actor alone; the failing seed replays to the same digest under the mutation."""
        # The gateway is an MCP door too: its hostile calls send floats as well.
        assert_caught_only_with(name, (Doors, GatewayActor), clean_seeds=4, invariants={6})
