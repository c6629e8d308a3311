"""Mutations of the capabilities the simulator's actors drive (:mod:`effectgate._sim.actors`)."""

from __future__ import annotations

from effectgate._sim.actor import Mutation

__all__ = ["CAPABILITIES"]

CAPABILITIES: tuple[Mutation, ...] = ()
