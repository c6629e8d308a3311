"""``effectgate simulate``: a deterministic simulation of the whole boundary (issue 22).

Deliberately empty: the executor and reconciler import :mod:`effectgate._sim._bugs`, which must
not pull the simulator (and through it the executor) back in.
"""
