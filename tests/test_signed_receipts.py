"""Signed operation receipts (issue 41 part 2): what a receipt states, that any change to it or
the wrong key fails offline verification, that a later contradiction supersedes it, and that
keys rotate. On every store."""

from __future__ import annotations

import copy
import json
import os
import stat
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from effectgate import Gate, LimitPolicy, Operator, PolicySet, Reconciler, State
from effectgate._core.canonical import MAX_SAFE_INT, canonical_json
from effectgate._core.receipt_statement import statements
from effectgate._evidence.receipt_signing import (
    RECEIPT_KEY_ENV,
    ReceiptSigner,
    check_receipts,
    generate_key,
    load_public_keys,
    load_receipts,
    load_signer,
    signer_from,
    verify_receipt,
)
from effectgate._evidence.signed_receipts import issue_receipts
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, OperationNotFound, ReceiptInvalid, ReceiptUnavailable
from effectgate.examples import EXAMPLE_ORDER, default_registry
from effectgate.store.roles import Store
from effectgate.testing import ManualClock


@dataclass
class World:
    store: Store
    venue: PaperVenue
    gate: Gate
    operator: Operator
    reconciler: Reconciler
    clock: ManualClock
    signer: ReceiptSigner
    public: Path

    def receipts(self, op: str, *, history: bool = False) -> list[dict[str, Any]]:
        return issue_receipts(
            self.store, "default", op, self.signer, now=self.clock(), history=history
        )

    def keys(self) -> dict[str, Any]:
        return load_public_keys([self.public])


@pytest.fixture
def world(store: Store, tmp_path: Path) -> World:
    clock = ManualClock()
    venue = PaperVenue(clock=clock)
    registry = default_registry()
    policy = PolicySet({"submit_order": LimitPolicy(Decimal("1000"), approve_above=Decimal("900"))})
    gate = Gate(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, policy=policy,
        clock=clock,
    )  # fmt: skip
    reconciler = Reconciler(
        store=store, registry=registry, adapters={"paper": PaperAdapter(venue)}, clock=clock
    )
    _, private, public = generate_key(tmp_path / "keys")
    operator = Operator(store=store, registry=registry, clock=clock)
    return World(store, venue, gate, operator, reconciler, clock, load_signer(str(private)), public)


def approved(w: World, op: str = "op-big") -> str:
    """An order above the approval threshold, approved by alice, sent and acknowledged."""
    row = w.gate.submit("submit_order", op, dict(EXAMPLE_ORDER, quantity="9.5"))
    w.operator.approve(op, fingerprint=row.fingerprint, approver="alice", reason="checked")
    assert w.gate.dispatch(op).state is State.ACKNOWLEDGED
    return row.fingerprint


class TestCanonicalJson:
    json_values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-MAX_SAFE_INT, MAX_SAFE_INT)
        | st.text(st.characters(exclude_categories=("Cs",))),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",))), inner, max_size=4)
        ),
        max_leaves=20,
    )

    @given(json_values)
    def test_it_is_rfc8785(self, value: Any) -> None:
        """The signed bytes are the RFC 8785 oracle's, non-BMP keys (UTF-16 order) included."""
        assert canonical_json(value) == rfc8785.dumps(value)

    @pytest.mark.parametrize("bad", [1.5, 2**53, {"a": float("nan")}, {1: "x"}, "\ud800"])
    def test_what_has_no_exact_form_is_refused(self, bad: Any) -> None:
        with pytest.raises((TypeError, ValueError)):
            canonical_json(bad)


