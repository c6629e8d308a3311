"""The EC2 adapter end to end, through Gate and the reconciler, against moto in server mode.

Measured: moto ignores ClientToken (two RunInstances under one token make two instances), lists
instances in launch order, keeps terminated instances listed, and refuses an unknown AMI only
with ``MOTO_ENABLE_AMI_VALIDATION`` (tests/venuekit.py sets it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import pytest

from effectgate import State
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate.adapters.aws import KEY_TAG, Ec2Adapter, client_token
from effectgate.store.roles import Store
from effectgate.testing import SimulatedCrash, crash_at, run_conformance, temporary_store
from venuekit import Ec2Driver, RunInstance, Server, audit_text, rig, start_moto, venue_class

SECRET = "CANARYsecretAccessKey0123456789abcdefXYZ"
RUN = {
    "action": "run_instance",
    "intent_version": "1",
    "image_id": Ec2Driver.ami,
    "instance_type": "t2.micro",
}
CONTRACT = VenueContract(honours_key=KeyHonour.IGNORED, read_view=ReadView.LAGGING)
CLS = venue_class("run_instance", RunInstance, "aws", 2.0, CONTRACT)


@pytest.fixture(scope="module")
def moto() -> Iterator[Server]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture
def venue(moto: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    moto.reset()
    monkeypatch.setenv("EG_TEST_AWS_SECRET", SECRET)
    yield moto


def adapter(url: str) -> Ec2Adapter:
    return Ec2Adapter(
        region="us-east-1",
        access_key_id="AKIATESTONLY",
        credential_env="EG_TEST_AWS_SECRET",
        endpoint=url,
        timeout=5,
        listing_lookback=600,
    )


class TestClientToken:
    def test_token_fits_ec2_limit_and_is_deterministic(self) -> None:
        long_key = "default:" + "x" * 120
        assert client_token("default:op-1") == "default:op-1"
        assert len(client_token(long_key)) == 64 and client_token(long_key) == client_token(
            long_key
        )
        assert client_token(long_key) != client_token(long_key + "y")


class TestAcknowledged:
    def test_instance_acknowledged_tagged_and_swept_clean(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 5: one instance tagged with its key; the sweep agrees."""
        r = rig(store, adapter(venue.url), CLS)
        op = r.gate.submit("run_instance", "vm-1", RUN)
        assert op.state is State.ACKNOWLEDGED and op.venue_id and op.venue_id.startswith("i-")
        assert adapter(venue.url).probe("default:vm-1") == [op.venue_id]
        assert r.rec.sweep().new_divergences == []


class TestCrashSettledByReading:
    def test_crash_after_call_confirmed_by_the_sweep(self, store: Store, venue: Server) -> None:
        """Invariant 3: uncertain after the crash, settled by reading the venue."""
        r = rig(store, adapter(venue.url), CLS)
        with crash_at("after_venue_call"), pytest.raises(SimulatedCrash):
            r.gate.submit("run_instance", "vm-crash", RUN)
        assert r.gate.get("vm-crash").state is State.SUBMITTED
        assert r.rec.sweep().confirmed == 1
        assert r.gate.get("vm-crash").state is State.ACKNOWLEDGED


class TestDuplicateAcrossLedgers:
    def test_two_ledgers_same_operation_duplicate_reported(
        self, store: Store, venue: Server
    ) -> None:
        """Invariant 5: moto ignores ClientToken; the second instance is reported."""
        first = rig(store, adapter(venue.url), CLS)
        first.gate.submit("run_instance", "vm-dup", RUN)
        with temporary_store() as other:
            rig(other, adapter(venue.url), CLS).gate.submit("run_instance", "vm-dup", RUN)
        assert [d[0] for d in first.rec.sweep().new_divergences] == ["duplicate-effect"]


class TestOrphanAndTermination:
    def test_instance_launched_outside_the_boundary_is_an_orphan(
        self, store: Store, venue: Server
    ) -> None:
        r = rig(store, adapter(venue.url), CLS)
        r.gate.submit("run_instance", "vm-in", RUN)
        outside = Ec2Driver(venue.url, SECRET, adapter).direct_effect()
        divs = r.rec.sweep().new_divergences
        assert [(d[0], d[2]) for d in divs] == [("orphan", (outside,))]

    def test_vanished_after_termination_is_not_missing_at_venue(
        self, store: Store, venue: Server
    ) -> None:
        """An instance EC2 stopped listing long after its launch is outside the window: a row
        submitted before the window is left to probes, never reported missing-at-venue."""
        r = rig(store, adapter(venue.url), CLS)
        op = r.gate.submit("run_instance", "vm-old", RUN)
        ec2: Any = adapter(venue.url)._ec2
        ec2.terminate_instances(InstanceIds=[op.venue_id])
        venue.reset()  # the venue no longer lists it
        r.clock.advance(700)  # past the adapter's 600 s lookback
        report = r.rec.sweep()
        assert report.new_divergences == []
        # Inside the window the same absence is a divergence: the window is what makes it safe.
        r2 = rig(store, adapter(venue.url), CLS, clock=r.clock)
        r2.gate.submit("run_instance", "vm-new", RUN)
        venue.reset()
        r2.clock.advance(3)
        assert [d[0] for d in r2.rec.sweep().new_divergences] == ["missing-at-venue"]


class TestCredentialCanary:
    def test_secret_never_in_errors_logs_receipts_or_audit(
        self, store: Store, venue: Server, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Invariant 6."""
        caplog.set_level(logging.DEBUG)
        r = rig(store, adapter(venue.url), CLS)
        texts = [repr(r.gate.submit("run_instance", "vm-ok", RUN)), repr(adapter(venue.url))]
        dead = rig(store, adapter("http://127.0.0.1:9"), CLS)
        try:
            dead.gate.submit("run_instance", "vm-dead", RUN)
        except Exception as exc:
            texts += [str(exc), repr(exc)]
        texts.append(repr(dead.gate.get("vm-dead")))
        blob = "\n".join(texts) + caplog.text + audit_text(store)
        assert SECRET not in blob and SECRET[-8:] not in blob
        assert KEY_TAG  # the tag name is public; only the secret is not


class TestKitReport:
    def test_kit_measures_moto_ignoring_the_client_token(self, venue: Server) -> None:
        rep = run_conformance(
            adapter(venue.url),
            Ec2Driver(venue.url, SECRET, adapter),
            horizon=2.0,
            versions={"boto3": version("boto3"), "moto": version("moto")},
        )
        print(rep.render())
        assert rep.honours_key == "false" and rep.failed == [], rep.render()
        assert rep.results["refusal-is-not-applied"]["status"] == "pass"
        assert rep.results["orphan-visible"]["status"] == "pass"
