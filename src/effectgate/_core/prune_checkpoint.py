"""The prune checkpoint: the chained ``audit_pruned`` entry a prune writes (issue 41). No I/O.

A prune cuts a prefix of each audit lane. An entry not about an operation that is still in
force (a live token, a grant, a policy step, the latest change of a control, an active hold,
a run's journal) does not stop the cut: it is *carried*, restated whole in the checkpoint
(seq, lane, at, scope, kind, detail, prev_hash, hash), so its content still hashes to the
link it had in the chain. The checkpoint also states

* ``starts``: every pruned lane's start, the last removed entry ``(seq, hash)`` that the
  lane's first remaining entry follows (the ``audit_checkpoints`` rows must say the same);
* ``anchored``: the anchored heads the chain recorded (``audit_anchored``) that the cuts
  removed, so an anchor written before the prune is still explained;
* ``previous``: the checkpoint it supersedes (its carried entries still in force are carried
  again; the ones no longer in force are dropped);

and it is digested, and HMAC-signed with the anchor key when there is one (``signature``), so
that with the key nobody who only writes the store can forge one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from effectgate._core.chain import ChainEntry, chain_hash

__all__ = [
    "FORMAT",
    "MAX_ANCHORED_PER_LANE",
    "PruneCheckpoint",
    "checkpoint_detail",
    "merge_anchored",
]

FORMAT: Final = "effectgate-prune/2"
#: Anchored heads kept per lane (the newest): an older anchor below the cut is no longer
#: explained and is reported (docs/evidence.md).
MAX_ANCHORED_PER_LANE: Final = 256
_UNSIGNED: Final = ("digest", "signature")


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(
        {k: v for k, v in body.items() if k not in _UNSIGNED},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    ).encode("ascii")


def _sign(key: bytes, digest: str) -> str:
    return hmac.new(key, digest.encode("ascii"), hashlib.sha256).hexdigest()


def _heads(pairs: Mapping[int, tuple[int, str]]) -> dict[str, dict[str, object]]:
    return {str(k): {"seq": s, "hash": h} for k, (s, h) in sorted(pairs.items())}


def merge_anchored(
    *groups: Mapping[int, Iterable[tuple[int, str]]],
) -> dict[int, list[tuple[int, str]]]:
    """Per lane, the distinct anchored heads of ``groups``, oldest first, at most
    :data:`MAX_ANCHORED_PER_LANE` (the newest)."""
    out: dict[int, set[tuple[int, str]]] = {}
    for group in groups:
        for lane, pairs in group.items():
            out.setdefault(int(lane), set()).update((int(s), str(h)) for s, h in pairs)
    return {
        lane: sorted(pairs)[-MAX_ANCHORED_PER_LANE:] for lane, pairs in sorted(out.items()) if pairs
    }


def checkpoint_detail(
    report: Mapping[str, object],
    *,
    by: str,
    before: float,
    starts: Mapping[int, tuple[int, str]],
    carried: Iterable[ChainEntry],
    anchored: Mapping[int, Iterable[tuple[int, str]]],
    previous: tuple[int, str] | None,
    key: bytes | None,
) -> dict[str, object]:
    """The ``audit_pruned`` entry's detail: ``report`` (PruneReport.to_dict; its count
    ``carried`` gives way to the carried entries themselves) and the checkpoint's fields,
    with its digest and (with ``key``) its signature."""
    body: dict[str, object] = {
        "format": FORMAT,
        "by": by,
        "before": before,
        **report,
        "starts": _heads(starts),
        "carried": [e.to_dict() for e in sorted(carried, key=lambda e: (e.lane, e.seq))],
        "anchored": {str(k): [[s, h] for s, h in v] for k, v in merge_anchored(anchored).items()},
        "previous": None if previous is None else {"seq": previous[0], "hash": previous[1]},
    }
    digest = hashlib.sha256(_canonical(body)).hexdigest()
    return {**body, "digest": digest, "signature": _sign(key, digest) if key else None}


@dataclass(frozen=True, slots=True)
class PruneCheckpoint:
    """A parsed checkpoint (:meth:`parse`); :meth:`problems` says what does not hold."""

    detail: Mapping[str, Any]
    starts: Mapping[int, tuple[int, str]]
    carried: tuple[ChainEntry, ...]
    anchored: Mapping[int, tuple[tuple[int, str], ...]]
    previous: tuple[int, str] | None

    @classmethod
    def parse(cls, detail: Any) -> PruneCheckpoint | None:
        """None for an ``audit_pruned`` entry written before checkpoints carried entries
        (no ``format``); :class:`ValueError` for one that claims the format but is malformed."""
        if not isinstance(detail, Mapping) or detail.get("format") is None:
            return None
        if detail.get("format") != FORMAT:
            raise ValueError(f"unknown checkpoint format {detail.get('format')!r}")
        try:
            starts = {
                int(k): (int(v["seq"]), str(v["hash"])) for k, v in dict(detail["starts"]).items()
            }
            carried = tuple(ChainEntry.from_dict(e) for e in detail["carried"])
            anchored = {
                int(k): tuple((int(s), str(h)) for s, h in v)
                for k, v in dict(detail["anchored"]).items()
            }
            prev = detail["previous"]
            previous = None if prev is None else (int(prev["seq"]), str(prev["hash"]))
            str(detail["digest"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"malformed checkpoint: {type(exc).__name__}: {exc}") from None
        return cls(detail, starts, carried, anchored, previous)

    def problems(self, *, key: bytes | None) -> list[str]:
        """What does not hold: the digest, the signature (with ``key``), and each carried
        entry (it hashes to its link, is not about an operation, and lies inside the cut)."""
        out: list[str] = []
        digest = hashlib.sha256(_canonical(self.detail)).hexdigest()
        if not hmac.compare_digest(digest, str(self.detail["digest"])):
            out.append("its digest does not match its content (edited)")
        if key is not None:
            sig = self.detail.get("signature")
            if not isinstance(sig, str) or not hmac.compare_digest(_sign(key, digest), sig):
                out.append("its signature does not verify with the anchor key")
        last: dict[int, int] = {}
        for e in self.carried:
            where = f"carried seq {e.seq} (lane {e.lane}, {e.kind})"
            if chain_hash(e.prev_hash, e.digest) != e.hash:
                out.append(f"{where}: content does not match its hash (edited)")
            if e.operation_id is not None:
                out.append(f"{where} is about an operation (never carried)")
            start = self.starts.get(e.lane)
            if start is None or e.seq > start[0]:
                out.append(f"{where} lies past the lane's cut (it was never removed)")
            elif e.seq == start[0] and e.hash != start[1]:
                out.append(f"{where} is the lane's last removed entry but not its start's hash")
            if e.seq <= last.get(e.lane, 0):
                out.append(f"{where} is out of order")
            last[e.lane] = e.seq
        return out

    def explains(self, lane: int, seq: int, head_hash: str) -> bool:
        """Whether an anchored head that the cuts removed is one this checkpoint records: the
        lane's start, a recorded anchored head, or a carried entry."""
        if self.starts.get(lane) == (seq, head_hash) or (seq, head_hash) in self.anchored.get(
            lane, ()
        ):
            return True
        return any((e.lane, e.seq, e.hash) == (lane, seq, head_hash) for e in self.carried)
