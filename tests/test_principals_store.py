"""The principals role (issue 11, item 5), against the Store protocol on every store engine.

Tokens live in the ledger as SHA-256 digests; authentication reads the store, so a revocation
holds at once in every replica (a second store handle on the same ledger stands in for one).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from effectgate._core.principals import Principal, Role
from effectgate._evidence.audit import verify_store
from effectgate.errors import ControlError, PrincipalExists, PrincipalNotFound
from effectgate.store.roles import Principals, Store


def kinds(store: Store) -> list[str]:
    return [e.kind for e in store.iter_audit() if e.kind.startswith("principal_")]


class TestCreateListLookup:
    def test_a_token_is_shown_once_and_stored_as_its_digest(self, store: Store) -> None:
        assert isinstance(store, Principals)
        issued = store.create_principal("agent-a", "agent", "alpha", created_by="ops", now=10.0)
        assert issued.token.startswith("eg_agent_") and len(issued.token) > 40
        assert issued.token not in repr(issued)
        assert store.principal_for_token(issued.token) == Principal("agent-a", Role.AGENT, "alpha")
        [listed] = store.list_principals()
        assert (listed.name, listed.role, listed.scope, listed.created_by) == (
            "agent-a",
            Role.AGENT,
            "alpha",
            "ops",
        )
        assert listed.created_at == 10.0 and listed.live
        assert issued.token.startswith(listed.token_prefix) and len(listed.token_prefix) < 20
        # The table holds the digest and the prefix, never the plaintext.
        cells: Sequence[Any] = store._rows("SELECT * FROM principals")[0]  # type: ignore[attr-defined]
        assert hashlib.sha256(issued.token.encode()).hexdigest() in cells
        assert issued.token not in cells

    def test_unknown_empty_and_oversized_tokens_are_no_one(self, store: Store) -> None:
        issued = store.create_principal("agent-a", "agent", "alpha", created_by="ops", now=1.0)
        for token in ("", "eg_agent_nope", issued.token[:-1], issued.token + "x", "x" * 10_000):
            assert store.principal_for_token(token) is None

    def test_every_role_and_the_operator_of_every_scope(self, store: Store) -> None:
        for name, role, scope in (
            ("a", "agent", "alpha"),
            ("h", "harness", "alpha"),
            ("o", "operator", "*"),
            ("p", "approver", "beta"),
        ):
            issued = store.create_principal(name, role, scope, created_by="ops", now=1.0)
            found = store.principal_for_token(issued.token)
            assert found is not None and (found.role.value, found.scope) == (role, scope)
        assert [p.name for p in store.list_principals()] == ["a", "h", "o", "p"]

    @pytest.mark.parametrize(
        ("name", "role", "scope", "field"),
        [
            ("system:x", "agent", "alpha", "name"),
            ("os:alice", "operator", "*", "name"),
            ("bad name", "agent", "alpha", "name"),
            ("", "agent", "alpha", "name"),
            ("a", "admin", "alpha", "role"),
            ("a", "agent", "*", "scope"),
            ("a", "approver", "*", "scope"),
            ("a", "operator", "Alpha", "scope"),
        ],
    )
    def test_bad_principals_are_refused_before_anything_is_written(
        self, store: Store, name: str, role: str, scope: str, field: str
    ) -> None:
        with pytest.raises(ControlError) as info:
            store.create_principal(name, role, scope, created_by="ops", now=1.0)
        assert info.value.field == field
        assert store.list_principals(include_revoked=True) == [] and kinds(store) == []


class TestRevocation:
    def test_a_revoked_token_is_refused_at_once_by_another_replica(self, store_factory) -> None:
        """Revocation reads through the store: the other handle (another process or host on
        the same ledger) refuses the token on its very next lookup; nothing is cached."""
        here, there = store_factory(), store_factory()
        issued = here.create_principal("agent-a", "agent", "alpha", created_by="ops", now=1.0)
        assert there.principal_for_token(issued.token) is not None
        revoked = here.revoke_principal("agent-a", revoked_by="ops", now=2.0)
        assert (revoked.revoked_at, revoked.revoked_by, revoked.live) == (2.0, "ops", False)
        assert there.principal_for_token(issued.token) is None
        assert here.principal_for_token(issued.token) is None
        assert there.list_principals() == []
        [kept] = there.list_principals(include_revoked=True)
        assert kept.name == "agent-a" and kept.revoked_by == "ops"

    def test_revoking_no_one_is_refused(self, store: Store) -> None:
        with pytest.raises(PrincipalNotFound):
            store.revoke_principal("nobody", revoked_by="ops", now=1.0)
        store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        store.revoke_principal("a", revoked_by="ops", now=2.0)
        with pytest.raises(PrincipalNotFound):
            store.revoke_principal("a", revoked_by="ops", now=3.0)
        assert kinds(store) == ["principal_created", "principal_revoked"]

    def test_one_live_principal_per_name_and_replace_rotates(self, store: Store) -> None:
        first = store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        with pytest.raises(PrincipalExists):
            store.create_principal("a", "operator", "*", created_by="ops", now=2.0)
        assert store.principal_for_token(first.token) is not None
        second = store.create_principal(
            "a", "agent", "alpha", created_by="ops", now=3.0, replace=True
        )
        assert store.principal_for_token(first.token) is None
        assert store.principal_for_token(second.token) == Principal("a", Role.AGENT, "alpha")
        assert [(p.token_prefix, p.live) for p in store.list_principals(include_revoked=True)] == [
            (first.record.token_prefix, False),
            (second.record.token_prefix, True),
        ]
        assert kinds(store) == ["principal_created", "principal_revoked", "principal_created"]

    def test_concurrent_creates_of_one_name_leave_one_live(self, store_factory) -> None:
        handles = [store_factory() for _ in range(4)]

        def create(i: int) -> bool:
            try:
                handles[i].create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
                return True
            except PrincipalExists:
                return False

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(create, range(4)))
        assert results.count(True) == 1
        assert len(handles[0].list_principals(include_revoked=True)) == 1
        assert kinds(handles[0]) == ["principal_created"]


class TestAudit:
    def test_each_change_is_audited_with_its_actor_and_the_chain_verifies(
        self, store: Store
    ) -> None:
        """Invariant 8: principals' changes are chained audit entries like any other."""
        store.create_principal("a", "approver", "alpha", created_by="ops", now=1.0)
        store.create_principal("b", "agent", "alpha", created_by="os:root", now=2.0)
        store.revoke_principal("a", revoked_by="os:root", now=3.0)
        entries = [e for e in store.iter_audit() if e.kind.startswith("principal_")]
        assert [(e.kind, e.detail["name"], e.detail["by"]) for e in entries] == [
            ("principal_created", "a", "ops"),
            ("principal_created", "b", "os:root"),
            ("principal_revoked", "a", "os:root"),
        ]
        # An os: actor held the store's credentials, not a token: the entry says so.
        assert [e.detail.get("credential") for e in entries] == [None, "store", "store"]
        assert entries[0].detail["role"] == "approver" and "token" not in entries[0].detail
        assert verify_store(store).ok

    def test_the_row_and_its_audit_entry_commit_together(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The audit entry is written in the transaction that writes the row: when the entry
        cannot be written, the principal does not exist either."""
        real_run = store._run  # type: ignore[attr-defined]

        class Broken:
            def __init__(self, tx: Any) -> None:
                self._tx = tx

            def __getattr__(self, name: str) -> Any:
                return getattr(self._tx, name)

            def audit(self, *args: Any, **kw: Any) -> None:
                raise RuntimeError("audit log unavailable")

        def run(work: Any, what: str, **kw: Any) -> Any:
            return real_run(lambda tx, row: work(Broken(tx), row), what, **kw)

        monkeypatch.setattr(store, "_run", run)
        with pytest.raises(RuntimeError):
            store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        monkeypatch.undo()
        assert store.list_principals(include_revoked=True) == [] and kinds(store) == []
        issued = store.create_principal("a", "agent", "alpha", created_by="ops", now=1.0)
        monkeypatch.setattr(store, "_run", run)
        with pytest.raises(RuntimeError):
            store.revoke_principal("a", revoked_by="ops", now=2.0)
        monkeypatch.undo()
        assert store.principal_for_token(issued.token) is not None
        assert kinds(store) == ["principal_created"]
