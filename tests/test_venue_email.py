"""The email adapter end to end against an aiosmtpd relay: a venue with no read view.

Its uncertain rows are never written off as failed (they wait for an operator), the
Message-ID carries the operation key, and SMTP does not deduplicate (measured: two sends under
one key are two messages in the mailbox).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from effectgate import State
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate.adapters.email import EmailAdapter, key_of_message_id
from effectgate.errors import ConfigError
from effectgate.store.roles import Store
from effectgate.testing import SimulatedCrash, crash_at, run_conformance, temporary_store
from venuekit import (
    EmailDriver,
    Mailbox,
    SendEmail,
    audit_text,
    rig,
    start_smtp,
    stop_smtp,
    venue_class,
)

MAIL = {
    "action": "send_email",
    "intent_version": "1",
    "to": "customer@example.test",
    "subject": "Your refund",
    "body": "It is on its way.",
}
CONTRACT = VenueContract(honours_key=KeyHonour.IGNORED, read_view=ReadView.NONE)
CLS = venue_class("send_email", SendEmail, "email", 2.0, CONTRACT)


@pytest.fixture(scope="module")
def relay() -> Iterator[Mailbox]:
    box = start_smtp()
    yield box
    stop_smtp(box)


@pytest.fixture
def box(relay: Mailbox) -> Mailbox:
    relay.reset()
    return relay


def adapter(port: int) -> EmailAdapter:
    return EmailAdapter(
        host="127.0.0.1", port=port, sender="effectgate@example.test", starttls=False, timeout=3
    )


class TestAcknowledged:
    def test_message_sent_with_the_key_in_its_message_id(self, store: Store, box: Mailbox) -> None:
        r = rig(store, adapter(box.port), CLS)
        op = r.gate.submit("send_email", "mail-1", MAIL)
        assert op.state is State.ACKNOWLEDGED
        assert box.count("default:mail-1") == 1
        assert key_of_message_id(str(box.messages[0]["Message-ID"])) == "default:mail-1"
        assert op.venue_id == box.messages[0]["Message-ID"]

    def test_refused_recipient_is_not_applied_with_proof(self, store: Store, box: Mailbox) -> None:
        r = rig(store, adapter(box.port), CLS)
        box.refuse = True
        op = r.gate.submit("send_email", "mail-refused", MAIL)
        assert op.state is State.FAILED and box.messages == []


class TestNoReadView:
    def test_uncertain_row_never_written_off_past_the_horizon(
        self, store: Store, box: Mailbox
    ) -> None:
        """Invariant 4 with no read view: absence proves nothing, so the row is never written off
        as failed; past its horizon it goes to the operators' quarantine queue (invariant 10)."""
        r = rig(store, adapter(box.port), CLS)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("send_email", "mail-crash", MAIL)
        assert box.count("default:mail-crash") == 1  # it was delivered...
        r.clock.advance(3600)
        report = r.rec.run_once()
        # ...and reading cannot tell: nothing confirmed, nothing written off; the row goes to
        # the operators' queue, where a resolution with evidence settles it.
        assert report.written_off == 0 and report.confirmed == 0
        assert report.quarantined == 1
        assert ("default:mail-crash", "unsettled-no-read-view") in report.repaired
        assert r.gate.get("mail-crash").state is State.QUARANTINED

    def test_inside_the_horizon_the_row_stays_uncertain(self, store: Store, box: Mailbox) -> None:
        """Invariant 4: before its horizon a no-read-view row is noted, neither moved nor
        written off."""
        r = rig(store, adapter(box.port), CLS)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("send_email", "mail-young", MAIL)
        report = r.rec.run_once()
        assert report.still_uncertain == 1 and report.quarantined == 0
        assert ("default:mail-young", "uncertain-no-read-view") in report.repaired
        assert r.gate.get("mail-young").state is State.SUBMITTED

    def test_misdeclared_read_view_still_never_written_off(
        self, store: Store, box: Mailbox
    ) -> None:
        """Invariant 4: a class wrongly declared lagging on the email adapter: its probes raise
        (the venue cannot answer), so the repair pass leaves the row uncertain."""
        lagging = venue_class(
            "send_email", SendEmail, "email", 2.0, VenueContract(read_view=ReadView.LAGGING)
        )
        r = rig(store, adapter(box.port), lagging)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("send_email", "mail-mis", MAIL)
        r.clock.advance(3600)
        report = r.rec.repair()
        assert report.probe_errors == 1 and report.written_off == 0
        assert r.gate.get("mail-mis").state is State.SUBMITTED

    def test_unreachable_relay_leaves_the_row_uncertain(self, store: Store, box: Mailbox) -> None:
        r = rig(store, adapter(9), CLS)
        r.gate.submit("send_email", "mail-dead", MAIL)
        assert r.gate.get("mail-dead").state is State.SUBMITTED


class TestDuplicateAcrossLedgers:
    def test_two_ledgers_send_twice_and_no_reading_can_show_it(
        self, store: Store, box: Mailbox
    ) -> None:
        """SMTP ignores the key: two ledgers, two messages. Only the far end sees the duplicate,
        which is why the class must declare honours_key = false (at-most-once dispatch)."""
        rig(store, adapter(box.port), CLS).gate.submit("send_email", "mail-dup", MAIL)
        with temporary_store() as other:
            rig(other, adapter(box.port), CLS).gate.submit("send_email", "mail-dup", MAIL)
        assert box.count("default:mail-dup") == 2


class TestCredentials:
    def test_password_from_a_hook_never_leaks(
        self, store: Store, box: Mailbox, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Invariant 6: a login against a relay without AUTH fails; the password stays inside."""
        caplog.set_level(logging.DEBUG)
        a = EmailAdapter(
            host="127.0.0.1",
            port=box.port,
            sender="effectgate@example.test",
            username="svc",
            credential_hook="venuekit_secrets:smtp_password",
            starttls=False,
        )
        r = rig(store, a, CLS)
        op = r.gate.submit("send_email", "mail-auth", MAIL)
        blob = repr(op) + repr(a) + caplog.text + audit_text(store)
        assert "CANARY-smtp-pass" not in blob

    def test_credential_without_username_refused(self) -> None:
        with pytest.raises(ConfigError, match="needs a username"):
            EmailAdapter(host="127.0.0.1", port=25, sender="a@b.test", credential_env="X")


class TestKitReport:
    def test_kit_counts_deliveries_at_the_far_end(self, box: Mailbox) -> None:
        rep = run_conformance(adapter(box.port), EmailDriver(box, adapter), horizon=1.0)
        print(rep.render())
        assert rep.honours_key == "false" and rep.failed == [], rep.render()
        assert rep.results["listing"]["status"] == "n/a"
        assert rep.results["refusal-is-not-applied"]["status"] == "pass"
