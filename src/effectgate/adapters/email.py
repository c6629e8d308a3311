"""The email adapter (``effectgate[email]``): one message per operation, over stdlib SMTP.

Email is a venue with **no read view**: once a message is handed to the relay, nothing the
adapter can ask tells whether it was delivered, or sent twice. So:

* the Message-ID carries the operation key (``<eg.HEX@domain>``, HEX the key's UTF-8 bytes in
  hex, so it reads back exactly; also the ``X-Effectgate-Operation-Key`` header), which lets a
  person or a mailbox search match a message to its operation;
* SMTP has no idempotency key: the relay does not deduplicate by Message-ID, so the class
  must declare ``honours_key = "false"`` and ``read_view = "none"``;
* ``listing = probe`` and ``probe`` raises (the venue cannot answer): an uncertain row (the
  connection dropped after DATA) is never settled by reading and never written off as failed;
  it waits for an operator (docs/adapters/email.md says what to do).

Outcomes: a recipient refused or a 4xx/5xx answer to the message before the relay accepted it is
a provable refusal (``not_applied`` with the SMTP code as proof); a connection lost or timed out
at any point after DATA started, or an unexpected answer, raises
:class:`~effectgate.errors.AdapterError` (unknown).
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formatdate

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    Listing,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    check_call_timeout,
    refusal,
)
from effectgate.adapters._credentials import Secret, load_secret, scrub
from effectgate.errors import AdapterError, ConfigError

__all__ = ["KEY_HEADER", "EmailAdapter", "key_of_message_id", "message_id"]

KEY_HEADER = "X-Effectgate-Operation-Key"


def message_id(operation_key: str, domain: str) -> str:
    """The Message-ID of the message an operation sends: the key, hex-encoded."""
    return f"<eg.{operation_key.encode('utf-8').hex()}@{domain}>"


def key_of_message_id(mid: str) -> str | None:
    """The operation key a Message-ID carries, or None if it is not one of ours."""
    inner = mid.strip().removeprefix("<").removesuffix(">")
    local, _, _ = inner.partition("@")
    if not local.startswith("eg."):
        return None
    try:
        return bytes.fromhex(local[3:]).decode("utf-8")
    except ValueError:
        return None


class EmailAdapter(Adapter):
    """Sends ``to``, ``subject``, ``body`` effect fields from the configured sender."""

    name = "email"
    listing = Listing.PROBE

    def __init__(
        self,
        *,
        host: str,
        port: int,
        sender: str,
        username: str | None = None,
        credential_env: str | None = None,
        credential_file: str | None = None,
        credential_hook: str | None = None,
        starttls: bool = True,
        timeout: float = 10.0,
        actions: tuple[str, ...] | list[str] = ("send_email",),
    ) -> None:
        self._secret: Secret | None = None
        if username is not None:
            self._secret = load_secret(
                "email", env=credential_env, file=credential_file, hook=credential_hook
            )
        elif any(s is not None for s in (credential_env, credential_file, credential_hook)):
            raise ConfigError("email: a credential needs a username")
        check_call_timeout(timeout, "email: timeout")
        if "@" not in sender:
            raise ConfigError("email: sender must be an address")
        self._host, self._port, self._sender = host, int(port), sender
        self._domain = sender.rpartition("@")[2]
        self._username, self._starttls, self._timeout = username, starttls, float(timeout)
        self._actions = frozenset(actions)

    def __repr__(self) -> str:
        return f"EmailAdapter(host={self._host!r}, port={self._port}, sender={self._sender!r})"

    def build(self, request: OutboundRequest) -> EmailMessage:
        """The message an operation sends (also what a test's mailbox should receive)."""
        msg = EmailMessage()
        msg["From"] = self._sender
        msg["To"] = str(request.effect["to"])
        msg["Subject"] = str(request.effect["subject"])
        msg["Date"] = formatdate(usegmt=True)
        msg["Message-ID"] = message_id(request.operation_key, self._domain)
        msg[KEY_HEADER] = request.operation_key
        msg.set_content(str(request.effect["body"]))
        return msg

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        if request.action not in self._actions:
            raise AdapterError(f"email: action {request.action!r} is not configured")
        msg = self.build(request)
        mid = str(msg["Message-ID"])
        try:
            with smtplib.SMTP(
                self._host, self._port, timeout=call_budget(timeout, self._timeout)
            ) as smtp:
                if self._starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self._username is not None and self._secret is not None:
                    smtp.login(self._username, self._secret.reveal())
                refused = smtp.send_message(msg)
        except smtplib.SMTPRecipientsRefused as exc:
            codes = sorted({code for code, _ in exc.recipients.values()})
            return Receipt(Outcome.NOT_APPLIED, proof=refusal(f"smtp recipients refused {codes}"))
        except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
            return Receipt(
                Outcome.NOT_APPLIED, proof=refusal(f"smtp {exc.smtp_code} refused the message")
            )
        except smtplib.SMTPAuthenticationError as exc:
            return Receipt(
                Outcome.NOT_APPLIED, proof=refusal(f"smtp {exc.smtp_code} authentication refused")
            )
        except (smtplib.SMTPException, OSError) as exc:
            # Dropped after DATA started, or a timeout: the relay may hold the message.
            raise AdapterError(
                f"email: outcome unknown: {type(exc).__name__}: {self._text(exc)}"
            ) from None
        detail: Mapping[str, str] = {"refused": ",".join(sorted(refused))} if refused else {}
        return Receipt(Outcome.APPLIED, venue_id=mid, detail=detail)

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        """SMTP has no read view: the venue cannot answer, so this raises rather than return an
        empty list a reconciler could read as absence (a class misdeclared ``lagging`` would
        then write a delivered message off as failed)."""
        raise AdapterError("email: SMTP has no read view; an operator settles uncertain rows")

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        call_budget(timeout)  # nothing to list: SMTP keeps no record effectgate can read
        return []

    def _text(self, exc: BaseException) -> str:
        return scrub(str(exc), self._secret)
