"""Simulated venues with real key contracts (models) and their adapters; the actor that drives
them is :mod:`effectgate._sim.actors.venues`."""
