"""Speculative pre-execution (seed 000) through the Gate against the paper venue's sandbox:
both incidents of the seed, the verdict rules, the strategies and the configuration checks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from effectgate import Gate, KeyNamespaceDivergence, LimitPolicy, PolicySet, SpeculationStalled
from effectgate._core.intent import Registry
from effectgate._core.speculation import (
    CommitStep,
    KeyStrategy,
    Speculation,
    SpeculationMode,
    SpeculationRecord,
    SpeculationVerdict,
    decide_commit,
)
from effectgate._core.states import State
from effectgate._core.venue import VenueContract
from effectgate._execute.adapter import DryRun, OutboundRequest
from effectgate._execute.operator import Operator
from effectgate._service import Service, parse_config
from effectgate.adapters._paper_sandbox import PaperSandbox, SandboxMode
from effectgate.adapters._paper_server import PaperVenueServer, serve_paper_venue
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, RegistryError
from effectgate.examples import EXAMPLE_ORDER, cancel_order_class, submit_order_class
from effectgate.store.roles import Store
from effectgate.testing import ManualClock
from servicekit import config_text

INTENT = dict(EXAMPLE_ORDER)  # notional 400
BIG = {**INTENT, "quantity": "9.5"}  # notional 950: needs an approval


def registry(
    spec: Speculation | None, venue: VenueContract | None = None, operation_ids: str = "caller"
) -> Registry:
    ac = submit_order_class()
    ac = replace(ac, speculation=spec, venue=venue or ac.venue, operation_ids=operation_ids)
    return Registry([ac, cancel_order_class()])


@dataclass
class World:
    store: Store
    venue: PaperVenue
    sandbox: PaperSandbox
    gate: Gate
    clock: ManualClock

    def row(self, op: str) -> object:
        return self.store.get("default", op)


def make_world(
    store: Store,
    *,
    mode: SandboxMode = SandboxMode.HONEST,
    spec: Speculation | None = None,
    venue_contract: VenueContract | None = None,
    lifetime: float = 60.0,
    max_quantity: int | None = None,
    operation_ids: str = "caller",
) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock, max_quantity=max_quantity)
    sandbox = PaperSandbox(venue, mode=mode, lifetime=lifetime, clock=clock)
    spec = spec or Speculation(verdict_lifetime=lifetime)
    gate = Gate(
        store=store,
        registry=registry(spec, venue_contract, operation_ids),
        adapters={"paper": PaperAdapter(venue, sandbox=sandbox)},
        policy=PolicySet(
            {
                "submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900")),
                "cancel_order": LimitPolicy(),
            }
        ),
        clock=clock,
        dispatch_timeout=10.0,
        in_flight_grace=2.0,
    )
    return World(store, venue, sandbox, gate, clock)


def approve(w: World | tuple[Store, ManualClock], op: str) -> None:
    store, clock = (w.store, w.clock) if isinstance(w, World) else w
    row = store.get("default", op)
    assert row is not None
    store.decide_approval(
        "default",
        op,
        approver="alice",
        fingerprint=row.fingerprint,
        approve=True,
        reason="ok",
        now=clock(),
    )


class TestIncidentOneDoubleCharge:
    """Seed 000, first incident: an attempt counter in the ledger key double-charges under
    retry pressure; effectgate's path over the same venue does not (invariant 1)."""

    def test_a_naive_pair_of_derivations_double_charges(self) -> None:
        """The seed's runtime: sandbox key sha(call|args), ledger key sha(call|args|attempt).
        A lost reply makes it retry with attempt 1: a new ledger key, a second charge."""
        venue = PaperVenue(honour_key=True)
        args = "sha-of-args"

        def ledger_key(attempt: int) -> str:
            return hashlib.sha256(f"call-1|{args}|{attempt}".encode()).hexdigest()

        venue.fail_next(1, after_apply=True)  # applied, but the reply is lost
        with pytest.raises(ConnectionError):
            venue.submit(ledger_key(0), "submit_order", {"quantity": "4"})
        venue.submit(ledger_key(1), "submit_order", {"quantity": "4"})  # the retry
        assert venue.effect_count == 2  # double charge, single verdict

    def test_effectgate_sends_once_under_the_same_retry_pressure(self, store: Store) -> None:
        w = make_world(store, mode=SandboxMode.NAIVE)
        w.venue.fail_next(1, after_apply=True)
        first = w.gate.submit("submit_order", "op-1", INTENT)
        assert first.state is State.SUBMITTED  # uncertain: the reply was lost
        for _ in range(5):  # the harness retries under the same operation id
            again = w.gate.submit("submit_order", "op-1", INTENT)
            assert again.replayed
        assert w.venue.effect_count == 1
        assert w.store.speculation_state("default", "op-1")[0] == 6  # attempts kept for audit

    def test_a_naive_sandbox_key_under_retry_is_a_divergence_not_a_second_send(
        self, store: Store
    ) -> None:
        """The sandbox times out past the bound (the caller gets an error, no silent pending);
        the retry re-speculates and the naive sandbox mints an attempt-scoped key: the row is
        quarantined with both keys and the attempt, and nothing is sent."""
        w = make_world(store, mode=SandboxMode.NAIVE)
        w.sandbox.time_out_next(10)
        with pytest.raises(SpeculationStalled):
            w.gate.submit("submit_order", "op-1", INTENT)
        row = w.store.get("default", "op-1")
        assert row is not None and row.state is State.VALIDATED
        assert row.detail and "no committable speculation verdict" in row.detail
        w.sandbox.time_out_next(0)
        with pytest.raises(KeyNamespaceDivergence) as err:
            w.gate.submit("submit_order", "op-1", INTENT)
        assert err.value.ledger_key == "default:op-1"
        assert err.value.sandbox_key == "default:op-1~a2"
        assert err.value.attempt == 2 and err.value.operation_id == "op-1"
        row = w.store.get("default", "op-1")
        assert row is not None and row.state is State.QUARANTINED
        assert w.venue.effect_count == 0
        # Never retried: asking again returns the quarantined row and sends nothing.
        assert w.gate.submit("submit_order", "op-1", INTENT).state is State.QUARANTINED
        assert w.venue.effect_count == 0


