"""Mutations of the evidence capabilities (:mod:`effectgate._sim.actors.evidence`): a prune
that crosses a hold or the retention window, a checkpoint that forgets what it must carry or
which heads were anchored, a receipt signature that leaves a member out, and receipts that
never supersede. Each replaces one named production function for a run; nothing else in the
world prunes, anchors or issues receipts, so only the evidence actor can catch them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from effectgate._sim.actor import Mutation

__all__ = ["EVIDENCE"]

F = Callable[..., Any]


def _hold_ignored(original: F) -> F:
    # The prune's hold test answers "not held" whatever the legal_holds table says.
    def _held(tx: Any, scope: str, operation_id: str) -> bool:
        return False

    return _held


def _retention_ignored(original: F) -> F:
    # Every class may be pruned as soon as it settled: no key retention, no horizon.
    def min_ages(registry: Any) -> dict[str, float]:
        return dict.fromkeys(original(registry), 0.0)

    return min_ages


def _nothing_carried(original: F) -> F:
    # The checkpoint is written without the entries still in force that the cut removed
    # (an active hold's entry, a live token's...): the cut loses them for good.
    def checkpoint_detail(report: Mapping[str, object], **kw: Any) -> dict[str, object]:
        detail: dict[str, object] = original(report, **{**kw, "carried": ()})
        return detail

    return checkpoint_detail


def _anchors_forgotten(original: F) -> F:
    # The checkpoint records none of the anchored heads its cuts removed: an anchor written
    # before the prune no longer finds its head, and nothing explains why.
    def merge_anchored(*groups: Any) -> dict[int, list[tuple[int, str]]]:
        return {}

    return merge_anchored


def _head_unsigned(original: F) -> F:
    # The signed bytes leave out ``audit_head``: signer and verifier agree, so every honest
    # receipt verifies, and so does one whose head was moved after signing.
    def signing_bytes(document: Mapping[str, Any]) -> bytes:
        signed: bytes = original({k: v for k, v in document.items() if k != "audit_head"})
        return signed

    return signing_bytes


def _never_superseded(original: F) -> F:
    # Receipts rest on the final entry only: a contradiction the reconciler chained later
    # never yields a superseding revision.
    def statements(op: Any, approvals: Any, trail: Any) -> list[dict[str, Any]]:
        revisions: list[dict[str, Any]] = original(op, approvals, trail)
        return revisions[:1]

    return statements


EVIDENCE: tuple[Mutation, ...] = (
    Mutation(
        "prune_crosses_hold", "8 pruned_only_unheld", "effectgate.store._prune:_held", _hold_ignored
    ),
    Mutation(
        "prune_inside_retention",
        "1 pruned_only_past_retention",
        "effectgate._execute.retention:min_ages",
        _retention_ignored,
    ),
    Mutation(
        "checkpoint_carries_nothing",
        "8 in_force_entries_carried",
        "effectgate.store._retention:checkpoint_detail",
        _nothing_carried,
    ),
    Mutation(
        "checkpoint_forgets_anchors",
        "8 anchored_heads_explained",
        "effectgate._core.prune_checkpoint:merge_anchored",
        _anchors_forgotten,
    ),
    Mutation(
        "receipt_head_unsigned",
        "8 forged_receipt_refused",
        "effectgate._evidence.receipt_signing:signing_bytes",
        _head_unsigned,
    ),
    Mutation(
        "receipt_never_superseded",
        "4 contradiction_supersedes",
        "effectgate._evidence.signed_receipts:statements",
        _never_superseded,
    ),
)
