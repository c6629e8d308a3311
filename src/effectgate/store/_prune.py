"""One lane's cut for a prune (store/_retention.py): which prefix goes, and what is carried.

The cut of a lane is the longest prefix whose every entry may go or be carried:

* an entry about an operation may go only with its whole operation, and only when
  :func:`prunable_operation` says so; the first one that may not stops the prefix;
* an entry not about an operation goes when it is no longer in force
  (:func:`effectgate.store._retention_rules.entry_in_force`), and is otherwise *carried*:
  restated whole in the prune's checkpoint (:mod:`effectgate._core.prune_checkpoint`);
* an earlier checkpoint (``audit_pruned``) is absorbed: its carried entries still in force are
  carried again, and its recorded anchored heads kept; an anchoring (``audit_anchored``) is
  absorbed too, its heads recorded. An anchoring that stays (the cut of its own lane stopped
  before it) may still name heads of other lanes that their cuts passed: those are recorded
  too (:func:`record_passed_heads`), so every head ever anchored stays explained.

The prefix also stops at an operation whose entries extend past the cut, past the cut-off,
before the lane's anchored head (which stays), and when the checkpoint would carry more than
:data:`MAX_CARRIED` entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from effectgate._core.chain import ChainEntry
from effectgate._core.prune_checkpoint import PruneCheckpoint
from effectgate._core.retention import PruneReport
from effectgate._core.states import TERMINAL, State
from effectgate.store import _sql as sql
from effectgate.store._retention_rules import Superseding, entry_in_force
from effectgate.store._tx import SharedTx

__all__ = [
    "MAX_CARRIED",
    "PRUNE_BATCH",
    "Carry",
    "cut_lane",
    "has_live_continuation",
    "prunable_operation",
    "record_passed_heads",
]

#: Why the prefix stops at an entry about a key with no row: an orphan's divergence (an effect
#: made outside the boundary) stays until someone deals with it. A row a prune removed leaves
#: no such entry: its listed record is accounted by ``pruned_operations``.
NO_ROW = "an entry about an operation with no row"
#: At most this many entries are examined per lane and prune call (run it again for more).
PRUNE_BATCH = 5000
#: At most this many entries are carried in one checkpoint; past it the prefix stops.
MAX_CARRIED = 10_000


def has_live_continuation(tx: SharedTx, scope: str, operation_id: str) -> bool:
    """Whether the operation's continuation chain (docs/continuations.md) still has a member
    that is not terminal: the original of a live retry or compensation, or a member of such a
    chain, stays until the whole chain has settled."""
    live = ", ".join(f"'{s.value}'" for s in State if s not in TERMINAL)
    return bool(
        tx.rows(
            "SELECT 1 FROM continuations c JOIN operations o "
            "ON o.scope = c.scope AND o.operation_id = c.operation_id "
            "WHERE c.scope = ? AND c.original_id = coalesce((SELECT original_id FROM "
            "continuations WHERE scope = ? AND operation_id = ?), ?) "
            f"AND o.state IN ({live}) LIMIT 1",
            (scope, scope, operation_id, operation_id),
        )
    )


def _bound_to_unsealed_run(tx: SharedTx, scope: str, operation_id: str) -> bool:
    return bool(
        tx.rows(
            "SELECT 1 FROM run_effects e JOIN runs r ON r.scope = e.scope AND r.run_id = e.run_id "
            "WHERE e.scope = ? AND e.operation_id = ? AND r.sealed_at IS NULL",
            (scope, operation_id),
        )
    )


def _held(tx: SharedTx, scope: str, operation_id: str) -> bool:
    return bool(
        tx.rows(
            "SELECT 1 FROM legal_holds WHERE released_at IS NULL AND scope = ? "
            "AND (operation_id IS NULL OR operation_id = ?)",
            (scope, operation_id),
        )
    )


def prunable_operation(
    tx: SharedTx,
    scope: str,
    operation_id: str,
    *,
    before: float,
    now: float,
    min_age: Mapping[str, float],
) -> str | None:
    """None if the operation may be pruned, else why not (the prefix stops there)."""
    rows = tx.rows(
        "SELECT state, action, updated_at FROM operations WHERE scope = ? AND operation_id = ?",
        (scope, operation_id),
    )
    if not rows:
        return NO_ROW
    state, action, updated_at = State(str(rows[0][0])), str(rows[0][1]), float(rows[0][2])
    if state not in TERMINAL:
        return f"{scope}:{operation_id} is {state.value} (not terminal)"
    if updated_at >= before:
        return f"{scope}:{operation_id} settled after the cut-off"
    age = min_age.get(action)
    if age is None:
        return f"{scope}:{operation_id}: class {action!r} is not configured"
    if now - updated_at < age:
        return f"{scope}:{operation_id} is inside its class's key retention/horizon"
    if _held(tx, scope, operation_id):
        return f"{scope}:{operation_id} is under a legal hold"
    if _bound_to_unsealed_run(tx, scope, operation_id):
        return f"{scope}:{operation_id} is bound to an unsealed run"
    if has_live_continuation(tx, scope, operation_id):
        return f"{scope}:{operation_id} has a live continuation"
    return None


#: The last entry of one operation (through its index and its row: sql.op_entries).
_LAST_OF_OPERATION = f"SELECT max(seq) FROM ({sql.op_entries('seq')}) t"


@dataclass
class Carry:
    """What one prune's cuts hand to its checkpoint, over every lane."""

    carried: list[ChainEntry] = field(default_factory=list)
    anchored: dict[int, set[tuple[int, str]]] = field(default_factory=dict)
    previous: tuple[int, str] | None = None  # the latest earlier checkpoint absorbed


