"""The channels role, shared by every replica: replay protection for signed callbacks, and
one announcement of each approval request per channel and round.

A signed callback carries a nonce; :meth:`ChannelRoles.claim_nonce` records it once per channel
(the primary key decides, so two replicas given the same callback accept it once) and drops
nonces older than the signature's tolerance, which a replay could not use anyway.

An announcement is claimed before it is sent (:meth:`ChannelRoles.claim_announcement`): the
first replica inserts the claim with a lease; another takes it over only once the lease has run
out and no announcement was recorded (its holder failed or died). :meth:`ChannelRoles.
finish_announcement` records the outcome and its audit entry in one transaction: delivered,
the round is never announced again; not delivered, the lease is released for the next pass.
"""

from __future__ import annotations

from collections.abc import Mapping

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

    def claim_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        now: float,
        lease: float,
    ) -> bool:
        """True if ``holder`` may announce this round now: the first claim, or one whose
        holder's lease ran out with nothing announced. False: announced, or another replica
        holds it."""

        def work(tx: SharedTx, _: Operation | None) -> bool:
            if tx.rows(
                "INSERT INTO channel_announcements (channel, scope, operation_id, round, holder, "
                "lease_until, announced_at) VALUES (?,?,?,?,?,?,NULL) ON CONFLICT DO NOTHING "
                "RETURNING 1",
                (channel, scope, operation_id, round_key, holder, now + lease),
            ):
                return True
            # The compare-and-set: only an expired, undelivered claim changes hands.
            return bool(
                tx.rows(
                    "UPDATE channel_announcements SET holder = ?, lease_until = ? WHERE "
                    "channel = ? AND scope = ? AND operation_id = ? AND round = ? AND "
                    "announced_at IS NULL AND lease_until <= ? RETURNING 1",
                    (holder, now + lease, channel, scope, operation_id, round_key, now),
                )
            )

        return self._run(work, f"claim announcement on {channel}")

    def finish_announcement(
        self,
        channel: str,
        scope: str,
        operation_id: str,
        round_key: float,
        *,
        holder: str,
        delivered: bool,
        detail: Mapping[str, object],
        now: float,
    ) -> None:
        """Record ``holder``'s attempt with its ``approval_announced`` audit entry: delivered,
        the round is done; not, the lease is released so the next pass (anyone's) retries."""

        def work(tx: SharedTx, _: Operation | None) -> None:
            if delivered:
                tx.rows(
                    "UPDATE channel_announcements SET announced_at = ? WHERE channel = ? AND "
                    "scope = ? AND operation_id = ? AND round = ? AND holder = ? RETURNING 1",
                    (now, channel, scope, operation_id, round_key, holder),
                )
            else:
                tx.rows(
                    "UPDATE channel_announcements SET lease_until = ? WHERE channel = ? AND "
                    "scope = ? AND operation_id = ? AND round = ? AND holder = ? AND "
                    "announced_at IS NULL RETURNING 1",
                    (now, channel, scope, operation_id, round_key, holder),
                )
            tx.audit(
                "approval_announced",
                {**detail, "channel": channel, "ok": delivered, "by": holder},
                now,
                scope,
                operation_id,
            )

        return self._run(work, f"finish announcement on {channel}")
