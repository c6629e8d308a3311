"""Evidence: the hash-chained audit log and its verification, anchoring of chain heads, and the
shared invariant checkers.

May import core and store (and execute's adapter protocol); never execute's gate, service or doors.
"""
