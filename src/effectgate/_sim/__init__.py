"""``effectgate simulate``: a deterministic simulation of the whole boundary (issues 22, 38).

Deliberately empty, so importing a submodule pulls in only what it needs. No production module
imports anything from here: the mutation catalogue (:mod:`effectgate._sim.mutations`) plants
its bugs from outside, by patching named production functions and methods for one run.
"""