@dataclass
class _Candidates:
    """What a lane's scan would hand over, each at the seq it comes from (kept if cut)."""

    carried: list[tuple[int, ChainEntry]] = field(default_factory=list)
    heads: list[tuple[int, dict[int, set[tuple[int, str]]]]] = field(default_factory=list)
    checkpoints: list[tuple[int, str]] = field(default_factory=list)


def _anchoring_heads(entry: ChainEntry) -> dict[int, set[tuple[int, str]]]:
    try:
        heads = json.loads(entry.detail_text).get("heads") or {}
        return {int(k): {(int(v["seq"]), str(v["hash"]))} for k, v in dict(heads).items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}  # an anchoring with no readable heads records none


class _Scan:
    """The per-entry rules of one lane's cut (module docstring)."""

    def __init__(
        self, tx: SharedTx, *, before: float, now: float, min_age: Mapping[str, float], already: int
    ) -> None:
        self.tx, self.before, self.now, self.min_age = tx, before, now, min_age
        self.retention = max(min_age.values(), default=0.0)
        self.later = Superseding(tx)  # one read of the superseding kinds for this batch
        self.already = already  # entries other lanes' cuts already carry
        self.found = _Candidates()

    def in_force(self, e: ChainEntry) -> str | None:
        return entry_in_force(
            self.tx,
            e.kind,
            e.detail_text,
            e.scope,
            e.at,
            before=self.before,
            now=self.now,
            retention=self.retention,
            later=self.later,
        )

    def not_about_an_operation(self, e: ChainEntry) -> str | None:
        """None if the entry goes, is carried or is absorbed; else why the prefix stops."""
        if e.kind == "audit_anchored":
            self.found.heads.append((e.seq, _anchoring_heads(e)))
            return None
        if e.kind == "audit_pruned":
            try:
                earlier = PruneCheckpoint.parse(e.detail)
            except ValueError as exc:
                return f"an unreadable checkpoint ({exc})"
            self.found.checkpoints.append((e.seq, e.hash))
            if earlier is not None:
                self.found.heads.append((e.seq, {k: set(v) for k, v in earlier.anchored.items()}))
                for old in earlier.carried:
                    if self.in_force(old) is not None:
                        self.found.carried.append((e.seq, old))
            return self._room()
        if self.in_force(e) is not None:
            self.found.carried.append((e.seq, e))
            return self._room()
        return None

    def _room(self) -> str | None:
        if self.already + len(self.found.carried) > MAX_CARRIED:
            return f"the checkpoint would carry more than {MAX_CARRIED} entries"
        return None