class TestIncidentTwoEvictedVerdict:
    """Seed 000, second incident: an evicted verdict re-minted under a new key is a
    KeyNamespaceDivergence and a quarantined row, never an indefinite pending (invariant 11)."""

    def test_eviction_during_a_long_approval_quarantines(self, store: Store) -> None:
        w = make_world(store, mode=SandboxMode.EVICTING)
        row = w.gate.submit("submit_order", "op-1", BIG)
        assert row.state is State.AWAITING_APPROVAL
        first = w.store.latest_speculation("default", "op-1")
        assert first is not None and first.sandbox_key == "default:op-1"
        w.clock.advance(3600)  # the approval takes an hour; the sandbox evicts the verdict
        approve(w, "op-1")
        with pytest.raises(KeyNamespaceDivergence) as err:
            w.gate.dispatch("op-1")
        assert err.value.sandbox_key == "default:op-1~e2"
        assert err.value.ledger_key == "default:op-1"
        row = w.store.get("default", "op-1")
        assert row is not None and row.state is State.QUARANTINED
        assert w.venue.effect_count == 0
        kinds = [e.kind for e in w.store.audit_entries(scope="default", operation_id="op-1")]
        assert kinds.count("speculation") == 2
        entry = [
            e
            for e in w.store.audit_entries(scope="default", operation_id="op-1")
            if e.kind == "transition" and e.detail.get("state") == "quarantined"
        ][-1]
        record = entry.detail["record"]
        assert record["ledger_key"] == "default:op-1"
        assert record["sandbox_key"] == "default:op-1~e2"
        assert len(record["speculations"]) == 2
        assert record["strategy"] == "refuse" and record["attempt"] == 1
        alerts = [a.kind for a in w.store.list_alerts()]
        assert "key-namespace-divergence" in alerts

    def test_an_honest_sandbox_re_speculates_under_the_same_key_and_commits(
        self, store: Store
    ) -> None:
        w = make_world(store, mode=SandboxMode.HONEST)
        w.gate.submit("submit_order", "op-1", BIG)
        w.clock.advance(3600)
        approve(w, "op-1")
        row = w.gate.dispatch("op-1")
        assert row.state is State.ACKNOWLEDGED
        records = w.store.speculations("default", "op-1")
        assert [r.sandbox_key for r in records] == ["default:op-1", "default:op-1"]
        assert w.venue.effect_count == 1
        # The commit record carries both keys (seed 000's operational effect).
        commit = [
            e.detail
            for e in w.store.audit_entries(scope="default", operation_id="op-1")
            if e.kind == "transition" and e.detail.get("state") == "submitted"
        ]
        assert len(commit) == 1
        assert commit[0]["speculation"]["ledger_key"] == "default:op-1"
        assert commit[0]["speculation"]["sandbox_key"] == "default:op-1"
        assert commit[0]["speculation"]["seq"] == 2
        assert commit[0]["speculation"]["strategy"] == "refuse"


