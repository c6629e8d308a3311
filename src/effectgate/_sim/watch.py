"""The per-step whole-ledger checks, made cheap: one slim read of every row per step, and the
audit chain verified from where the last check left it.

Invariants 1 and 10 (a terminal row never changes) are judged on every row, every step, from
the sweep's slim projection (:meth:`~effectgate.store.roles.Sweep.page_entries`: key, state,
venue id and times, no intent or effect to decode). The same read tells which rows changed
since the last step (their entry differs), and invariant 4 (no write-off inside the horizon)
is judged on the full rows of those only. The scheduler still runs the whole-ledger checker
of invariant 4 at the end of each seed, so a change the slim entry cannot show (a ``detail``
rewritten with no new ``updated_at``) is still caught, one phase later.

Invariant 8 (the audit chain verifies): :meth:`LedgerWatch.audit` verifies only the entries
appended since its last call, each lane linked to the last entry it verified there (so a new
entry chained to anything else is caught at once); the scheduler verifies the whole log, its
heads and anchors at the end of each seed, which is where an edit of an old entry shows.
"""

from __future__ import annotations

from effectgate._core.intent import Registry
from effectgate._core.states import State
from effectgate._evidence.audit import verify_entries
from effectgate._evidence.invariants import (
    Violation,
    terminal_entries_unchanged,
    write_offs_inside_horizon,
)
from effectgate.store.base import LedgerEntry
from effectgate.store.roles import Store

__all__ = ["LedgerWatch"]

#: Far above any seed's row count: the read is of the whole ledger.
EVERY_ROW = 1_000_000


class LedgerWatch:
    """What the per-step ledger checks remember between steps (one per seed)."""

    def __init__(self) -> None:
        self.seen_terminal: dict[str, tuple[str, str | None]] = {}
        self._last: dict[str, LedgerEntry] = {}
        self._audit_seq = 0  # the last audit entry verified
        self._audit_links: dict[int, str] = {}  # per lane, the hash the next entry must name

    def check(self, store: Store, registry: Registry) -> list[Violation]:
        """Invariants 1 and 10 on every row; invariant 4 on the ``failed`` rows that changed."""
        entries = store.page_entries(None, EVERY_ROW)
        found = terminal_entries_unchanged(entries, self.seen_terminal)
        last = self._last
        changed = [e.op_key for e in entries if e.state is State.FAILED and last.get(e.op_key) != e]
        self._last = {e.op_key: e for e in entries}
        rows = []
        for key in changed:
            scope, _, operation_id = key.partition(":")
            row = store.get(scope, operation_id)
            if row is not None:
                rows.append(row)
        found += write_offs_inside_horizon(rows, registry)
        return found

    @property
    def entries(self) -> dict[str, LedgerEntry]:
        """Every row's slim entry by key, as the last :meth:`check` read them."""
        return self._last

    def audit(self, store: Store) -> list[Violation]:
        """Invariant 8 on the audit entries appended since the last call."""
        new = store.audit_entries(after_seq=self._audit_seq, limit=EVERY_ROW)
        result = verify_entries(new, start=self._audit_links)
        if new:
            self._audit_seq = new[-1].seq
            self._audit_links.update({lane: h for lane, (_, h) in result.heads.items()})
        return [
            Violation(8, f"audit lane {f.lane} seq {f.seq}: {f.problem}: {f.message}")
            for f in result.findings
        ]
