"""Adapters protocol, the executor (gate), the reconciler and crash points."""