class TestMintedIdsAtApproval:
    """A speculating class whose operation ids are minted at approval (docs/service.md). The
    proposal speculates under its handle, so the approvers see a verdict; the handle never
    reaches the venue, so the operation minted at the approval speculates again under its own
    key before it commits: the commit's key is the key its verdict was given for (one key
    authority, invariant 11), and one deliberate action makes one effect (invariant 1)."""

    def minted(self, store: Store, max_quantity: int | None = None) -> tuple[World, Operator]:
        w = make_world(store, operation_ids="minted", max_quantity=max_quantity)
        return w, Operator(store=store, registry=w.gate.registry, clock=w.clock)

    def test_the_minted_operation_commits_under_the_key_it_was_speculated_for(
        self, store: Store
    ) -> None:
        w, operator = self.minted(store)
        waiting = w.gate.submit("submit_order", "req-1", BIG)
        handle = waiting.operation_id
        assert waiting.state is State.AWAITING_APPROVAL and handle.startswith("proposal:")
        seen = w.store.latest_speculation("default", handle)
        assert seen is not None and seen.verdict is SpeculationVerdict.ALLOW
        w.clock.advance(3600)  # longer than the verdict lives: it could not be used anyway
        op = operator.approve(handle, fingerprint=waiting.fingerprint, approver="al").operation
        key = f"default:{op.operation_id}"
        assert w.gate.dispatch(op.operation_id).state is State.ACKNOWLEDGED
        records = w.store.speculations("default", op.operation_id)
        assert [(r.operation_key, r.sandbox_key) for r in records] == [(key, key)]
        assert [r.operation_key for r in w.venue.visible_records()] == [key]
        assert w.venue.effect_count == 1
        assert w.gate.dispatch(handle).state is State.SUPERSEDED  # the handle never runs

    def test_a_deny_the_approvers_saw_still_rejects_the_minted_operation(
        self, store: Store
    ) -> None:
        w, operator = self.minted(store, max_quantity=5)
        waiting = w.gate.submit("submit_order", "req-1", BIG)
        seen = w.store.latest_speculation("default", waiting.operation_id)
        assert seen is not None and seen.verdict is SpeculationVerdict.DENY
        op = operator.approve(
            waiting.operation_id, fingerprint=waiting.fingerprint, approver="al"
        ).operation
        out = w.gate.dispatch(op.operation_id)
        assert out.state is State.REJECTED
        assert w.venue.effect_count == 0