class TestWhatItStates:
    def test_the_receipt_of_an_approved_acknowledged_operation(self, world: World) -> None:
        """Key, fingerprint, state, venue id, decision, approvals with principals, times, and
        the chained audit entry it rests on with the lane's head (invariant 8: the chain covers
        what the receipt says)."""
        fingerprint = approved(world)
        (receipt,) = world.receipts("op-big")
        s = receipt["statement"]
        row = world.store.get("default", "op-big")
        assert row is not None
        assert s["operation"] == {
            "scope": "default", "operation_id": "op-big", "op_key": "default:op-big",
            "action": "submit_order",
        }  # fmt: skip
        assert (s["fingerprint"], s["state"], s["venue_id"]) == (
            fingerprint, "acknowledged", row.venue_id,
        )  # fmt: skip
        assert s["decision"]["outcome"] == "allowed" and s["decision"]["tier"] == "approve"
        assert s["decision"]["reasons"] == ["value 950.0 above 900 needs approval"]
        assert [(a["principal"], a["verdict"], a["fingerprint"]) for a in s["approvals"]] == [
            ("alice", "approve", fingerprint)
        ]
        assert s["times"]["final_at"].endswith("Z") and s["standing"] == "final"
        entries = world.store.audit_entries(scope="default", operation_id="op-big")
        final = next(e for e in entries if json.loads(e.detail_text).get("state") == "acknowledged")
        assert s["audit"] == {"lane": final.lane, "seq": final.seq, "hash": final.hash}
        lane_head = world.store.audit_heads()[final.lane]
        assert (receipt["audit_head"]["seq"], receipt["audit_head"]["hash"]) == lane_head
        assert receipt["key_id"] == world.signer.key_id
        assert verify_receipt(receipt, world.keys()).state == "acknowledged"

    def test_a_rejection_is_final_too_and_issuing_writes_nothing(self, world: World) -> None:
        world.gate.submit("submit_order", "op-no", dict(EXAMPLE_ORDER, quantity="50"))
        before = world.store.audit_heads()
        (receipt,) = world.receipts("op-no")
        assert receipt["statement"]["state"] == "rejected"
        assert receipt["statement"]["decision"]["outcome"] == "refused"
        assert world.store.audit_heads() == before  # a receipt restates, it records nothing

    def test_a_denial_and_a_shadowed_row_are_final(self, world: World) -> None:
        big = world.gate.submit("submit_order", "op-d", dict(EXAMPLE_ORDER, quantity="9.5"))
        world.operator.refuse("op-d", fingerprint=big.fingerprint, approver="bob", reason="no")
        (denied,) = world.receipts("op-d")
        assert denied["statement"]["state"] == "denied"
        assert denied["statement"]["settled"]["by"] == "bob"
        assert [a["verdict"] for a in denied["statement"]["approvals"]] == ["refuse"]
        world.operator.set_shadow("submit_order", True, operator="ops")
        world.gate.submit("submit_order", "op-s", EXAMPLE_ORDER)
        (shadowed,) = world.receipts("op-s")
        assert (shadowed["statement"]["state"], shadowed["statement"]["venue_id"]) == (
            "shadowed", None,
        )  # fmt: skip

    def test_the_same_ledger_gives_the_same_receipt_id(self, world: World) -> None:
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        first = world.receipts("op-1")[0]
        world.clock.advance(5)
        world.gate.submit("submit_order", "op-2", EXAMPLE_ORDER)  # the head moves
        again = world.receipts("op-1")[0]
        assert again["receipt_id"] == first["receipt_id"]
        assert again["issued_at"] != first["issued_at"]


class TestUnavailable:
    def test_not_final_unknown_or_no_key(self, world: World) -> None:
        world.gate.submit("submit_order", "op-wait", dict(EXAMPLE_ORDER, quantity="9.5"))
        with pytest.raises(ReceiptUnavailable) as exc:
            world.receipts("op-wait")
        assert exc.value.reason == "not_final" and "awaiting_approval" in exc.value.message
        with pytest.raises(OperationNotFound):
            world.receipts("op-none")
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        with pytest.raises(ReceiptUnavailable) as exc:
            issue_receipts(world.store, "default", "op-1", None, now=world.clock())
        assert exc.value.reason == "no_signing_key" and exc.value.status == 409

    def test_a_trail_pruned_past_the_final_entry_states_nothing(self, world: World) -> None:
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        row = world.store.get("default", "op-1")
        assert row is not None
        with pytest.raises(ReceiptUnavailable) as exc:
            statements(row.to_dict(), [], [])
        assert exc.value.reason == "audit_pruned"

    def test_an_uncertain_row_has_no_receipt(self, world: World) -> None:
        """Invariant 3: a row whose outcome is unknown is not final, so nothing is stated."""
        world.venue.fail_next(1, after_apply=True)
        assert world.gate.submit("submit_order", "op-u", EXAMPLE_ORDER).state is State.SUBMITTED
        with pytest.raises(ReceiptUnavailable):
            world.receipts("op-u")


