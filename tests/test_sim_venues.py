"""The simulator's venue models (issue 38 item 2): each key contract behaves as its real venue
does, the actor driving them holds every invariant on clean code and replays byte for byte,
and its mutations are caught only when it runs. Invariants 1-5, each test naming its own."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from effectgate._core.clock import ManualClock
from effectgate._execute.adapter import OutboundRequest, Outcome
from effectgate._sim.actors.venues import GATEWAY, MODELS, VenueModels
from effectgate._sim.simulator import run_seed
from effectgate._sim.venues import adapters as va
from effectgate._sim.venues import models
from effectgate.errors import AdapterError
from simkit import assert_caught_only_with

SEEDS = range(6)


def _request(key: str, amount: str = "10.00", account: str = "acct-1") -> OutboundRequest:
    return OutboundRequest(key, "vm", {"account": account, "amount": amount, "currency": "usd"})


class TestKeyContracts:
    """Invariant 5's ground: what each model does with a second request under one key."""

    def test_window_venue_honours_the_key_for_24h_then_makes_a_second_effect(self) -> None:
        clock = ManualClock()
        adapter = va.WindowAdapter(models.WindowVenue(clock))
        first = adapter.execute(_request("s:a"), timeout=1.0)
        clock.advance(models.KEY_WINDOW - 1)
        assert adapter.execute(_request("s:a"), timeout=1.0).venue_id == first.venue_id
        with pytest.raises(AdapterError, match="other parameters"):
            adapter.execute(_request("s:a", amount="11.00"), timeout=1.0)
        clock.advance(2)
        assert adapter.execute(_request("s:a"), timeout=1.0).venue_id != first.venue_id
        assert len(adapter.venue.effects_for("s:a")) == 2

    def test_token_venue_refuses_other_parameters_under_a_token(self) -> None:
        adapter = va.TokenAdapter(models.TokenVenue(ManualClock()))
        first = adapter.execute(_request("s:a"), timeout=1.0)
        assert adapter.execute(_request("s:a"), timeout=1.0).venue_id == first.venue_id
        with pytest.raises(AdapterError, match="IdempotentParameterMismatch"):
            adapter.execute(_request("s:a", amount="11.00"), timeout=1.0)
        assert adapter.venue.mismatches == ["s:a"]

    @pytest.mark.parametrize("cls", [va.MailAdapter, va.KeylessAdapter])
    def test_keyless_venues_make_an_effect_per_delivery_listed_under_the_key(
        self, cls: type[va.SimAdapter]
    ) -> None:
        venue = models.MailVenue(ManualClock())
        adapter = cls(venue)
        adapter.execute(_request("s:a"), timeout=1.0)
        adapter.execute(_request("s:a"), timeout=1.0)
        keys = [r.operation_key for r in adapter.records(None, 10, timeout=1.0)]
        assert keys == ["s:a", "s:a"]  # both visible, one per effect: the sweep sees the duplicate
        assert cls.contract.honours_key.value == "false"

    def test_lagging_venue_lists_an_effect_only_after_its_delay(self) -> None:
        clock = ManualClock()
        venue = models.LaggingVenue(clock)
        venue.next_lag = 90.0
        adapter = va.LaggingAdapter(venue)
        receipt = adapter.execute(_request("s:a"), timeout=1.0)
        assert receipt.outcome is Outcome.APPLIED and adapter.probe("s:a") == []
        clock.advance(90)
        assert adapter.probe("s:a") == [receipt.venue_id]

    def test_refusal_is_not_applied_with_proof_and_lost_replies_are_unknown(self) -> None:
        venue = models.KeylessVenue(ManualClock())
        adapter = va.KeylessAdapter(venue)
        refused = adapter.execute(_request("s:a", account="acct-closed"), timeout=1.0)
        assert refused.outcome is Outcome.NOT_APPLIED and refused.proof is not None
        venue.fail_next("after")
        with pytest.raises(AdapterError):
            adapter.execute(_request("s:b"), timeout=1.0)
        assert len(venue.effects_for("s:b")) == 1  # applied, though its reply was lost