class TestVerdicts:
    """The verdict rules at commit: DENY rejects, a timeout re-speculates within the bound."""

    def test_deny_rejects_with_the_sandboxs_reason(self, store: Store) -> None:
        w = make_world(store, max_quantity=2)
        row = w.gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.REJECTED
        assert row.detail is not None and "sandbox denied" in row.detail
        assert "over maximum" in row.detail
        assert w.venue.calls == 0

    def test_deny_names_the_sandbox_as_the_reason(self, store: Store) -> None:
        """Issue 39 item 4: the reason names what decided. The policy allowed the action and
        the sandbox refused it, so the row's ``reason`` (as stored, and as the call returned)
        is the sandbox's, not the policy's ``within limit``."""
        w = make_world(store, max_quantity=2)
        row = w.gate.submit("submit_order", "op-1", INTENT)
        stored = w.store.get("default", "op-1")
        assert stored is not None
        for r in (row, stored):
            assert r.state is State.REJECTED
            assert r.reason is not None and r.reason.startswith("sandbox denied: ")
            assert "over maximum" in r.reason and "within limit" not in r.reason

    def test_deny_seen_by_approvers_rejects_at_dispatch(self, store: Store) -> None:
        """validated -> rejected: the last-moment refusal of the state table."""
        w = make_world(store, max_quantity=2)
        assert w.gate.submit("submit_order", "op-1", BIG).state is State.AWAITING_APPROVAL
        spec = w.store.latest_speculation("default", "op-1")
        assert spec is not None and spec.verdict.value == "DENY"
        approve(w, "op-1")
        row = w.gate.dispatch("op-1")
        assert row.state is State.REJECTED and w.venue.calls == 0

    def test_a_timeout_is_speculated_again_under_the_same_key(self, store: Store) -> None:
        w = make_world(store)
        w.sandbox.time_out_next(2)
        row = w.gate.submit("submit_order", "op-1", INTENT)
        assert row.state is State.ACKNOWLEDGED
        keys = {r.sandbox_key for r in w.store.speculations("default", "op-1")}
        assert keys == {"default:op-1"}
        assert w.sandbox.dry_runs == 3

    def test_past_the_bound_the_caller_gets_an_error_and_an_alert(self, store: Store) -> None:
        """Invariant 11: no silent pending."""
        w = make_world(store)
        w.sandbox.time_out_next(100)
        with pytest.raises(SpeculationStalled):
            w.gate.submit("submit_order", "op-1", INTENT)
        row = w.store.get("default", "op-1")
        assert row is not None and row.state is State.VALIDATED and row.detail
        assert w.sandbox.dry_runs == 1 + 3  # at proposal, then max_tries
        assert "speculation-stalled" in [a.kind for a in w.store.list_alerts()]
        assert w.venue.calls == 0

    def test_a_verdict_expiring_inside_the_retry_horizon_is_never_committed(
        self, store: Store
    ) -> None:
        w = make_world(store, lifetime=60.0)
        w.gate.propose("submit_order", "op-1", INTENT)
        w.clock.advance(50)  # 10s left < horizon 12s
        w.gate.dispatch("op-1")
        records = w.store.speculations("default", "op-1")
        assert len(records) == 2 and w.venue.effect_count == 1


class _FixedKeyAdapter(PaperAdapter):
    """A sandbox that always mints its own key (a venue fake)."""

    def __init__(self, venue: PaperVenue, keys: list[str]) -> None:
        super().__init__(venue)
        self.keys = keys

    @property
    def can_speculate(self) -> bool:
        return True

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        key = self.keys[0] if len(self.keys) == 1 else self.keys.pop(0)
        return DryRun("ALLOW", "fine", key, 120.0)