class TestTamperingAndKeys:
    @pytest.mark.parametrize(
        "path,value",
        [
            (("statement", "state"), "failed"),
            (("statement", "venue_id"), "V-999999"),
            (("statement", "fingerprint"), "0" * 64),
            (("statement", "approvals", 0, "principal"), "mallory"),
            (("statement", "decision", "tier"), "validate"),
            (("issued_at",), "2000-01-01T00:00:00.000000Z"),
            (("audit_head", "seq"), 1),
        ],
    )
    def test_a_tampered_field_fails(self, world: World, path: tuple[Any, ...], value: Any) -> None:
        approved(world)
        (receipt,) = world.receipts("op-big")
        forged = copy.deepcopy(receipt)
        target: Any = forged
        for step in path[:-1]:
            target = target[step]
        assert target[path[-1]] != value
        target[path[-1]] = value
        with pytest.raises(ReceiptInvalid) as exc:
            verify_receipt(forged, world.keys())
        assert exc.value.reason == "bad_signature" and "changed after signing" in exc.value.message
        assert verify_receipt(receipt, world.keys()).receipt_id == receipt["receipt_id"]

    def test_a_wrong_key_fails(self, world: World, tmp_path: Path) -> None:
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        (receipt,) = world.receipts("op-1")
        _, _, other_pub = generate_key(tmp_path / "other")
        with pytest.raises(ReceiptInvalid) as exc:
            verify_receipt(receipt, load_public_keys([other_pub]))
        assert exc.value.reason == "unknown_key" and receipt["key_id"] in exc.value.message
        # Another key claiming this key id: the id picks the real key, which refuses it.
        impostor = ReceiptSigner(Ed25519PrivateKey.generate(), world.signer.key_id)
        forged = impostor.sign({k: v for k, v in receipt.items() if k != "signature"})
        with pytest.raises(ReceiptInvalid) as exc:
            verify_receipt(forged, world.keys())
        assert exc.value.reason == "bad_signature"

    def test_key_rotation(self, world: World, tmp_path: Path) -> None:
        """Old receipts verify with the old public key, new ones with the new; a verifier given
        only the new key refuses the old receipt by its key id."""
        world.gate.submit("submit_order", "op-old", EXAMPLE_ORDER)
        old = world.receipts("op-old")[0]
        _, new_private, new_public = generate_key(tmp_path / "rotated")
        world.signer = load_signer(str(new_private))
        world.gate.submit("submit_order", "op-new", EXAMPLE_ORDER)
        new = world.receipts("op-new")[0]
        assert old["key_id"] != new["key_id"]
        both = load_public_keys([world.public, new_public])
        assert [r.key_id for r in check_receipts([old, new], both)] == [
            old["key_id"], new["key_id"],
        ]  # fmt: skip
        with pytest.raises(ReceiptInvalid) as exc:
            verify_receipt(old, load_public_keys([new_public]))
        assert exc.value.reason == "unknown_key"

    def test_malformed_documents(self, world: World) -> None:
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        (receipt,) = world.receipts("op-1")
        text = json.dumps(receipt)
        assert load_receipts(text) == [receipt]
        with pytest.raises(ReceiptInvalid, match="duplicate member"):
            load_receipts(text[:-1] + ', "key_id": "x"}')
        for broken in ({**receipt, "extra": 1}, {**receipt, "format": "other/2"}, {}):
            with pytest.raises(ReceiptInvalid) as exc:
                verify_receipt(broken, world.keys())
            assert exc.value.reason == "malformed"


