"""Checks on the user's own setup: ``effectgate verify`` (the guarantees driven against their
classes, policy, controls and adapters), ``effectgate scan`` (calls that bypass the gate), the demo.

May import core, store, execute, adapters, evidence and service; only the CLI imports it.
"""
