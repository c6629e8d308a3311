"""Retention: prune the audit chain from its start after anchoring a checkpoint (issue 20).

:func:`prune` is the one way to remove history: it refuses unless the chain verifies against
the last anchors, writes a fresh checkpoint of every lane's head to the anchors, prunes only
below those anchored heads (store/_prune.py says exactly which entries go and which are
carried in the prune's checkpoint entry, signed with the anchor key), anchors again so the
checkpoint entry itself is anchored, and verifies the chain again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from effectgate._core.intent import Registry
from effectgate._core.retention import PruneReport
from effectgate._evidence.anchor import AnchorProvider, anchor_heads, verify_against_anchors
from effectgate._evidence.audit import VerifyResult, verify_store
from effectgate.errors import ConfigError
from effectgate.store.roles import Store

__all__ = ["min_ages", "prune"]


def min_ages(registry: Registry) -> dict[str, float]:
    """Per class, how long after settling a row must be kept: past the venue's key retention
    (a retry under its key must still be recognised) and the reconciler's horizon."""
    out: dict[str, float] = {}
    for name in registry.names():
        ac = registry.get(name)
        out[name] = max(float(ac.key_retention), float(ac.visibility_horizon))
    return out


def prune(
    store: Store,
    registry: Registry,
    providers: Sequence[AnchorProvider],
    *,
    before: float,
    by: str,
    key: bytes | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[PruneReport, VerifyResult]:
    """Verify, anchor, prune, anchor, verify again; :class:`ConfigError` if the chain does not
    verify against the anchors first (nothing is removed then)."""
    if not providers:
        raise ConfigError("pruning needs an anchor to write the checkpoint to")
    now = clock()
    if before > now:
        raise ConfigError("--before is in the future")
    checked, _ = verify_against_anchors(store, providers, key=key)
    if not checked.ok:
        first = checked.findings[0]
        raise ConfigError(
            f"the audit chain does not verify ({first.problem}: {first.message}); "
            "nothing was pruned"
        )
    checkpoint, _ = anchor_heads(store, providers, key=key, clock=clock, by=by)
    report = store.prune_audit(
        before=before,
        now=now,
        by=by,
        anchored=checkpoint.heads,
        min_age=min_ages(registry),
        key=key,
    )
    if report.cuts:  # the anchors now hold a head past the checkpoint entry
        try:
            anchor_heads(store, providers, key=key, clock=clock, by=by)
        except ConfigError as exc:
            raise ConfigError(
                f"pruned, but anchoring the checkpoint entry failed ({exc.message}); "
                "run `effectgate audit anchor` once the anchor is back"
            ) from None
    return report, verify_store(store, key=key)
