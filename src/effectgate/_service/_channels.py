"""Approval channels: a signed webhook out to a chat or paging tool, and a signed callback in.

Both directions sign ``"{timestamp}.{nonce}." + body`` with HMAC-SHA256 under the channel's
secret (``X-Effectgate-Signature: v1=<hex>``, with ``X-Effectgate-Timestamp`` and
``X-Effectgate-Nonce``). A callback is accepted only with a valid signature, a timestamp within
the tolerance and a nonce never seen on that channel (the store records it, so every replica
refuses a replay). The approver is the chat user the signed body names, mapped to a principal
by the channel's configured ``users`` table: an unmapped user approves nothing. The answer then
goes through the same rules as any approval (approver roles, no self-approval, distinct
approvers, the payload's fingerprint).

::

    [channels.chatops]
    url = "https://chat.example.com/hooks/effectgate"   # where requests are announced
    announce_every = 5                                 # seconds between announcement passes
    secret_env = "EFFECTGATE_CHATOPS_SECRET"           # the shared HMAC secret
    tolerance = 300                                    # seconds a signature stays valid
    users = { U024BE7LH = "alice", U0G9QF9C6 = "bob" } # chat user -> approver principal
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import httpx

from effectgate._core.controls import ApprovalOutcome
from effectgate._core.states import State
from effectgate._execute.operator import Operator
from effectgate._service._toml import Section
from effectgate.errors import BadRequest, ConfigError, Unauthenticated
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = [
    "ANNOUNCED",
    "ApprovalWebhook",
    "ChannelConfig",
    "channel_section",
    "handle_callback",
    "sign",
    "verify",
]

log = logging.getLogger("effectgate.channels")

SIGNATURE = "x-effectgate-signature"
TIMESTAMP = "x-effectgate-timestamp"
NONCE = "x-effectgate-nonce"
#: The audit entry recording that a request was announced on a channel.
ANNOUNCED = "approval_announced"
#: Seconds a claim to announce stays with its replica before another may take it over: well
#: past the POST's timeout, so a live holder always finishes first.
LEASE = 30.0


@dataclass(frozen=True)
class ChannelConfig:
    name: str
    secret: bytes = field(repr=False)
    url: str | None = None
    tolerance: float = 300.0
    users: Mapping[str, str] = field(default_factory=dict)
    #: Seconds between the service's announcement passes (with a ``url``).
    announce_every: float = 5.0


def channel_section(name: str, sec: Section) -> ChannelConfig:
    url = sec.text("url", pattern=r"https?://\S+")
    env = sec.req_text("secret_env")
    secret = os.environ.get(env, "")
    if len(secret) < 16:
        sec.fail("secret_env", f"${env} must hold a secret of at least 16 characters")
    tolerance = sec.number("tolerance", 300.0)
    every = sec.number("announce_every", 5.0)
    raw = sec.raw("users") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        sec.fail("users", "must be a table of chat user = principal name")
    sec.done()
    return ChannelConfig(name, secret.encode(), url, tolerance, dict(raw), every)


def sign(secret: bytes, timestamp: str, nonce: str, body: bytes) -> str:
    mac = hmac.new(secret, f"{timestamp}.{nonce}.".encode() + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def _headers(secret: bytes, body: bytes, now: float) -> dict[str, str]:
    ts, nonce = str(int(now)), secrets.token_hex(16)
    return {
        "Content-Type": "application/json",
        TIMESTAMP: ts,
        NONCE: nonce,
        SIGNATURE: sign(secret, ts, nonce, body),
    }


def verify(
    channel: ChannelConfig,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
    claim_nonce: Callable[[str, float], bool],
) -> None:
    """Raise :class:`Unauthenticated` unless the callback is signed, fresh and not a replay."""
    ts, nonce, given = headers.get(TIMESTAMP), headers.get(NONCE), headers.get(SIGNATURE)
    if not ts or not nonce or not given:
        raise Unauthenticated(f"send {TIMESTAMP}, {NONCE} and {SIGNATURE}")
    if len(nonce) > 128 or not ts.isdigit():
        raise Unauthenticated("malformed timestamp or nonce")
    if not hmac.compare_digest(sign(channel.secret, ts, nonce, body), given):
        raise Unauthenticated("callback signature does not verify")
    if abs(now - int(ts)) > channel.tolerance:
        raise Unauthenticated("callback timestamp is outside the tolerance")
    if not claim_nonce(nonce, now):
        raise Unauthenticated("callback nonce was already used (replay)")


def handle_callback(
    channel: ChannelConfig,
    store: Store,
    operator: Operator,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
) -> ApprovalOutcome:
    """Verify a callback and apply the approval or refusal it carries."""
    verify(
        channel,
        headers,
        body,
        now=now,
        claim_nonce=lambda nonce, at: store.claim_nonce(
            channel.name, nonce, now=at, forget_before=at - 2 * channel.tolerance
        ),
    )
    try:
        doc = json.loads(body)
        scope, op_id = str(doc["scope"]), str(doc["operation_id"])
        fingerprint, decision, user = str(doc["fingerprint"]), doc["decision"], str(doc["user"])
    except (ValueError, KeyError, TypeError):
        raise BadRequest(
            "a callback body is {scope, operation_id, fingerprint, decision, user}"
        ) from None
    approver = channel.users.get(user)
    if approver is None:
        raise Unauthenticated(f"chat user {user!r} is not mapped to an approver")
    reason = doc.get("reason") if isinstance(doc.get("reason"), str) else None
    if decision == "approve":
        return operator.approve(
            op_id, fingerprint=fingerprint, approver=approver, scope=scope, reason=reason
        )
    if decision == "refuse":
        return operator.refuse(
            op_id, fingerprint=fingerprint, approver=approver, scope=scope, reason=reason
        )
    raise BadRequest("decision must be approve or refuse")


class ApprovalWebhook:
    """Announces each request awaiting approval once on a channel, signed."""

    def __init__(
        self, channel: ChannelConfig, store: Store, *, client: httpx.Client | None = None
    ) -> None:
        if channel.url is None:
            raise ConfigError(f"channels.{channel.name}: no url to announce to")
        self.channel = channel
        self.store = store
        #: This announcer, as its claims name it (one per process and channel).
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._client = client or httpx.Client(timeout=5.0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def announce(self, row: Operation, *, now: float | None = None) -> bool:
        """Claim this request's current approval round on the channel and, if this webhook
        won the claim, POST it; True when the tool accepted it (2xx). The claim is a
        compare-and-set with a lease in the store, so replicas sharing the store announce each
        round once; the outcome is audited in the transaction that records it."""
        at = time.time() if now is None else now
        request = self.store.approval_request(row.scope, row.operation_id)
        if request is None:
            return False
        key = (self.channel.name, row.scope, row.operation_id, request.expires_at)
        if not self.store.claim_announcement(*key, holder=self.holder, now=at, lease=LEASE):
            return False
        ok, status = self._send(row, at)
        self.store.finish_announcement(
            *key, holder=self.holder, delivered=ok, detail={"status": status}, now=at
        )
        return ok

    def _send(self, row: Operation, at: float) -> tuple[bool, object]:
        body = json.dumps(
            {
                "type": "approval_requested",
                "scope": row.scope,
                "operation_id": row.operation_id,
                "action": row.action,
                "fingerprint": row.fingerprint,
                "tier": row.tier,
                "reason": row.reason,
                "effect": dict(row.effect),
            },
            sort_keys=True,
        ).encode()
        try:
            headers = _headers(self.channel.secret, body, at)
            resp = self._client.post(self.channel.url or "", content=body, headers=headers)
        except httpx.HTTPError as exc:
            return False, type(exc).__name__
        return 200 <= resp.status_code < 300, resp.status_code

    def poll(self, *, now: float | None = None) -> int:
        """Announce every awaiting request whose current round this channel has not announced
        (and no other replica is announcing); how many this pass delivered."""
        return sum(
            self.announce(row, now=now)
            for row in self.store.list_operations(state=State.AWAITING_APPROVAL, limit=1000)
        )

    def start(self) -> None:
        """Announce in a daemon thread every ``announce_every`` seconds until :meth:`close`."""

        def run() -> None:
            while not self._stop.wait(self.channel.announce_every):
                try:
                    self.poll()
                except Exception:  # the next pass tries again
                    log.exception("announcing on channel %s failed", self.channel.name)

        self._thread = threading.Thread(
            target=run, name=f"channel-{self.channel.name}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._client.close()
