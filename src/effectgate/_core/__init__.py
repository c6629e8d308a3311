"""The pure core: intents and their strict parse, canonical form and fingerprint, the state table,
policy, controls, budgets and reservations maths, continuations, speculation values, the audit
chain entry.

No I/O. Imports nothing of effectgate but itself and ``effectgate.errors``.
"""
