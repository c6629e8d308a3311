"""The venue kit: the adapter conformance cases (``effectgate.testing.run_conformance``, the pytest
plugin) and the transport faults they inject.

May import core and execute's adapter protocol; never the store, the gate or a door.
"""
