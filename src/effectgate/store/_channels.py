"""The channel nonces role: replay protection for signed callbacks, shared by every replica.

A signed callback carries a nonce; :meth:`ChannelRoles.claim_nonce` records it once per channel
(the primary key decides, so two replicas given the same callback accept it once) and drops
nonces older than the signature's tolerance, which a replay could not use anyway.
"""

from __future__ import annotations

from effectgate.store._hooks import StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import Operation

__all__ = ["ChannelRoles"]


class ChannelRoles(StoreHooks):
    def claim_nonce(self, channel: str, nonce: str, *, now: float, forget_before: float) -> bool:
        """True the first time ``(channel, nonce)`` is seen; False for a replay."""

        def work(tx: SharedTx, _: Operation | None) -> bool:
            tx.rows(
                "DELETE FROM channel_nonces WHERE channel = ? AND seen_at < ? RETURNING 1",
                (channel, forget_before),
            )
            fresh = tx.rows(
                "INSERT INTO channel_nonces (channel, nonce, seen_at) VALUES (?,?,?) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (channel, nonce, now),
            )
            if not fresh:
                tx.audit("channel_replay_refused", {"channel": channel, "nonce": nonce}, now)
            return bool(fresh)

        return self._run(work, f"claim nonce on {channel}")
