"""The Stripe adapter end to end, through Gate and the reconciler, against localstripe.

localstripe ignores Idempotency-Key (measured: two sends under one key make two payment
intents), lists by creation and has no search: the adapter runs with ``probe_via = "list"``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import stripe

from effectgate import State
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate.adapters.stripe import KEY_FIELD, StripeAdapter
from effectgate.store.roles import Store
from effectgate.testing import SimulatedCrash, crash_at, run_conformance, temporary_store
from venuekit import (
    CreatePayment,
    Server,
    StripeDriver,
    audit_text,
    rig,
    start_localstripe,
    venue_class,
)

SECRET = "sk_test_CANARY0123456789abcdef"
PAYMENT = {
    "action": "create_payment",
    "intent_version": "1",
    "amount": 1250,
    "currency": "usd",
    "payment_method": "pm_card_visa",
}
CONTRACT = VenueContract(honours_key=KeyHonour.IGNORED, read_view=ReadView.LAGGING)


@pytest.fixture(scope="module")
def localstripe() -> Iterator[Server]:
    server = start_localstripe()
    yield server
    server.stop()


@pytest.fixture
def venue(localstripe: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    localstripe.reset()
    monkeypatch.setenv("EG_TEST_STRIPE_KEY", SECRET)
    yield localstripe


def adapter(url: str) -> StripeAdapter:
    return StripeAdapter(
        credential_env="EG_TEST_STRIPE_KEY",
        endpoint=url,
        probe_via="list",
        server_created_filter=False,
        listing_lookback=600,
        timeout=5,
    )


def direct(url: str, **meta: str) -> str:
    client = stripe.StripeClient(SECRET, base_addresses={"api": url}, max_network_retries=0)
    return str(
        client.v1.payment_intents.create(
            params={
                "amount": 999,
                "currency": "usd",
                "confirm": True,
                "payment_method": "pm_card_visa",
                "metadata": meta,
            }
        ).id
    )


def _dist(name: str) -> str:
    from importlib.metadata import version

    return version(name)


CLS = venue_class("create_payment", CreatePayment, "stripe", 2.0, CONTRACT)


class TestAcknowledged:
    def test_payment_acknowledged_and_swept_clean(self, store: Store, venue: Server) -> None:
        """Invariant 5: one payment, one record under its key; the sweep agrees."""
        r = rig(store, adapter(venue.url), CLS)
        op = r.gate.submit("create_payment", "pay-1", PAYMENT)
        assert op.state is State.ACKNOWLEDGED and op.venue_id and op.venue_id.startswith("pi_")
        report = r.rec.sweep()
        assert report.new_divergences == [] and report.venue_records == 1


class TestCrashSettledByReading:
    def test_crash_after_call_confirmed_by_the_sweep(self, store: Store, venue: Server) -> None:
        """Invariant 3: a crash after the venue call leaves the row uncertain; a sweep confirms."""
        r = rig(store, adapter(venue.url), CLS)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("create_payment", "pay-crash", PAYMENT)
        assert r.gate.get("pay-crash").state is State.SUBMITTED
        report = r.rec.sweep()
        assert report.confirmed == 1
        assert r.gate.get("pay-crash").state is State.ACKNOWLEDGED

    def test_crash_before_call_written_off_only_past_horizon(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 4: absent inside the horizon stays uncertain; past it, failed."""
        r = rig(store, adapter(venue.url), CLS)
        with crash_at("after_journal"), pytest.raises(SimulatedCrash):
            r.gate.submit("create_payment", "pay-lost", PAYMENT)
        assert r.rec.sweep().still_uncertain == 1
        r.clock.advance(3)
        assert r.rec.sweep().written_off == 1
        assert r.gate.get("pay-lost").state is State.FAILED


