"""Evidence: legal holds, retention and pruning with a checkpoint, anchoring the audit head,
and signed receipts (docs/evidence.md), driven through the real components on a ledger of
the actor's own (:mod:`effectgate._sim.actors.evidence_ledger` says why and what it holds).

Steps: ``ev-propose`` (one to three orders of ``ev_order`` in two scopes; one in six for an
unlisted instrument, refused with proof, one in six with the request or its reply lost),
``ev-hold`` (a legal hold placed on a row or a whole scope, or an active one lifted),
``ev-age`` (the clock past the horizon, a reconcile pass, and half the time past the retention
window), ``ev-anchor`` (the heads checkpointed to an anchor outside the store), ``ev-prune``
(``effectgate._execute.retention.prune``: verify, anchor, prune, anchor, verify), and the
hostile ``ev-prune-held`` (a hold on the oldest prunable row, then a prune), ``ev-prune-young``
(two orders a few seconds apart, then a prune with the cut-off at now: the first is inside the
window), ``ev-receipt`` (every revision of a final row's receipt, of this ledger or the
world's, signed with an Ed25519 key drawn from the seed and verified offline), ``ev-tamper``
(each member of a receipt handed out forged in turn) and ``ev-contradict`` (a record made at
the venue under a final row's key, a reconcile pass, and the receipt again: it must supersede
the one handed out before).

Checked: after a prune, every row that went was terminal, settled before the cut-off and
longer ago than the retention window (invariant 1: a retry under a key still retained must be
recognised; the design has no number for "pruning never touches rows inside the window", so
it goes under the invariant it protects), under no legal hold (invariant 8: the audit log is
append-only and a prune is its one bounded exception; holds have no number of their own), and
went whole with its trail; every active hold's entry that went is carried in the checkpoint
(8). After every step of this actor: the chain verifies against the anchor, and every head
ever anchored is still in the log with its hash or explained by a checkpoint (8). Every
receipt verifies offline, its revisions each name the one they supersede, a receipt handed
out earlier is still among the revisions, every forgery is refused (8), and a final state the
venue contradicted yields a superseding receipt (invariant 4: a written-off row that appears
later is reported; the receipt is where the report reaches a verifier).
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from effectgate._core.prune_checkpoint import PruneCheckpoint
from effectgate._core.receipt_statement import receipt_id
from effectgate._core.states import TERMINAL, State
from effectgate._evidence.anchor import anchor_heads, verify_against_anchors
from effectgate._evidence.invariants import Violation
from effectgate._evidence.receipt_signing import (
    ReceiptSigner,
    check_receipts,
    key_id,
    verify_receipt,
)
from effectgate._evidence.signed_receipts import issue_receipts
from effectgate._execute.reconciler import ReconcileReport
from effectgate._execute.retention import prune
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.actors.evidence_ledger import (
    EV_ACTION,
    HORIZON,
    KEY_RETENTION,
    LISTED,
    LOOKBACK,
    SCOPES,
    EvidenceLedger,
)
from effectgate.errors import ConfigError, ReceiptInvalid
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["Evidence"]

ARCHIVIST = "sim-archivist"
EVERY = 1_000_000


class Evidence:
    """The evidence steps and their checks (module docstring)."""

    name = "evidence"

    def __init__(self) -> None:
        self.ev: EvidenceLedger | None = None
        self.world_clock: Any = None
        self.builds = 0  # processes the world built (each after the first is a restart)
        self.built_at = 0
        self.signer: ReceiptSigner | None = None
        self.keys: dict[str, Ed25519PublicKey] = {}
        self.anchor_key = b""
        self.serial = 0
        #: Active holds in placement order: (hold id, scope, operation id or None).
        self.holds: list[tuple[str, str, str | None]] = []
        self.issued: list[dict[str, Any]] = []  # every receipt handed out
        self.current: dict[str, str] = {}  # op key -> id of the current receipt handed out
        self.step_violations: list[Violation] = []
        self.dirty = False
        self.counts: Counter[str] = Counter()

    def steps(self) -> Steps:
        return (
            ("ev-propose", 3), ("ev-hold", 2), ("ev-age", 2), ("ev-anchor", 1), ("ev-prune", 2),
            ("ev-prune-held", 1), ("ev-prune-young", 1), ("ev-receipt", 2), ("ev-tamper", 1),
            ("ev-contradict", 1),
        )  # fmt: skip

    def configure(self, spec: ProcessSpec) -> None:
        self.builds += 1  # this ledger restarts with the world's process (see _ledger)

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def _ledger(self, world: Any, rng: random.Random) -> EvidenceLedger:
        if self.ev is None:
            self.world_clock = world.clock
            self.ev = EvidenceLedger(world.ledger, world.clock)
            # Keys from the seed's generator: no OS randomness (Ed25519 signing is itself
            # deterministic, RFC 8032).
            private = Ed25519PrivateKey.from_private_bytes(rng.getrandbits(256).to_bytes(32))
            self.signer = ReceiptSigner(private, key_id(private.public_key()))
            self.keys = {self.signer.key_id: private.public_key()}
            self.anchor_key = rng.getrandbits(256).to_bytes(32)
            self.built_at = self.builds
        elif self.built_at != self.builds:
            self.ev.crash()
            self.built_at = self.builds
        return self.ev

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        ev = self._ledger(world, rng)
        self.dirty = True
        area = "receipts" if "receipt" in kind or kind in ("ev-tamper", "ev-contradict") else (
            "anchoring" if kind == "ev-anchor" else "retention"
        )  # fmt: skip
        self.counts[area] += 1
        if kind == "ev-propose":
            return self._propose(ev, rng, rng.randint(1, 3))
        if kind == "ev-hold":
            return self._hold(ev, rng)
        if kind == "ev-age":
            return self._age(ev, rng)
        if kind == "ev-anchor":
            checkpoint, _ = anchor_heads(
                ev.store, [ev.anchor], key=self.anchor_key, clock=ev.clock, by=ARCHIVIST
            )
            return f"anchored {len(checkpoint.heads)} lane(s)"
        if kind == "ev-prune":
            return self._prune(ev, before=ev.clock() - rng.choice((0.0, 60.0, 300.0)))
        if kind == "ev-prune-held":
            return self._prune_held(ev, rng)
        if kind == "ev-prune-young":
            line = self._propose(ev, rng, 1)
            self.world_clock.advance(rng.randint(1, 30))
            line += "; " + self._propose(ev, rng, 1)
            return f"{line}; {self._prune(ev, before=ev.clock())}"
        if kind == "ev-receipt":
            if rng.random() < 0.3:
                return "world " + self._receipt(world.store, rng)
            return self._receipt(ev.store, rng)
        if kind == "ev-tamper":
            return self._tamper(ev, rng)
        return self._contradict(ev, rng)

    # --- the workload ---------------------------------------------------------------------

    def _propose(self, ev: EvidenceLedger, rng: random.Random, count: int) -> str:
        out = []
        for _ in range(count):
            self.serial += 1
            scope, op_id = SCOPES[rng.randrange(len(SCOPES))], f"ev-{self.serial:04d}"
            listed = rng.random() >= 1 / 6
            intent = {
                "intent_version": "1",
                "action": EV_ACTION,
                "instrument": rng.choice(sorted(LISTED)) if listed else "DELISTED",
                "quantity": rng.randint(1, 99),
            }
            lost = rng.random() < 1 / 6
            if lost:
                ev.venue.fail_next(1, after_apply=rng.random() < 0.5)
            try:
                row = ev.gate.submit(EV_ACTION, op_id, intent, scope=scope)
            finally:
                ev.venue.fail_next(0, after_apply=False)
            out.append(f"{scope}:{op_id}{' lost' if lost else ''} -> {row.state.value}")
        return "; ".join(out)

    def _rows(self, store: Store) -> list[Operation]:
        """Every row, oldest first (the order of their first audit entries)."""
        rows = store.list_operations(limit=EVERY)
        return sorted(rows, key=lambda r: (r.created_at, r.op_key))

    def _place(self, ev: EvidenceLedger, scope: str, op_id: str | None) -> str:
        hold = ev.store.place_hold(
            scope, op_id, by=ARCHIVIST, reason="sim: litigation", now=ev.clock()
        )
        self.holds.append((hold.hold_id, scope, op_id))  # its id is random: never printed
        return f"held {scope}:{op_id or '*'}"

    def _hold(self, ev: EvidenceLedger, rng: random.Random) -> str:
        if len(self.holds) >= 2 or (self.holds and rng.random() < 0.4):
            hold_id, scope, op_id = self.holds.pop(rng.randrange(len(self.holds)))
            ev.store.release_hold(hold_id, by=ARCHIVIST, reason="sim: closed", now=ev.clock())
            return f"lifted {scope}:{op_id or '*'}"
        rows = self._rows(ev.store)
        if rows and rng.random() < 0.75:
            row = rows[rng.randrange(len(rows))]
            return self._place(ev, row.scope, row.operation_id)
        return self._place(ev, SCOPES[rng.randrange(len(SCOPES))], None)

    def _reconcile(self, ev: EvidenceLedger) -> ReconcileReport:
        return ev.reconciler.run_once()

    def _age(self, ev: EvidenceLedger, rng: random.Random) -> str:
        # Past the horizon first and reconciled there (inside the venue's listing window), so
        # an uncertain row settles before it could age out of the listing.
        seconds = int(HORIZON) + rng.randint(1, 60)
        self.world_clock.advance(seconds)
        report = self._reconcile(ev)
        line = f"+{seconds}s reconcile written_off={report.written_off}"
        now = ev.clock()
        for row in ev.store.list_operations(state=State.SUBMITTED, limit=EVERY):
            # Every uncertain row is past its horizon now: a pass must have settled it, the
            # ones older than the venue's listing window too (by a probe of its key).
            if row.submitted_at is not None and now - row.submitted_at > HORIZON:
                self.step_violations.append(
                    Violation(11, f"{row.op_key} still uncertain {now - row.submitted_at:g}s "
                                  f"after submission (horizon {HORIZON:g}s) after a pass")
                )  # fmt: skip
        if rng.random() < 0.5:
            more = int(KEY_RETENTION) + rng.randint(1, 60)
            self.world_clock.advance(more)
            line += f"; +{more}s"
        return line

    # --- pruning --------------------------------------------------------------------------

    def _prune_held(self, ev: EvidenceLedger, rng: random.Random) -> str:
        """Hold the oldest row that could go, then prune: it must stay."""
        line = ""
        if not any(self._prunable(ev, r) for r in self._rows(ev.store)):
            more = int(KEY_RETENTION) + rng.randint(1, 60)
            self.world_clock.advance(more)
            line = f"+{more}s; "
        held = {(s, o) for _, s, o in self.holds}
        rows = [
            r
            for r in self._rows(ev.store)
            if self._prunable(ev, r)
            and (r.scope, None) not in held
            and (r.scope, r.operation_id) not in held
        ]
        if not rows:
            return line + "nothing to hold"
        row = rows[0]
        line += self._place(ev, row.scope, row.operation_id if rng.random() < 0.6 else None)
        return f"{line}; {self._prune(ev, before=ev.clock())}"

    def _prunable(self, ev: EvidenceLedger, row: Operation) -> bool:
        return row.state in TERMINAL and ev.clock() - row.updated_at >= KEY_RETENTION

    def _prune(self, ev: EvidenceLedger, *, before: float) -> str:
        store, now = ev.store, ev.clock()
        rows = {e.op_key: e for e in store.page_entries(None, EVERY)}
        entries = store.audit_entries(after_seq=0, limit=EVERY)
        active = {h for h, _, _ in self.holds}
        in_force = {
            (e.lane, e.seq, e.hash)
            for e in entries
            if e.kind == "legal_hold_placed" and json.loads(e.detail_text).get("hold_id") in active
        }
        try:
            report, result = prune(
                store,
                ev.registry,
                [ev.anchor],
                before=before,
                by=ARCHIVIST,
                key=self.anchor_key,
                clock=ev.clock,
            )
        except ConfigError as exc:  # the chain did not verify against the anchor
            self.step_violations.append(Violation(8, f"the prune refused: {exc.message}"))
            return f"prune refused {exc.code}"
        self.step_violations += [
            Violation(8, f"after the prune: lane {f.lane} seq {f.seq}: {f.problem}: {f.message}")
            for f in result.findings
        ]
        after = store.audit_entries(after_seq=0, limit=EVERY)
        kept = {e.op_key for e in store.page_entries(None, EVERY)}
        self.step_violations += self._judge_prune(
            rows, kept, entries, after, before=before, now=now, in_force=in_force
        )
        return (
            f"cut-off -{now - before:g}s: pruned {report.operations} op(s) {report.entries} "
            f"entries, carried {report.carried}; {len(kept)} row(s) left"
        )

    def _judge_prune(
        self,
        rows: dict[str, Any],
        kept: set[str],
        entries: list[Any],
        after: list[Any],
        *,
        before: float,
        now: float,
        in_force: set[tuple[int, int, str]],
    ) -> list[Violation]:
        found: list[Violation] = []
        held_ops = {f"{s}:{o}" for _, s, o in self.holds if o is not None}
        held_scopes = {s for _, s, o in self.holds if o is None}
        for key in sorted(set(rows) - kept):
            e = rows[key]
            if key in held_ops or key.partition(":")[0] in held_scopes:
                found.append(Violation(8, f"{key} was pruned under a legal hold"))
            elif e.state not in TERMINAL:
                found.append(Violation(1, f"{key} was pruned while {e.state.value}"))
            elif e.updated_at >= before:
                found.append(Violation(8, f"{key} settled after the cut-off and was pruned"))
            elif now - e.updated_at < KEY_RETENTION:
                found.append(
                    Violation(1, f"{key} was pruned {now - e.updated_at:g}s after it settled, "
                                 f"inside its {KEY_RETENTION:g}s key retention")
                )  # fmt: skip
        # An operation goes whole or stays whole: its trail with its row.
        trail_before = Counter(f"{e.scope}:{e.operation_id}" for e in entries if e.operation_id)
        trail_after = Counter(f"{e.scope}:{e.operation_id}" for e in after if e.operation_id)
        for key, n in sorted(trail_before.items()):
            if key not in rows:  # no row before this prune: not this prune's to judge
                continue
            left = trail_after.get(key, 0)
            if (key in kept and left != n) or (key not in kept and left):
                row = "stayed" if key in kept else "went"
                found.append(
                    Violation(8, f"{key}: {n - left} of its {n} entries went, its row {row}")
                )
        # Every active hold's entry that went is carried in the newest checkpoint.
        still = {(e.lane, e.seq, e.hash) for e in after}
        carried = _carried(after)
        for lane, seq, digest in sorted(in_force - still):
            if (lane, seq, digest) not in carried:
                found.append(
                    Violation(8, f"the entry of an active hold (lane {lane} seq {seq}) was "
                                 "pruned and its checkpoint does not carry it")
                )  # fmt: skip
        return found

    # --- receipts -------------------------------------------------------------------------

    def _receipt(self, store: Store, rng: random.Random) -> str:
        finals = sorted(
            (r for r in store.list_operations(limit=EVERY) if r.state in TERMINAL),
            key=lambda r: r.op_key,
        )
        if not finals:
            return "no final row"
        # Half the time a row the reconciler found the venue contradicting, if there is one:
        # its receipt must then have been superseded (judged in _judge_receipts).
        diverged = {d.op_key for d in store.list_divergences(limit=EVERY)}
        contradicted = [r for r in finals if r.op_key in diverged]
        if contradicted and rng.random() < 0.5:
            finals = contradicted
        row = finals[rng.randrange(len(finals))]
        docs = self._issue(store, row)
        return f"receipt {row.op_key} {row.state.value} revisions={len(docs)}"

    def _issue(self, store: Store, row: Operation) -> list[dict[str, Any]]:
        if self.signer is None:  # pragma: no cover - _ledger made it before any step
            raise RuntimeError("no signer")
        clock = self.world_clock
        docs = issue_receipts(
            store, row.scope, row.operation_id, self.signer, now=clock(), history=True
        )
        self.step_violations += self._judge_receipts(docs, row.op_key)
        self.issued += docs
        return docs

    def _judge_receipts(self, docs: list[dict[str, Any]], key: str) -> list[Violation]:
        try:
            verified = check_receipts(docs, self.keys)
        except ReceiptInvalid as exc:
            return [Violation(8, f"{key}: a receipt just issued does not verify: {exc}")]
        found: list[Violation] = []
        for i, v in enumerate(verified):
            want = "final" if i == 0 else "contradicted"
            if v.revision != i or v.op_key != key or v.standing != want:
                found.append(Violation(8, f"{key}: revision {i} reads {v.revision} {v.standing}"))
            if i and v.supersedes != verified[i - 1].receipt_id:
                found.append(Violation(4, f"{key}: revision {i} does not name the one before"))
            nxt = verified[i + 1].receipt_id if i + 1 < len(verified) else None
            if v.superseded_by != nxt:
                found.append(Violation(4, f"{key}: revision {i} is not marked superseded"))
        earlier = self.current.get(key)
        if earlier is not None and earlier not in {v.receipt_id for v in verified}:
            found.append(
                Violation(4, f"{key}: the receipt handed out earlier is no longer among its "
                             "revisions (neither current nor superseded)")
            )  # fmt: skip
        if verified:
            self.current[key] = verified[-1].receipt_id
        return found

    def _tamper(self, ev: EvidenceLedger, rng: random.Random) -> str:
        if not self.issued:
            line = self._receipt(ev.store, rng)
            if not self.issued:
                return line
        doc = self.issued[rng.randrange(len(self.issued))]
        refused = 0
        for what, forged in _forgeries(doc):
            try:
                verify_receipt(forged, self.keys)
            except ReceiptInvalid:
                refused += 1
                continue
            self.step_violations.append(Violation(8, f"a receipt with {what} forged verified"))
        return f"forged {doc['statement']['operation']['op_key']}: {refused} refused"

    def _contradict(self, ev: EvidenceLedger, rng: random.Random) -> str:
        """The venue shows an effect under a final row's key: the receipt must be superseded."""
        now = ev.clock()
        # Only rows settled lately: the record made now leaves the venue's listing before the
        # row may be pruned (a row pruned while its record is listed comes back as an orphan).
        fresh = KEY_RETENTION - LOOKBACK - HORIZON
        rows = [
            r
            for r in self._rows(ev.store)
            if r.state in (State.FAILED, State.ACKNOWLEDGED) and now - r.updated_at < fresh
        ]
        if not rows:
            return "nothing final to contradict"
        row = rows[rng.randrange(len(rows))]
        before = self._issue(ev.store, row)
        ev.venue.inject_record(row.op_key)
        report = self._reconcile(ev)
        new = sorted(kind for kind, key, _, _ in report.new_divergences if key == row.op_key)
        after = self._issue(ev.store, row)
        if new and (
            len(after) <= len(before) or after[-1]["statement"]["standing"] != "contradicted"
        ):
            self.step_violations.append(
                Violation(4, f"{row.op_key}: the venue contradicts its {row.state.value} "
                             f"({', '.join(new)}) but no receipt supersedes the one handed out")
            )  # fmt: skip
        return (
            f"{row.op_key} {row.state.value} contradicted [{' '.join(new)}]: revisions "
            f"{len(before)} -> {len(after)}"
        )

    # --- the checks -----------------------------------------------------------------------

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        if self.ev is None or not (self.dirty or final):
            return found
        self.dirty = False
        store = self.ev.store
        result, _ = verify_against_anchors(store, [self.ev.anchor], key=self.anchor_key)
        found += [
            Violation(8, f"evidence ledger lane {f.lane} seq {f.seq}: {f.problem}: {f.message}")
            for f in result.findings
        ]
        found += self._anchors_explained(store)
        if final:
            for doc in self.issued:  # offline: nothing a later step did can change them
                try:
                    verify_receipt(doc, self.keys)
                except ReceiptInvalid as exc:
                    found.append(Violation(8, f"a receipt handed out no longer verifies: {exc}"))
        return found

    def _anchors_explained(self, store: Store) -> list[Violation]:
        """Every head ever anchored is in the log with its hash, or a checkpoint records it."""
        if self.ev is None:  # pragma: no cover - checked by the caller
            return []
        entries = store.audit_entries(after_seq=0, limit=EVERY)
        at = {(e.lane, e.seq): e.hash for e in entries}
        starts = store.audit_starts()
        checkpoints = []
        for e in entries:
            if e.kind == "audit_pruned":
                try:
                    parsed = PruneCheckpoint.parse(e.detail)
                except ValueError as exc:
                    return [Violation(8, f"checkpoint seq {e.seq} does not parse: {exc}")]
                if parsed is not None:
                    checkpoints.append(parsed)
        found = []
        for lane, seq, digest in self.ev.anchor.heads():
            if (lane, seq) in at:
                if at[(lane, seq)] != digest:
                    found.append(Violation(8, f"anchored head lane {lane} seq {seq} changed"))
            elif not (
                seq <= starts.get(lane, (0, ""))[0]
                and any(c.explains(lane, seq, digest) for c in checkpoints)
            ):
                found.append(
                    Violation(8, f"the anchored head lane {lane} seq {seq} was pruned and no "
                                 "checkpoint explains it")
                )  # fmt: skip
        return found