class TestSupersession:
    def test_a_duplicate_effect_supersedes_the_receipt(self, world: World) -> None:
        """Invariant 5: the duplicate the sweep sees is stated by a new receipt naming the one
        it supersedes; the verifier reports both."""
        world.gate.submit("submit_order", "op-1", EXAMPLE_ORDER)
        before = world.receipts("op-1")[0]
        world.venue.set_honour_key(False)
        world.venue.inject_record("default:op-1")
        kinds = [d[0] for d in world.reconciler.sweep().new_divergences]
        assert kinds == ["duplicate-effect"]
        first, current = world.receipts("op-1", history=True)
        assert first["receipt_id"] == before["receipt_id"]  # the receipt handed out earlier
        s = current["statement"]
        assert (s["standing"], s["revision"], s["supersedes"]) == (
            "contradicted", 1, before["receipt_id"],
        )  # fmt: skip
        assert [c["kind"] for c in s["contradictions"]] == ["duplicate-effect"]
        assert world.receipts("op-1")[0]["receipt_id"] == current["receipt_id"]
        old, new = check_receipts([before, current], world.keys())
        assert old.superseded_by == new.receipt_id and new.supersedes == old.receipt_id
        assert new.superseded_by is None

    def test_a_written_off_row_found_at_the_venue(self, world: World) -> None:
        """Invariant 4: a row written off as failed that appears later is reported, in a new
        receipt too."""
        world.venue.fail_next(1, after_apply=False)
        world.gate.submit("submit_order", "op-lost", EXAMPLE_ORDER)
        world.clock.advance(61)
        world.reconciler.sweep()
        (failed,) = world.receipts("op-lost")
        assert failed["statement"]["state"] == "failed"
        assert failed["statement"]["settled"]["by"] == "reconciler"
        world.venue.inject_record("default:op-lost")
        world.reconciler.sweep()
        (current,) = world.receipts("op-lost")
        assert current["statement"]["supersedes"] == failed["receipt_id"]
        (contradiction,) = current["statement"]["contradictions"]
        assert contradiction["kind"] == "ledger-says-failed" and contradiction["venue_ids"]


class TestKeys:
    def test_keygen_writes_a_private_file_only_its_owner_reads(self, tmp_path: Path) -> None:
        kid, private, public = generate_key(tmp_path)
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
        assert private.name == f"receipt-{kid}.pem" and public.name == f"receipt-{kid}.pub.pem"
        assert list(load_public_keys([public])) == [kid] == [load_signer(str(private)).key_id]

    def test_the_environment_holds_a_path_or_the_pem(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        kid, private, _ = generate_key(tmp_path)
        monkeypatch.delenv(RECEIPT_KEY_ENV, raising=False)
        assert signer_from(None) is None
        assert signer_from(str(private)).key_id == kid  # type: ignore[union-attr]
        monkeypatch.setenv(RECEIPT_KEY_ENV, private.read_text())
        assert signer_from("/nonexistent.pem").key_id == kid  # type: ignore[union-attr]
        monkeypatch.setenv(RECEIPT_KEY_ENV, str(private))
        assert signer_from(None).key_id == kid  # type: ignore[union-attr]

    def test_unusable_keys_are_config_errors(self, tmp_path: Path) -> None:
        locked = tmp_path / "locked.pem"
        locked.write_bytes(
            Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"pw"),
            )
        )
        junk = tmp_path / "junk.pem"
        junk.write_text("not a key")
        for path, why in ((locked, "encrypted"), (junk, "not a PEM"), (tmp_path / "no", "read")):
            with pytest.raises(ConfigError, match=why):
                load_signer(str(path))
