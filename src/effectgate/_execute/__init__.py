"""Execution: the adapter protocol, the gate as a pipeline of stages, the reconciler, operator
actions, alerts and named crash points.

May import core, store and evidence; never service, a door, the simulator, bench or testing.
"""
