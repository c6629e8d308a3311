"""The tamper-evident audit log: hash chain, verification, offline evidence bundles.

Every entry commits to the previous entry of its *lane*::

    digest = sha256(canonical JSON of [lane, at, scope, operation_id, kind, detail_text])
    hash   = sha256(prev_hash + digest)

``prev_hash`` links each entry to its predecessor in seq order, so editing one breaks its own
hash, and deleting, inserting or moving one breaks the link of the entry after it; the store
records where each lane's chain reached (SQLite also in each operations row it journals or
settles, see ``Store.audit_anchor_mismatches``), so truncating the tail is visible too.
``seq`` is deliberately outside the digest: the links already fix the order, and it lets
PostgreSQL assign ``seq`` and compute the link inside the writing statement (no extra round
trip). An attacker who can
rewrite the whole database can re-chain it; anchor the head that ``effectgate audit verify``
prints somewhere they cannot write (a ticket, a log service) and pass it back with
``--expect-head``.

Lanes let a store avoid serialising every writer on one chain head. SQLite serialises writers
anyway and uses lane 0 only. An operation's entries always share one lane (see
:func:`lane_for`), so its trail is one contiguous sub-chain that an evidence bundle can carry.

:func:`verify_entries` and :func:`verify_bundle` need no store: a bundle written by
:func:`export_bundle` verifies offline with only this module and :mod:`effectgate._core.chain`,
where the digest, the link hash, lanes and :class:`ChainEntry` live (re-exported here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from effectgate._core.chain import (
    GENESIS,
    ChainEntry,
    chain_hash,
    content_digest,
    lane_for,
    rechain,
)
from effectgate._core.prune_checkpoint import PruneCheckpoint

if TYPE_CHECKING:
    from effectgate.store.roles import Store

BUNDLE_FORMAT: Final = "effectgate-evidence/1"

__all__ = [
    "BUNDLE_FORMAT",
    "GENESIS",
    "ChainEntry",
    "Finding",
    "VerifyResult",
    "chain_hash",
    "content_digest",
    "export_bundle",
    "lane_for",
    "rechain",
    "verify_bundle",
    "verify_entries",
    "verify_store",
]


@dataclass(frozen=True, slots=True)
class Finding:
    """One place the chain does not verify. ``problem``: ``edited``, ``broken_link`` (an entry
    deleted, inserted or moved before this one), ``out_of_order``, ``truncated``, ``head``,
    ``anchor`` (a recorded entry is gone or different), ``checkpoint`` (a prune's checkpoint
    does not hold, or does not state where the pruned lanes start)."""

    seq: int | None
    lane: int
    problem: str
    message: str


@dataclass
class VerifyResult:
    """``covered``: anchored heads a prune removed that its checkpoint records, as
    ``(lane, seq, checkpoint_seq)``: explained, not findings."""

    checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    heads: dict[int, tuple[int, str]] = field(default_factory=dict)
    covered: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "checked": self.checked,
            "heads": {str(k): {"seq": s, "hash": h} for k, (s, h) in self.heads.items()},
            "covered": [
                {"lane": lane, "seq": seq, "checkpoint_seq": by} for lane, seq, by in self.covered
            ],
            "findings": [
                {"seq": f.seq, "lane": f.lane, "problem": f.problem, "message": f.message}
                for f in self.findings
            ],
        }


def verify_entries(
    entries: Iterable[ChainEntry],
    *,
    heads: Mapping[int, tuple[int, str]] | None = None,
    start: Mapping[int, str] | None = None,
) -> VerifyResult:
    """Check every link of every lane, in seq order; report where each break is.

    ``heads``: the stored (or anchored) last ``(seq, hash)`` per lane, to catch a truncated
    tail. ``start``: the ``prev_hash`` each lane's first entry must name (default
    :data:`GENESIS`, i.e. the entries start at the beginning of the log).
    """
    result = VerifyResult()
    last: dict[int, tuple[int, str]] = {}
    wanted = {lane: seq for lane, (seq, _) in (heads or {}).items()}
    at_head: dict[int, str] = {}  # the hash found at each recorded head's seq
    for entry in entries:
        result.checked += 1
        lane = entry.lane
        prev_seq, prev_hash = last.get(lane, (0, (start or {}).get(lane, GENESIS)))
        where = f"seq {entry.seq} (lane {lane})"
        if entry.seq <= prev_seq:
            result.findings.append(
                Finding(entry.seq, lane, "out_of_order", f"{where} comes after seq {prev_seq}")
            )
        if chain_hash(entry.prev_hash, entry.digest) != entry.hash:
            result.findings.append(
                Finding(
                    entry.seq,
                    lane,
                    "edited",
                    f"{where}: content does not match its hash (the entry was edited)",
                )
            )
        if entry.prev_hash != prev_hash:
            before = f"seq {prev_seq}" if prev_seq else "the start of the log"
            result.findings.append(
                Finding(
                    entry.seq,
                    lane,
                    "broken_link",
                    f"{where} does not follow {before}: an entry between them was deleted or "
                    "inserted, or the entries were reordered",
                )
            )
        if wanted.get(lane) == entry.seq:
            at_head[lane] = entry.hash
        last[lane] = (entry.seq, entry.hash)
    result.heads = dict(last)
    # The log may have grown past a head read earlier (live writers); it must still contain it.
    for lane, (seq, head_hash) in sorted((heads or {}).items()):
        mine = last.get(lane)
        if mine is None or mine[0] < seq:
            result.findings.append(
                Finding(
                    seq,
                    lane,
                    "truncated",
                    f"lane {lane}: the recorded head is seq {seq} but the log ends at "
                    f"{mine[0] if mine else 'nothing'} (entries were deleted from the tail)",
                )
            )
        elif at_head.get(lane) != head_hash:
            result.findings.append(
                Finding(
                    seq,
                    lane,
                    "head",
                    f"lane {lane}: the entry at the recorded head seq {seq} does not carry the "
                    f"head's hash {head_hash[:16]} (the log was rewritten)",
                )
            )
    return result


def _checkpoints(
    pruned: list[ChainEntry],
    starts: Mapping[int, tuple[int, str]],
    result: VerifyResult,
    key: bytes | None,
) -> list[tuple[int, PruneCheckpoint]]:
    """Check every prune checkpoint in the log, and that the latest states exactly where the
    pruned lanes start (``audit_checkpoints``); the parsed checkpoints, by seq."""
    parsed: list[tuple[int, PruneCheckpoint]] = []
    for entry in pruned:
        try:
            checkpoint = PruneCheckpoint.parse(entry.detail)
        except ValueError as exc:
            result.findings.append(Finding(entry.seq, entry.lane, "checkpoint", str(exc)))
            continue
        if checkpoint is None:
            continue  # written before checkpoints carried entries: its cuts are all it says
        for why in checkpoint.problems(key=key):
            result.findings.append(
                Finding(entry.seq, entry.lane, "checkpoint", f"checkpoint seq {entry.seq}: {why}")
            )
        parsed.append((entry.seq, checkpoint))
    if starts and not pruned:
        result.findings.append(
            Finding(None, 0, "checkpoint", "lanes were pruned but no checkpoint is in the log")
        )
    elif parsed and pruned[-1].seq == parsed[-1][0] and dict(parsed[-1][1].starts) != starts:
        seq, latest = parsed[-1]
        result.findings.append(
            Finding(
                seq,
                0,
                "checkpoint",
                f"the checkpoint at seq {seq} states the lanes start at "
                f"{dict(sorted(latest.starts.items()))} but the store's checkpoint rows say "
                f"{dict(sorted(starts.items()))} (moved to hide a deletion?)",
            )
        )
    return parsed


def verify_store(
    store: Store,
    *,
    expect_heads: Mapping[int, tuple[int, str]] | None = None,
    page: int = 5000,
    key: bytes | None = None,
) -> VerifyResult:
    """Verify the whole audit log of ``store`` against its stored heads (and anchored ones),
    and every prune checkpoint in it (signatures too, with the anchor ``key``)."""
    pruned: list[ChainEntry] = []

    def entries() -> Iterable[ChainEntry]:
        after = 0
        while True:
            batch = store.audit_entries(after_seq=after, limit=page)
            pruned.extend(e for e in batch if e.kind == "audit_pruned")
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].seq

    heads = store.audit_heads()
    # A pruned lane starts from its checkpoint: its first entry follows the last removed one.
    lane_starts = store.audit_starts()
    starts = {lane: h for lane, (_, h) in lane_starts.items()}
    result = verify_entries(entries(), heads=heads, start=starts)
    checkpoints = _checkpoints(pruned, lane_starts, result, key)
    reported = {f.seq for f in result.findings}
    for seq, why in store.audit_anchor_mismatches():
        if seq not in reported:  # a head found wrong above is reported once
            result.findings.append(Finding(seq, 0, "anchor", why))
    # An anchored head must still be in the log (it may have grown past it), or be one a
    # prune removed and its checkpoint records.
    for lane, (seq, want) in sorted((expect_heads or {}).items()):
        found = store.audit_entries(after_seq=seq - 1, until_seq=seq, lane=lane, limit=1)
        if found and found[0].hash == want:
            continue
        start = lane_starts.get(lane)
        if not found and start is not None and seq <= start[0]:
            by = next((s for s, c in reversed(checkpoints) if c.explains(lane, seq, want)), None)
            if by is not None:
                result.covered.append((lane, seq, by))
                continue
            why = (
                f"lane {lane}: the anchored head seq {seq} {want[:16]} was pruned (the lane "
                f"starts after seq {start[0]}) and no checkpoint records it"
            )
        else:
            why = f"lane {lane}: the anchored head seq {seq} {want[:16]} is not in the log"
        result.findings.append(Finding(seq, lane, "head", why))
    return result


def export_bundle(store: Store, operation_id: str, *, scope: str = "default") -> dict[str, Any]:
    """An evidence bundle for one operation: its full entries and the chain segment linking them.

    The segment carries only ``(seq, prev_hash, digest, hash)`` for entries of other operations
    between the first and last entry of this one, so the bundle proves contiguity without
    disclosing them. :func:`verify_bundle` checks it offline.
    """
    own = store.audit_entries(scope=scope, operation_id=operation_id, limit=100_000)
    if not own:
        from effectgate.errors import OperationNotFound

        raise OperationNotFound(f"no audit entries for {operation_id!r} in scope {scope!r}")
    lane = own[0].lane
    segment = store.audit_entries(
        after_seq=own[0].seq - 1, until_seq=own[-1].seq, lane=lane, limit=10_000_000
    )
    row = store.get(scope, operation_id)
    return {
        "format": BUNDLE_FORMAT,
        "scope": scope,
        "operation_id": operation_id,
        "operation": row.to_dict() if row is not None else None,
        "entries": [e.to_dict() for e in own],
        "segment": [
            {"seq": e.seq, "prev_hash": e.prev_hash, "digest": e.digest, "hash": e.hash}
            for e in segment
        ],
        "lane": lane,
        "head": dict(
            zip(("seq", "hash"), store.audit_heads().get(lane, (0, GENESIS)), strict=True)
        ),
    }


def verify_bundle(bundle: Mapping[str, Any]) -> VerifyResult:
    """Verify an evidence bundle with no store: every entry hashes into a linked segment."""
    result = VerifyResult()

    def fail(seq: int | None, problem: str, message: str) -> VerifyResult:
        result.findings.append(Finding(seq, int(bundle.get("lane", 0) or 0), problem, message))
        return result

    if bundle.get("format") != BUNDLE_FORMAT:
        return fail(None, "format", f"not an {BUNDLE_FORMAT} bundle")
    try:
        entries = [ChainEntry.from_dict(e) for e in bundle["entries"]]
        segment = [
            (int(s["seq"]), str(s["prev_hash"]), str(s["digest"]), str(s["hash"]))
            for s in bundle["segment"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        return fail(None, "format", f"malformed bundle: {exc}")
    by_seq = {seq: (prev, digest, h) for seq, prev, digest, h in segment}
    for entry in entries:
        result.checked += 1
        if (entry.scope, entry.operation_id) != (bundle["scope"], bundle["operation_id"]):
            fail(entry.seq, "foreign", f"seq {entry.seq} belongs to another operation")
        link = by_seq.get(entry.seq)
        if link is None:
            fail(entry.seq, "broken_link", f"seq {entry.seq} is not in the chain segment")
        elif (
            entry.digest != link[1]
            or chain_hash(entry.prev_hash, entry.digest) != entry.hash
            or (entry.prev_hash, entry.hash) != (link[0], link[2])
        ):
            fail(entry.seq, "edited", f"seq {entry.seq}: content does not match the chain")
    previous: tuple[int, str] | None = None
    for seq, prev, digest, h in segment:
        if chain_hash(prev, digest) != h:
            fail(seq, "edited", f"segment seq {seq}: hash does not match")
        if previous is not None and (seq <= previous[0] or prev != previous[1]):
            fail(seq, "broken_link", f"segment seq {seq} does not follow seq {previous[0]}")
        previous = (seq, h)
    if previous is not None:
        result.heads = {int(bundle.get("lane", 0) or 0): previous}
    return result