class TestGatewayModel:
    def test_the_gateways_upstream_adapter_keeps_the_key_and_lists_what_the_tool_made(self) -> None:
        """Invariant 5 through the MCP gateway's real upstream adapter: the key goes to the
        simulated tool as its key argument, a repeat inside the window is the first effect,
        the listing shows each effect under its key, and a tool error is unknown, not failed."""
        venue = models.WindowVenue(ManualClock())
        adapter = va.upstream_adapter(venue)
        first = adapter.execute(_request("s:a", amount="12.34"), timeout=1.0)
        again = adapter.execute(_request("s:a", amount="12.34"), timeout=1.0)
        assert first.outcome is Outcome.APPLIED and again.venue_id == first.venue_id
        assert dict(venue.effects[0].params)["amount"] == "12.34"  # sent as the number 12.34
        listed = adapter.records(None, 10, timeout=1.0)
        assert [(r.operation_key, r.venue_id) for r in listed] == [("s:a", first.venue_id)]
        refused = adapter.execute(_request("s:b", account="acct-closed"), timeout=1.0)
        assert refused.outcome is Outcome.UNKNOWN


class TestDeclaredContracts:
    def test_venues_that_cannot_keep_a_key_declare_it_and_claim_no_exactly_once(self) -> None:
        """Invariant 5 (docs/adapters.md, the venue contract): mail and the keyless venue
        declare ``honours_key = "false"``, so no class on them claims exactly-once; no model
        claims it without a conformance report either."""
        from effectgate.adapters.conformance.kit import AT_MOST_ONCE, delivery_claim

        declared = {cls.name: cls.contract.honours_key.value for _, _, cls in MODELS}
        assert declared == {
            "sim-window": "true",
            "sim-token": "true",
            "sim-mail": "false",
            "sim-keyless": "false",
            "sim-lagging": "true",
        }
        for name, honours in declared.items():
            assert delivery_claim(honours, None, name)[0] == AT_MOST_ONCE


class TestVenueActor:
    def test_clean_code_holds_every_invariant_with_the_venue_models(self) -> None:
        """Invariants 1-5 (the actor's checks and the shared ones) on a few seeds, alone and
        among the default actors; the same seed gives the same digest twice."""
        for seed in SEEDS:
            alone = run_seed(seed, actors=[VenueModels()])
            assert alone.violations == [], (seed, alone.violations)
            assert run_seed(seed, actors=[VenueModels()]).digest == alone.digest
            full = run_seed(seed)
            assert full.violations == [], (seed, full.violations)

    def test_every_model_is_driven_and_duplicates_and_late_records_are_reported(self) -> None:
        """Invariants 4, 5: over a dozen seeds every model takes charges, the keyless ones show
        duplicates the sweep reports, and the lagging one's late records are reported (an
        acknowledged row missing past the horizon, or a write-off that then appears)."""
        sent: Counter[str] = Counter()
        reported: Counter[str] = Counter()
        for seed in range(12):
            for line in run_seed(seed, actors=[VenueModels()]).history:
                if " venue-send: " in line and "-> acknowledged" in line:
                    sent[line.split(" venue-send: ")[1].split()[0]] += 1
                reported.update(re.findall(r"([a-z-]+):venues:vm-", line))
        assert set(sent) == {*(name for name, _, _ in MODELS), GATEWAY}, sent
        late = reported["missing-at-venue"] + reported["ledger-says-failed"]
        assert reported["duplicate-effect"] > 0 and late > 0, reported

    @pytest.mark.parametrize("name", ["message_id_key_unread", "window_listing_unsorted"])
    def test_its_mutations_are_caught_only_when_the_venue_models_run(self, name: str) -> None:
        """Invariants 4, 5: without the venue models the bug goes unseen; with them it is
        caught, and the failing seed replays to the same digest."""
        # window_listing_unsorted was first caught at seed 6, 21, 44, 3 and 28 as actors came.
        assert_caught_only_with(name, VenueModels, clean_seeds=4, invariants={4, 5})
