"""Contract revisions in the venue block (docs/continuations.md, "Contract revisions"): pinned
at registration; unknown, floating, malformed, conflicting or contradictory revisions refused
naming them, in Python, in the config file and in ``effectgate check``; the proofs that lean on
a venue's promise need the promise pinned. Continuations also charge the original's run budget.

Invariant 9 (a retry or compensation is a separately authorised and charged action that needs
proof) and invariant 12 (budgets never overdraw).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from effectgate import RunBudget, State
from effectgate._core.continuation import ContinuationProof, Ground
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._core.venue import KeyHonour, ReadView, VenueContract
from effectgate._doors.cli.main import app
from effectgate._service import parse_config
from effectgate.errors import ConfigError, ContinuationRefused, RegistryError
from effectgate.store.roles import Store
from runkit import tool_call
from servicekit import config_text
from test_continuations import INTENT, World

GOOD = config_text(store_url="sqlite:///:memory:")


def _venue_block(*lines: str) -> str:
    return GOOD + "\n[classes.submit_order.venue]\n" + "\n".join(lines) + "\n"


class TestPinnedAtRegistration:
    def test_revisions_are_normalised_and_frozen(self) -> None:
        v = VenueContract(
            honours_key=KeyHonour.HONOURED,
            revisions={"reconcile": "r-2", "idempotency": "k-7"},  # type: ignore[arg-type]
        )
        assert v.revisions == (("idempotency", "k-7"), ("reconcile", "r-2"))
        assert v.revision("idempotency") == "k-7" and v.revision("nothing") is None
        # The same pin twice is one pin, not an ambiguity.
        again = VenueContract(revisions=(("idempotency", "k-7"), ("idempotency", "k-7")))
        assert again.revisions == (("idempotency", "k-7"),)

    @pytest.mark.parametrize(
        ("revisions", "needle"),
        [
            ((("idempotency", "k-1"), ("idempotency", "k-2")), "ambiguous idempotency_revision"),
            ((("reconcile", "latest"),), "'latest' is ambiguous"),
            ((("idempotency", "*"),), "'*' is ambiguous"),
            ((("pricing", "p-1"),), "unknown contract revision 'pricing'"),
            ((("idempotency", ""),), "is not a revision"),
            ((("idempotency", "has space"),), "is not a revision"),
            ((("idempotency",),), "not a (contract, revision) pair"),
        ],
    )
    def test_bad_revisions_are_refused_naming_them(
        self, revisions: tuple[tuple[str, ...], ...], needle: str
    ) -> None:
        with pytest.raises(RegistryError) as err:
            VenueContract(revisions=revisions)  # type: ignore[arg-type]
        assert needle in err.value.message

    def test_a_revision_of_a_promise_the_venue_does_not_make_is_refused(self) -> None:
        with pytest.raises(RegistryError, match="honours_key = false"):
            VenueContract(honours_key=KeyHonour.IGNORED, revisions=(("idempotency", "k-1"),))
        with pytest.raises(RegistryError, match="read_view = none"):
            VenueContract(read_view=ReadView.NONE, revisions=(("reconcile", "r-1"),))


class TestInTheConfigFile:
    def test_pinned_revisions_are_read(self) -> None:
        cfg = parse_config(
            _venue_block(
                'honours_key = "true"',
                'idempotency_revision = "paper-keys-1"',
                'reconcile_revision = "paper-read-3"',
            ),
            "svc.toml",
        )
        venue = cfg.registry.get("submit_order").venue
        assert dict(venue.revisions) == {"idempotency": "paper-keys-1", "reconcile": "paper-read-3"}

    @pytest.mark.parametrize(
        ("lines", "needles"),
        [
            (
                ('reconcile_revision = "latest"',),
                ("classes.submit_order.venue.reconcile_revision", "'latest' is ambiguous"),
            ),
            (
                ('honours_key = "false"', 'idempotency_revision = "k-1"'),
                ("classes.submit_order.venue.idempotency_revision", "honours_key = false"),
            ),
            (('pricing_revision = "p-1"',), ("classes.submit_order.venue.pricing_revision",)),
        ],
    )
    def test_bad_revisions_are_refused_naming_the_field(
        self, lines: tuple[str, ...], needles: tuple[str, ...]
    ) -> None:
        with pytest.raises(ConfigError) as info:
            parse_config(_venue_block(*lines), "svc.toml")
        for needle in needles:
            assert needle in info.value.message, info.value.message

    def test_check_refuses_an_ambiguous_revision_and_shows_pinned_ones(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "effectgate.toml"
        path.write_text(
            _venue_block('reconcile_revision = "head"').replace(
                "sqlite:///:memory:", f"sqlite:///{tmp_path}/l.db"
            )
        )
        out = CliRunner().invoke(app, ["check", "--config", str(path)])
        assert out.exit_code != 0
        assert "reconcile_revision" in out.output and "ambiguous" in out.output
        path.write_text(
            _venue_block('honours_key = "true"', 'idempotency_revision = "paper-keys-1"').replace(
                "sqlite:///:memory:", f"sqlite:///{tmp_path}/l.db"
            )
        )
        out = CliRunner().invoke(app, ["check", "--config", str(path)])
        assert out.exit_code == 0, out.output
        assert "revisions: idempotency paper-keys-1" in out.output


def _written_off(w: World) -> str:
    """An original journalled ``submitted`` with no answer, written off past the horizon."""
    from effectgate._execute.adapter import OutboundRequest, Receipt
    from effectgate.errors import AdapterError
    from effectgate.testing import CountingAdapter

    class Silent(CountingAdapter):
        def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
            raise AdapterError("no answer")

    w.agent_gate.adapters["paper"] = Silent(w.adapter.inner)
    row = w.agent_gate.submit("submit_order", "op-1", INTENT, principal="agent-1")
    assert row.state is State.SUBMITTED
    w.agent_gate.adapters["paper"] = w.adapter
    w.clock.advance(3600)
    from effectgate import Reconciler

    Reconciler(
        store=w.store, registry=w.agent_gate.registry, adapters={"paper": w.adapter}, clock=w.clock
    ).repair()
    written = w.store.get("default", "op-1")
    assert written is not None and written.state is State.FAILED
    return w.service.chain("op-1").predecessor_digest or ""


class TestProofsLeanOnPinnedPromises:
    def test_an_authoritative_write_off_needs_a_pinned_reconcile_revision(
        self, store: Store
    ) -> None:
        """Invariant 9: the write-off is proof of absence only under a pinned read contract."""
        w = World(store, read_view=ReadView.AUTHORITATIVE, revisions=())
        digest = _written_off(w)
        proof = w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "absent")
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry("op-1", proof=proof, by="alice", seq=1, predecessor=digest)
        assert err.value.reason == "revision_unpinned" and "reconcile_revision" in str(err.value)
        pinned = World(store, read_view=ReadView.AUTHORITATIVE)
        chain = pinned.service.chain("op-1")
        row = pinned.service.retry(
            "op-1", proof=proof, by="alice", seq=1, predecessor=chain.predecessor_digest or ""
        )
        assert row.operation_id == "cont:op-1:1" and row.state is State.ACKNOWLEDGED

    def test_provider_idempotency_needs_a_pinned_idempotency_revision(self, store: Store) -> None:
        w = World(store, revisions=())
        digest = _written_off(w)
        proof = ContinuationProof(
            Ground.PROVIDER_IDEMPOTENCY,
            Proof(EvidenceKind.VENUE_REFUSAL, "probe", note="no record under the key"),
            w.clock() + 300,
        )
        with pytest.raises(ContinuationRefused) as err:
            w.service.retry("op-1", proof=proof, by="alice", seq=1, predecessor=digest)
        assert err.value.reason == "revision_unpinned"
        assert "idempotency_revision" in str(err.value)
        assert w.store.continuations("default", "op-1") == []


class TestChargedToTheRun:
    def test_a_continuation_takes_a_slot_of_the_originals_run_and_is_refused_past_it(
        self, store: Store
    ) -> None:
        """Invariant 12: each continuation is charged one tool-call slot of the original's run,
        in its own dispatch transaction; past the budget it is refused before sending and
        holds no slot (the charge rolled back with the refused dispatch)."""
        w = World(store)
        store.set_run_budget("default", "run-1", RunBudget(max_tool_calls=2), now=0.5, actor="h")
        call = tool_call("t-1")
        store.record_run_call("default", call, now=1.0, actor="h")
        original = w.agent_gate.submit(
            "submit_order", "op-1", {**INTENT, "quantity": "5000"}, run_call=call.ref
        )
        assert original.state is State.FAILED
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 1

        def retry(seq: int) -> object:
            chain = w.service.chain("op-1")
            return w.service.retry(
                "op-1",
                proof=w.proof(Ground.PERMANENT_ABSENCE, EvidenceKind.VENUE_REFUSAL, "r"),
                by="alice",
                seq=seq,
                predecessor=chain.predecessor_digest or "",
            )

        first = retry(1)
        assert getattr(first, "state", None) is State.FAILED  # sent, and refused by the venue
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 2
        sent = w.adapter.execute_calls
        second = retry(2)
        assert getattr(second, "state", None) is State.REJECTED
        assert "budget_exceeded" in (getattr(second, "detail", "") or "")
        assert w.adapter.execute_calls == sent, "refused before sending"
        used = store.run_budget("default", "run-1")
        assert used is not None and used.usage.tool_calls == 2, "the refused one holds no slot"
