"""Benchmarks against the physical floor: ``effectgate bench``.

Every workload prints effectgate's figure next to a *floor* measured in the same run, on the same
store, with the same durability settings: a plain loop of the same SQL (insert the row and commit;
conditional update and commit) with no effectgate code in it. The ratio is the point, not the
absolute number, which depends on the disk and the CPU.

One module per workload: :mod:`.b1` (one caller end to end), :mod:`.b2` (PostgreSQL, several
worker processes), :mod:`.b3` (duplicates and kill -9), :mod:`.b4` (reconciler sweep), and
:mod:`.b5` (the HTTP API under load, when the build has one). :mod:`.common` holds the targets,
counters and the result type; :mod:`.cli` the command.
"""