class TestStrategies:
    """Reconciliation strategies are explicit per class; the default refuses."""

    def _gate(self, store: Store, spec: Speculation, keys: list[str]) -> tuple[Gate, PaperVenue]:
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        contract = VenueContract(sandbox_key_persistence=600.0)
        gate = Gate(
            store=store,
            registry=registry(spec, contract),
            adapters={"paper": _FixedKeyAdapter(venue, keys)},
            policy=PolicySet({"submit_order": LimitPolicy(), "cancel_order": LimitPolicy()}),
            clock=clock,
        )
        return gate, venue

    def test_refuse_quarantines_a_sandbox_minted_key(self, store: Store) -> None:
        gate, venue = self._gate(store, Speculation(), ["sbx-1"])
        with pytest.raises(KeyNamespaceDivergence):
            gate.submit("submit_order", "op-1", INTENT)
        assert venue.calls == 0

    def test_sandbox_authoritative_declares_the_mapping_and_checks_it(self, store: Store) -> None:
        spec = Speculation(strategy=KeyStrategy.SANDBOX_AUTHORITATIVE)
        gate, venue = self._gate(store, spec, ["sbx-1"])
        assert gate.submit("submit_order", "op-1", INTENT).state is State.ACKNOWLEDGED
        assert store.speculation_state("default", "op-1")[1] == "sbx-1"
        assert venue.effect_count == 1

    def test_sandbox_authoritative_with_a_changed_key_is_a_divergence(self, store: Store) -> None:
        spec = Speculation(strategy=KeyStrategy.SANDBOX_AUTHORITATIVE)
        gate, venue = self._gate(store, spec, ["sbx-1", "sbx-2"])
        gate.propose("submit_order", "op-1", INTENT)  # speculates: sbx-1
        store.declare_key_mapping("default", "op-1", "default:op-1", "sbx-0", now=0.0)
        with pytest.raises(KeyNamespaceDivergence):
            gate.dispatch("op-1")
        assert venue.calls == 0


class TestConfiguration:
    """Condition 3 and the strategies' promises are checked when the configuration loads."""

    def test_lifetime_must_exceed_the_retry_horizon(self, store: Store) -> None:
        with pytest.raises(ConfigError, match="retry horizon"):
            make_world(store, lifetime=12.0)

    def test_required_speculation_needs_an_adapter_that_can(self, store: Store) -> None:
        with pytest.raises(ConfigError, match="cannot speculate"):
            Gate(
                store=store,
                registry=registry(Speculation()),
                adapters={"paper": PaperAdapter(PaperVenue())},
                policy=PolicySet({"submit_order": LimitPolicy()}),
            )

    def test_optional_speculation_without_a_sandbox_dispatches_as_before(
        self, store: Store
    ) -> None:
        venue = PaperVenue()
        gate = Gate(
            store=store,
            registry=registry(Speculation(mode=SpeculationMode.OPTIONAL)),
            adapters={"paper": PaperAdapter(venue)},
            policy=PolicySet({"submit_order": LimitPolicy(), "cancel_order": LimitPolicy()}),
        )
        assert gate.submit("submit_order", "op-1", INTENT).state is State.ACKNOWLEDGED

    def test_ledger_authoritative_needs_the_sandbox_to_use_the_given_key(self) -> None:
        with pytest.raises(RegistryError, match="sandbox_uses_given_key"):
            registry(Speculation(strategy=KeyStrategy.LEDGER_AUTHORITATIVE))
        registry(
            Speculation(strategy=KeyStrategy.LEDGER_AUTHORITATIVE),
            VenueContract(sandbox_uses_given_key=True),
        )

    def test_sandbox_authoritative_needs_keys_that_outlive_the_verdict(self) -> None:
        spec = Speculation(strategy=KeyStrategy.SANDBOX_AUTHORITATIVE, verdict_lifetime=60)
        with pytest.raises(RegistryError, match="sandbox_key_persistence"):
            registry(spec, VenueContract(sandbox_key_persistence=30.0))
        registry(spec, VenueContract(sandbox_key_persistence=3600.0))


