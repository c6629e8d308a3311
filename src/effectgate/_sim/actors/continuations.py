"""Continuations (seed 004): retries of an original, allowed only with proof.

The step picks a settled or unsettled row of the ledger and asks for a retry through the real
:class:`~effectgate._execute.continuations.ContinuationService` on the first process, naming
the chain as observed. The proof is what an agent would claim: the venue refused it
(``permanent_absence`` with ``venue_refusal`` evidence). Only a row the venue really refused
(``failed`` with its proof) may be continued; every other attempt (applied, written off,
uncertain, never sent) must be refused, and an admitted continuation is dispatched by the
second process, never by the one that dispatched the original.

Checked (invariant 9): every continuation that reached the venue continued an original the
venue refused and never applied, within the class's declared retries, and none was sent by
the original's process.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from effectgate._core.continuation import ContinuationProof, Ground
from effectgate._core.effects import is_continuation_id
from effectgate._core.intent import Registry
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._core.states import State
from effectgate._evidence.invariants import Violation
from effectgate._execute.continuations import ContinuationService
from effectgate._sim.actor import ProcessSpec, Steps
from effectgate._sim.checks import WRITE_OFF
from effectgate.errors import ContinuationRefused, EffectgateError

__all__ = ["RETRIES", "Continuations"]

#: Retries the simulated order classes declare.
RETRIES = 1
RETRYABLE = frozenset({"submit_order", "cancel_order"})
BY = "sim-continuer"


class Continuations:
    """The ``continue`` step and invariant 9's check."""

    name = "continuations"

    def __init__(self) -> None:
        self.admitted = 0
        self.refused = 0
        self.checked = 0  # requests already judged
        self.continued: list[str] = []  # originals with an admitted continuation, in order
        self.step_violations: list[Violation] = []

    def steps(self) -> Steps:
        return (("continue", 9),)

    def configure(self, spec: ProcessSpec) -> None:
        classes = [spec.registry.get(n) for n in spec.registry.names()]
        spec.registry = Registry(
            [dataclasses.replace(c, retries=RETRIES) if c.name in RETRYABLE else c
             for c in classes]
        )  # fmt: skip

    def step(self, kind: str, world: Any, rng: random.Random) -> str:
        rows = sorted(
            (r for r in world.store.list_operations(limit=100_000)
             if r.scope == "default" and not is_continuation_id(r.operation_id)),
            key=lambda r: r.op_key,
        )  # fmt: skip
        if not rows:
            return "nothing to continue"
        failed = [r for r in rows if r.state is State.FAILED]
        refused = [r for r in failed if not _written_off(r.detail)]
        written_off = [r for r in failed if _written_off(r.detail)]
        pick = rng.random()
        if self.continued and pick < 0.25:
            # Again: the same original once more (its retries are bounded).
            row = world.store.get("default", self.continued[rng.randrange(len(self.continued))])
        elif written_off and pick < 0.5:
            # Absence past the horizon is no proof at a venue whose read view is not
            # authoritative: this must be refused.
            row = written_off[rng.randrange(len(written_off))]
        elif refused and pick < 0.75:
            row = refused[rng.randrange(len(refused))]  # the one case a retry is allowed
        else:
            row = rows[rng.randrange(len(rows))]
        # A proof that no longer holds must be refused, even where a fresh one would do.
        expired = row.op_key in {r.op_key for r in refused} and rng.random() < 0.35
        service = ContinuationService(world.gate)
        chain = service.chain(row.operation_id)
        digest = chain.predecessor_digest or ""
        proof = ContinuationProof(
            Ground.PERMANENT_ABSENCE,
            Proof(EvidenceKind.VENUE_REFUSAL, reference=row.op_key, note="refused, it says"),
            world.clock() + (-1.0 if expired else 60.0),
        )
        before = len(world.adapter.requests)
        try:
            cont = service.retry(
                row.operation_id, proof=proof, by=BY, seq=chain.next_seq, predecessor=digest
            )
        except ContinuationRefused as exc:
            self.refused += 1
            return f"{row.operation_id} ({row.state.value}) -> refused {exc.reason}"
        except EffectgateError as exc:
            return f"{row.operation_id} ({row.state.value}) -> error {exc.code}"
        self.admitted += 1
        if row.operation_id not in self.continued:
            self.continued.append(row.operation_id)
        if expired:
            self.step_violations.append(Violation(9, f"{cont.op_key} admitted on an expired proof"))
        if row.state is not State.FAILED or _written_off(row.detail):
            self.step_violations.append(
                Violation(9, f"{cont.op_key} admitted for {row.op_key} ({row.state.value}) "
                          f"on no proof: {row.detail or 'no detail'}")
            )  # fmt: skip
        if len(world.adapter.requests) > before:
            self.step_violations.append(
                Violation(9, f"{cont.op_key} was sent by the process that sent its original")
            )
        out = cont.state.value
        if cont.state is State.VALIDATED:
            try:
                out = world.peer.dispatch(cont.operation_id).state.value
            except EffectgateError as exc:
                out = f"error {exc.code}"
        return f"{row.operation_id} ({row.state.value}) -> {cont.operation_id} {out}"

    def check(self, world: Any, *, final: bool) -> list[Violation]:
        found, self.step_violations = self.step_violations, []
        requests = world.adapter.requests
        new, self.checked = requests[self.checked :], len(requests)
        for r in new:
            scope, _, operation_id = r.operation_key.partition(":")
            if not is_continuation_id(operation_id):
                continue
            link = world.store.continuation_of(scope, operation_id)
            if link is None:
                found.append(Violation(9, f"{r.operation_key} reached the venue unlinked"))
                continue
            original = world.store.get(scope, link.original_id)
            key = f"{scope}:{link.original_id}"
            sent = world.venue.effects_for(key) - world.injected_at.get(key, 0)
            refused = (
                original is not None
                and original.state is State.FAILED
                and not _written_off(original.detail)
            )
            if not refused or sent > 0:
                state = original.state.value if original is not None else "missing"
                found.append(
                    Violation(
                        9,
                        f"{r.operation_key} continued {key} ({state}, {sent} effect(s) "
                        "sent) without proof it was not applied",
                    )
                )
            if original is not None:
                declared = world.registry.get(original.action).retries
                n = len(world.store.continuations(scope, link.original_id))
                if n > declared:
                    found.append(Violation(9, f"{key} has {n} retries, {declared} declared"))
        return found


def _written_off(detail: str | None) -> bool:
    return (detail or "").startswith(WRITE_OFF)