class TestDuplicateAcrossLedgers:
    def test_two_ledgers_same_operation_duplicate_reported(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 5: localstripe ignores the key, so two ledgers make two effects; reported."""
        first = rig(store, adapter(venue.url), CLS)
        first.gate.submit("create_payment", "pay-dup", PAYMENT)
        with temporary_store() as other:
            rig(other, adapter(venue.url), CLS).gate.submit("create_payment", "pay-dup", PAYMENT)
        kinds = [d[0] for d in first.rec.sweep().new_divergences]
        assert kinds == ["duplicate-effect"]


class TestWindowedSweep:
    def test_window_larger_than_memory_spills_and_still_groups_duplicates(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 5 in bounded memory: with 3 records held at a time, 12 payments and a
        duplicate are each seen once and the duplicate is grouped across spilled runs."""
        r = rig(store, adapter(venue.url), CLS)
        r.rec.window_chunk = 3
        for i in range(12):
            r.gate.submit("create_payment", f"pay-{i:02d}", PAYMENT)
        direct(venue.url, **{KEY_FIELD: "default:pay-03"})  # a second effect under one key
        report = r.rec.sweep()
        assert report.venue_records == 13 and report.ledger_rows == 12
        assert [(d[0], d[1]) for d in report.new_divergences] == [
            ("duplicate-effect", "default:pay-03")
        ]

    def test_uncertain_row_older_than_the_window_is_settled_by_probe(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 11: a row submitted before the listing window is not judged by the
        listing; the sweep probes its key and confirms it (run_once calls repair() only while
        another replica sweeps, so a lone sweeper must probe it itself)."""
        r = rig(store, adapter(venue.url), CLS)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("create_payment", "pay-old", PAYMENT)
        r.clock.advance(700)  # past the 600 s lookback: the sweep does not list it
        swept = r.rec.sweep()
        assert swept.confirmed == 1 and swept.written_off == 0
        assert r.gate.get("pay-old").state is State.ACKNOWLEDGED
        assert r.rec.repair().confirmed == 0


class TestOrphan:
    def test_payment_made_outside_the_boundary_is_an_orphan(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 5: records() lists every object in the window, not only effectgate's."""
        r = rig(store, adapter(venue.url), CLS)
        r.gate.submit("create_payment", "pay-in", PAYMENT)
        outside = direct(venue.url)
        foreign_key = direct(venue.url, **{KEY_FIELD: "default:never-journalled"})
        divs = r.rec.sweep().new_divergences
        assert sorted((d[0], d[2]) for d in divs) == sorted(
            [("orphan", (outside,)), ("orphan", (foreign_key,))]
        )


class TestCredentialCanary:
    def test_secret_never_in_errors_logs_receipts_or_audit(
        self,
        store: Store,
        venue: Server,
        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Invariant 6: the key never leaves the adapter, even when calls fail."""
        caplog.set_level(logging.DEBUG)
        r = rig(store, adapter(venue.url), CLS)
        op = r.gate.submit("create_payment", "pay-ok", PAYMENT)
        dead = rig(
            store,
            adapter("http://127.0.0.1:9"),
            venue_class("create_payment", CreatePayment, "stripe", 2.0, CONTRACT),
        )
        texts = [repr(op), repr(adapter(venue.url))]
        try:
            dead.gate.submit("create_payment", "pay-dead", PAYMENT)
        except Exception as exc:
            texts += [str(exc), repr(exc)]
        texts.append(repr(dead.gate.get("pay-dead")))
        blob = "\n".join(texts) + caplog.text + audit_text(store)
        assert SECRET not in blob and SECRET[-8:] not in blob


class TestKitReport:
    def test_kit_measures_localstripe_ignoring_the_key(self, venue: Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
        """The kit's report says precisely which promise localstripe does not keep."""
        rep = run_conformance(
            adapter(venue.url),
            StripeDriver(venue.url, SECRET, adapter),
            horizon=2.0,
            versions={"stripe": stripe.VERSION, "localstripe": _dist("localstripe")},
        )
        print(rep.render())
        assert rep.honours_key == "false"
        assert rep.results["same-key-twice"]["status"] == "not-kept"
        assert rep.failed == [], rep.render()
        assert rep.results["orphan-visible"]["status"] == "pass"
        assert "runs spilled" in rep.results["listing"]["detail"]
        rep.write(tmp_path / "stripe.json")


class TestFromTheConfigFile:
    def test_service_builds_the_stripe_adapter_from_kind_stripe(
        self,
        venue: Server,
        tmp_path,
        monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
    ) -> None:
        """kind = "stripe" in the config: the service builds it, reads the key from the
        environment, dispatches and reconciles; check says why it claims no exactly-once."""
        from typer.testing import CliRunner

        from effectgate._doors.cli.main import app
        from effectgate._service import Service, load_config

        runner = CliRunner()
        assert (
            runner.invoke(app, ["init", "--dir", str(tmp_path), "--venue", "stripe"]).exit_code == 0
        )
        path = tmp_path / "effectgate.toml"
        text = (
            path.read_text()
            .replace(
                'credential_env = "STRIPE_API_KEY"',
                f'credential_env = "EG_TEST_STRIPE_KEY"\nendpoint = "{venue.url}"',
            )
            .replace('probe_via = "search"', 'probe_via = "list"\nserver_created_filter = false')
        )
        path.write_text(text.replace('tier_floor = "approve"', 'tier_floor = "validate"'))
        svc = Service(load_config(str(path)))
        try:
            intent = {k: v for k, v in PAYMENT.items()}
            op = svc.gate.submit("create_payment", "cfg-1", intent)
            assert op.state is State.ACKNOWLEDGED and (op.venue_id or "").startswith("pi_")
            direct(venue.url)  # and one payment made outside the boundary
            kinds = [d[0] for d in svc.reconciler.sweep().new_divergences]
            assert kinds == ["orphan"]
        finally:
            svc.close()
        out = runner.invoke(app, ["check", "--config", str(path), "--json"])
        assert out.exit_code == 0, out.output
        import json

        assert (
            "honours_key = 'unknown'"
            in json.loads(out.stdout)["classes"]["create_payment"]["delivery_why"]
        )

    def test_missing_credential_is_a_located_check_error(
        self,
        venue: Server,
        tmp_path,
        monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
    ) -> None:
        from typer.testing import CliRunner

        from effectgate._doors.cli.main import app

        runner = CliRunner()
        runner.invoke(app, ["init", "--dir", str(tmp_path), "--venue", "stripe"])
        monkeypatch.delenv("STRIPE_API_KEY", raising=False)
        out = runner.invoke(app, ["check", "--config", str(tmp_path / "effectgate.toml")])
        assert out.exit_code == 2
        assert "STRIPE_API_KEY is not set" in out.output