class TestOverHTTP:
    """The paper venue's dry-run endpoint under a real HTTP server, through the HTTP adapter:
    the same two incidents rehearsed over the wire."""

    def _world(
        self, store: Store, mode: SandboxMode
    ) -> tuple[Gate, PaperVenue, PaperSandbox, ManualClock, PaperVenueServer]:
        clock = ManualClock()
        venue = PaperVenue(clock=clock)
        sandbox = PaperSandbox(venue, mode=mode, lifetime=60.0, clock=clock)
        server = serve_paper_venue(venue, api_key="k-test", sandbox=sandbox).start()
        adapter = HttpVenueAdapter(server.url, credential="k-test", speculation=True)
        gate = Gate(
            store=store,
            registry=registry(Speculation(verdict_lifetime=60.0)),
            adapters={"paper": adapter},
            policy=PolicySet(
                {"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900"))}
            ),
            clock=clock,
        )
        return gate, venue, sandbox, clock, server

    def test_honest_sandbox_commits_once(self, store: Store) -> None:
        gate, venue, sandbox, _, server = self._world(store, SandboxMode.HONEST)
        with server:
            assert gate.submit("submit_order", "op-1", INTENT).state is State.ACKNOWLEDGED
        assert venue.effect_count == 1 and sandbox.dry_runs == 1

    def test_evicting_sandbox_quarantines_over_http(self, store: Store) -> None:
        gate, venue, _, clock, server = self._world(store, SandboxMode.EVICTING)
        with server:
            gate.submit("submit_order", "op-1", BIG)
            clock.advance(3600)
            approve((store, clock), "op-1")
            with pytest.raises(KeyNamespaceDivergence) as err:
                gate.dispatch("op-1")
        assert err.value.sandbox_key == "default:op-1~e2"
        assert venue.effect_count == 0

    def test_the_endpoint_refuses_a_malformed_dry_run(self, store: Store) -> None:
        venue = PaperVenue()
        with serve_paper_venue(venue, api_key="k", sandbox=PaperSandbox(venue)).start() as srv:
            headers = {"Authorization": "Bearer k", "Idempotency-Key": "s:o"}
            bad = httpx.post(f"{srv.url}/v1/dry-runs", json={"action": "x"}, headers=headers)
            assert bad.status_code == 400
            nokey = httpx.post(
                f"{srv.url}/v1/dry-runs",
                json={"action": "x", "effect": {}, "attempt": 1},
                headers={"Authorization": "Bearer k"},
            )
            assert nokey.status_code == 400
            wrong = httpx.post(
                f"{srv.url}/v1/dry-runs",
                json={"action": "x", "effect": {}, "attempt": 1},
                headers={**headers, "Authorization": "Bearer nope"},
            )
            assert wrong.status_code == 401
        assert venue.calls == 0