def cut_lane(
    tx: SharedTx,
    lane: int,
    after: int,
    anchored_seq: int,
    *,
    before: float,
    now: float,
    min_age: Mapping[str, float],
    report: PruneReport,
    carry: Carry,
) -> None:
    """Remove the lane's cut (module docstring) and its operations' rows; record it in
    ``report`` and what the checkpoint needs in ``carry``. ``after``: the lane's start."""
    entries = [
        sql.chain_entry_from_row(r)
        for r in tx.rows(
            f"SELECT {sql.CHAIN_COLUMNS} FROM audit_log "
            "WHERE lane = ? AND seq > ? AND seq < ? ORDER BY seq LIMIT ?",
            (lane, after, anchored_seq, PRUNE_BATCH),  # the anchored head itself stays
        )
    ]
    scan = _Scan(tx, before=before, now=now, min_age=min_age, already=len(carry.carried))
    verdicts: dict[tuple[str, str], str | None] = {}
    last_of: dict[tuple[str, str], int] = {}
    cut: tuple[int, str] | None = None
    ops_in_prefix: set[tuple[str, str]] = set()
    reach = 0  # the highest seq any operation in the prefix has an entry at
    for e in entries:
        if e.at >= before:
            report.stopped[lane] = f"seq {e.seq}: after the cut-off"
            break
        if e.operation_id is None:
            why_kept = scan.not_about_an_operation(e)
            if why_kept is not None:
                report.stopped[lane] = f"seq {e.seq}: {why_kept}"
                break
            if reach <= e.seq:
                cut = (e.seq, e.hash)
            continue
        op = (str(e.scope), e.operation_id)
        if op not in verdicts:
            verdicts[op] = prunable_operation(
                tx, op[0], op[1], before=before, now=now, min_age=min_age
            )
            last = tx.rows(_LAST_OF_OPERATION, sql.op_entries_args(*op))[0][0]
            # None only if the row naming this entry was deleted by hand: it reaches here.
            last_of[op] = e.seq if last is None else max(int(last), e.seq)
        why = verdicts[op]
        if why is not None:
            report.stopped[lane] = f"seq {e.seq}: {why}"
            break
        ops_in_prefix.add(op)
        reach = max(reach, last_of[op])
        if reach <= e.seq:  # no operation of the prefix continues past here
            cut = (e.seq, e.hash)
    if cut is None:
        return
    cut_seq = cut[0]
    found = scan.found
    carry.carried.extend(entry for at, entry in found.carried if at <= cut_seq)
    for at, heads in found.heads:
        if at <= cut_seq:
            for head_lane, pairs in heads.items():
                carry.anchored.setdefault(head_lane, set()).update(pairs)
    absorbed = [c for c in found.checkpoints if c[0] <= cut_seq]
    if absorbed and (carry.previous is None or carry.previous[0] < absorbed[-1][0]):
        carry.previous = absorbed[-1]
    gone = [op for op in ops_in_prefix if last_of[op] <= cut_seq]
    tx.write(
        "DELETE FROM audit_log WHERE lane = ? AND seq > ? AND seq <= ?", (lane, after, cut_seq)
    )
    for scope, operation_id in gone:
        tx.write(
            "INSERT INTO pruned_operations "
            "(scope, operation_id, action, state, venue_id, pruned_at) "
            "SELECT scope, operation_id, action, state, venue_id, ? FROM operations "
            "WHERE scope = ? AND operation_id = ? ON CONFLICT DO NOTHING",
            (now, scope, operation_id),
        )
        for table in ("approvals", "approval_requests", "operations"):
            tx.write(
                f"DELETE FROM {table} WHERE scope = ? AND operation_id = ?", (scope, operation_id)
            )
    report.cuts[lane] = cut
    report.entries += sum(1 for e in entries if e.seq <= cut_seq)
    report.operations += len(gone)


def record_passed_heads(
    tx: SharedTx,
    cuts: Mapping[int, tuple[int, str]],
    starts: Mapping[int, tuple[int, str]],
    carry: Carry,
) -> None:
    """Record in ``carry`` the heads that anchorings still in the log name in the span this
    prune cut from each lane (after its old start, up to its cut). An anchoring is an
    operators' entry (no scope, no operation), read through the operation index."""
    for row in tx.rows(
        f"SELECT {sql.CHAIN_COLUMNS} FROM audit_log WHERE scope IS NULL "
        "AND operation_id IS NULL AND kind = 'audit_anchored' ORDER BY seq",
        (),
    ):
        for lane, pairs in _anchoring_heads(sql.chain_entry_from_row(row)).items():
            if lane not in cuts:
                continue
            low, high = starts.get(lane, (0, ""))[0], cuts[lane][0]
            passed = {(seq, h) for seq, h in pairs if low < seq <= high}
            if passed:
                carry.anchored.setdefault(lane, set()).update(passed)
