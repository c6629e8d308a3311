"""``effectgate simulate``: a deterministic simulation of the whole boundary (issue 22).

Deliberately empty, so importing a submodule pulls in only what it needs. No production module
imports anything from here: :mod:`effectgate._sim._bugs` re-introduces known bugs from outside, by
patching named methods of the executor and the reconciler for a test's block.
"""