def _carried(entries: list[Any]) -> set[tuple[int, int, str]]:
    """What the newest checkpoint in ``entries`` carries, as ``(lane, seq, hash)``."""
    for e in reversed(entries):
        if e.kind == "audit_pruned":
            try:
                parsed = PruneCheckpoint.parse(e.detail)
            except ValueError:
                return set()
            return set() if parsed is None else {(c.lane, c.seq, c.hash) for c in parsed.carried}
    return set()


def _forgeries(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``doc`` with one member changed after signing, member by member (and one forger who
    also fixes ``receipt_id`` to match the edited statement)."""

    def edit(path: tuple[str, ...], value: object) -> dict[str, Any]:
        forged = copy.deepcopy(doc)
        target = forged
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        return forged

    statement = doc["statement"]
    other = "acknowledged" if statement["state"] != "acknowledged" else "failed"
    yield "statement.state", edit(("statement", "state"), other)
    yield "statement.venue_id", edit(("statement", "venue_id"), "V-forged")
    flipped = "final" if statement["standing"] == "contradicted" else "contradicted"
    yield "statement.standing", edit(("statement", "standing"), flipped)
    yield "statement.supersedes", edit(("statement", "supersedes"), "0" * 64)
    yield "audit_head.seq", edit(("audit_head", "seq"), int(doc["audit_head"]["seq"]) + 1)
    yield "audit_head.hash", edit(("audit_head", "hash"), "0" * 64)
    yield "issued_at", edit(("issued_at",), "2000-01-01T00:00:00.000000Z")
    yield "receipt_id", edit(("receipt_id",), "0" * 64)
    yield "key_id", edit(("key_id",), "0" * 16)
    yield "signature", edit(("signature",), base64.b64encode(bytes(64)).decode("ascii"))
    forged = edit(("statement", "state"), other)
    forged["receipt_id"] = receipt_id(forged["statement"])
    yield "statement.state with a matching receipt_id", forged