def _record(**changes: object) -> SpeculationRecord:
    base = SpeculationRecord(
        scope="default",
        operation_id="op-1",
        operation_key="default:op-1",
        fingerprint="f" * 64,
        sandbox_key="default:op-1",
        verdict=SpeculationVerdict.ALLOW,
        reason="ok",
        expires_at=1000.0,
        attempt=1,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _decide(record: SpeculationRecord, **kw: object) -> CommitStep:
    args: dict[str, object] = {
        "operation_key": "default:op-1",
        "fingerprint": "f" * 64,
        "spec": Speculation(),
        "mapping": None,
        "now": 900.0,
        "horizon": 12.0,
    }
    args.update(kw)
    return decide_commit(record, **args).step  # type: ignore[arg-type]


class TestCommitCheckOrder:
    """The commit check of seed 000, in its order: identity, then verdict and lifetime, then
    keys (a DENY of another operation is an identity failure, not a refusal)."""

    def test_identity_comes_first(self) -> None:
        denied_elsewhere = _record(subject="default:op-2", verdict=SpeculationVerdict.DENY)
        assert _decide(denied_elsewhere) is CommitStep.QUARANTINE
        changed = _record(fingerprint="0" * 64, verdict=SpeculationVerdict.RETRYABLE_TIMEOUT)
        assert _decide(changed) is CommitStep.QUARANTINE

    def test_then_the_verdict_and_its_lifetime(self) -> None:
        assert _decide(_record(verdict=SpeculationVerdict.DENY)) is CommitStep.REJECT
        timed_out = _record(verdict=SpeculationVerdict.RETRYABLE_TIMEOUT, sandbox_key="x")
        assert _decide(timed_out) is CommitStep.RESPECULATE
        assert _decide(_record(expires_at=911.0)) is CommitStep.RESPECULATE  # 11s < 12s
        assert _decide(_record(expires_at=913.0)) is CommitStep.COMMIT
        assert _decide(None) is CommitStep.RESPECULATE  # type: ignore[arg-type]

    def test_then_the_keys(self) -> None:
        other = _record(sandbox_key="sbx-1")
        assert _decide(other) is CommitStep.QUARANTINE
        assert _decide(_record(sandbox_key=None)) is CommitStep.QUARANTINE
        sandbox = Speculation(strategy=KeyStrategy.SANDBOX_AUTHORITATIVE)
        assert _decide(other, spec=sandbox) is CommitStep.COMMIT
        assert _decide(other, spec=sandbox, mapping="sbx-1") is CommitStep.COMMIT
        assert _decide(other, spec=sandbox, mapping="sbx-0") is CommitStep.QUARANTINE


class _WrongSubject(PaperAdapter):
    """A venue fake whose sandbox reports having validated another operation."""

    @property
    def can_speculate(self) -> bool:
        return True

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        return DryRun("ALLOW", "fine", request.operation_key, 120.0, subject="default:op-9")


class TestIdentityMismatch:
    def test_a_speculation_of_another_operation_quarantines(self, store: Store) -> None:
        venue = PaperVenue()
        gate = Gate(
            store=store,
            registry=registry(Speculation()),
            adapters={"paper": _WrongSubject(venue)},
            policy=PolicySet({"submit_order": LimitPolicy(), "cancel_order": LimitPolicy()}),
        )
        with pytest.raises(KeyNamespaceDivergence, match="identity mismatch"):
            gate.submit("submit_order", "op-1", INTENT)
        row = store.get("default", "op-1")
        assert row is not None and row.state is State.QUARANTINED and venue.calls == 0


class TestConfigFile:
    """``[classes.NAME.speculation]`` in the service's config file; condition 3 at load."""

    def _text(self, tmp_path: Path, speculation: str, adapter: str = 'kind = "paper"') -> str:
        text = config_text(store_url=f"sqlite:///{tmp_path}/l.db")
        text = text.replace('[adapters.venue]\nkind = "paper"', f"[adapters.venue]\n{adapter}")
        return text + "\n[classes.submit_order.speculation]\n" + speculation

    def test_a_lifetime_inside_the_retry_horizon_is_refused_at_load(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"classes\.submit_order\.speculation.*retry horizon"):
            parse_config(self._text(tmp_path, "verdict_lifetime = 5\n"), "test.toml")

    def test_an_unknown_strategy_is_refused(self, tmp_path: Path) -> None:
        text = self._text(tmp_path, 'verdict_lifetime = 60\nstrategy = "guess"\n')
        with pytest.raises(ConfigError, match="strategy"):
            parse_config(text, "test.toml")

    def test_the_paper_sandbox_from_the_config_speculates(self, tmp_path: Path) -> None:
        adapter = 'kind = "paper"\nsandbox = "honest"\nsandbox_lifetime = 120'
        cfg = parse_config(self._text(tmp_path, "verdict_lifetime = 60\n", adapter), "t.toml")
        spec = cfg.registry.get("submit_order").speculation
        assert spec is not None and spec.mode is SpeculationMode.REQUIRED
        service = Service(cfg)
        try:
            row = service.gate.submit("submit_order", "op-1", INTENT, scope="alpha")
            assert row.state is State.ACKNOWLEDGED
            assert len(service.store.speculations("alpha", "op-1")) == 1
        finally:
            service.close()

    def test_required_speculation_without_a_sandbox_refuses_to_start(self, tmp_path: Path) -> None:
        cfg = parse_config(self._text(tmp_path, "verdict_lifetime = 60\n"), "t.toml")
        with pytest.raises(ConfigError, match="cannot speculate"):
            Service(cfg)
