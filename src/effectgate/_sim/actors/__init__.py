"""The actors of the simulated world beyond the core workload: each drives one capability
through the real components and checks the invariant it promises (the contract is
:mod:`effectgate._sim.actor`). The mutation catalogue's capability bugs are caught here."""

from __future__ import annotations

import importlib.util

from effectgate._sim.actor import Actor
from effectgate._sim.actors.budgets import Budgets
from effectgate._sim.actors.continuations import Continuations
from effectgate._sim.actors.envelopes import Envelopes
from effectgate._sim.actors.evidence import Evidence
from effectgate._sim.actors.grants import Grants
from effectgate._sim.actors.operator import OperatorActor
from effectgate._sim.actors.preconditions import Preconditions
from effectgate._sim.actors.runs import Runs
from effectgate._sim.actors.speculation import Speculating
from effectgate._sim.actors.tenants import Tenants
from effectgate._sim.actors.venues import VenueModels

__all__ = ["default_actors"]


def default_actors() -> list[Actor]:
    """Fresh actors for one seed (they keep per-seed state). The doors and gateway actors
    need the ``server`` extra (FastAPI, the MCP SDK): on a bare install the world runs
    without them."""
    actors: list[Actor] = [
        Continuations(), Speculating(), Budgets(), Grants(), VenueModels(), OperatorActor(),
        Tenants(), Runs(), Preconditions(), Envelopes()
    ]  # fmt: skip
    actors.append(Evidence())
    if _HAS_DOORS:
        from effectgate._sim.actors.doors import Doors
        from effectgate._sim.actors.gateway import GatewayActor

        actors += [Doors(), GatewayActor()]
    return actors


_HAS_DOORS = all(importlib.util.find_spec(m) is not None for m in ("fastapi", "mcp", "mcp_types"))
