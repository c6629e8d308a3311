"""The principals role: who may call, by token digest, written once over :class:`StoreHooks`.

Tokens live in the ledger, not in a config file, so every replica authenticates against the same
table and a revocation takes effect on the very next request anywhere: authentication is one
primary-key lookup per request, with no cache. A token is stored only as its SHA-256 plus a
short prefix for listings; its plaintext is returned once, by :meth:`create_principal`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

from effectgate._core.principals import ALL_SCOPES, IssuedToken, Principal, PrincipalRecord, Role
from effectgate.errors import ControlError, PrincipalExists, PrincipalNotFound
from effectgate.store._hooks import StoreHooks
from effectgate.store._tx import SharedTx
from effectgate.store.base import (
    IDENTITY_PATTERN,
    OS_PREFIX,
    SCOPE_PATTERN,
    SYSTEM_PREFIX,
    Operation,
    credential_marker,
)

__all__ = ["MAX_TOKEN_CHARS", "PrincipalRoles", "check_actor", "token_digest"]

#: Longer presented tokens are refused unhashed (a minted one has 60 characters at most).
MAX_TOKEN_CHARS = 512
# Characters of the random part kept in the listed prefix: enough to tell tokens apart, 48 of
# the 256 random bits.
_PREFIX_CHARS = 8
_COLUMNS = "name, role, scope, token_prefix, created_at, created_by, revoked_at, revoked_by"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def _mint(role: Role) -> tuple[str, str]:
    """A new token and its listed prefix. The role is in the clear (``eg_agent_...``), as
    ``init`` always wrote it: it tells a leaked token's kind at a glance and is no secret."""
    head = f"eg_{role.value}_"
    body = secrets.token_urlsafe(32)
    return head + body, head + body[:_PREFIX_CHARS]


def _check_name(name: object) -> str:
    if (
        not isinstance(name, str)
        or not IDENTITY_PATTERN.fullmatch(name)
        or name.startswith((SYSTEM_PREFIX, OS_PREFIX))
    ):
        raise ControlError(
            f"{name!r} must match {IDENTITY_PATTERN.pattern} and not start with "
            f"{SYSTEM_PREFIX!r} or {OS_PREFIX!r}",
            field="name",
        )
    return name


def _check(name: object, role: object, scope: object) -> tuple[str, Role, str]:
    """Refuse a principal outside the rules before anything is written."""
    try:
        checked = Role(str(role))
    except ValueError:
        raise ControlError(
            f"{role!r} is not a role ({', '.join(r.value for r in Role)})", field="role"
        ) from None
    every = checked is Role.OPERATOR
    if not isinstance(scope, str) or not (
        SCOPE_PATTERN.fullmatch(scope) or (every and scope == ALL_SCOPES)
    ):
        # As the config's tokens always had it: only an operator spans every tenant.
        also = (
            f' or "{ALL_SCOPES}" (every tenant)' if every else f' ("{ALL_SCOPES}": operators only)'
        )
        raise ControlError(f"{scope!r} must match {SCOPE_PATTERN.pattern}{also}", field="scope")
    return _check_name(name), checked, scope


def check_actor(actor: object) -> str:
    """Who creates or revokes: a principal's name or an ``os:`` user, never ``system:``."""
    if (
        not isinstance(actor, str)
        or not IDENTITY_PATTERN.fullmatch(actor)
        or actor.startswith(SYSTEM_PREFIX)
    ):
        raise ControlError(
            f"{actor!r} must match {IDENTITY_PATTERN.pattern} and not start with {SYSTEM_PREFIX!r}",
            field="by",
        )
    return actor


def _record(r: Sequence[Any]) -> PrincipalRecord:
    return PrincipalRecord(
        str(r[0]),
        Role(r[1]),
        str(r[2]),
        str(r[3]),
        float(r[4]),
        str(r[5]),
        None if r[6] is None else float(r[6]),
        None if r[7] is None else str(r[7]),
    )


# Read on every authenticated request, never cached (a revoked token is refused from the next
# request on): the dialect's cheapest read (StoreHooks._hot_rows).
_PRINCIPAL_BY_DIGEST = (
    "SELECT name, role, scope FROM principals WHERE token_sha256 = ? AND revoked_at IS NULL"
)


class PrincipalRoles(StoreHooks):
    """Principals and their tokens: create, list, revoke, and authenticate a token."""

    def create_principal(
        self,
        name: str,
        role: str,
        scope: str,
        *,
        created_by: str,
        now: float,
        replace: bool = False,
    ) -> IssuedToken:
        """A new principal with a fresh token, shown once in the result.

        A live principal of the same name is refused (:class:`PrincipalExists`) unless
        ``replace``, which revokes it in the same transaction: its token stops working as
        this one starts.
        """
        name, checked, scope = _check(name, role, scope)
        by = check_actor(created_by)
        token, prefix = _mint(checked)
        record = PrincipalRecord(name, checked, scope, prefix, now, by)

        def work(tx: SharedTx, _: Operation | None) -> IssuedToken:
            if replace:
                self._revoke_in(tx, name, by, now)
            inserted = tx.rows(
                f"INSERT INTO principals (token_sha256, {_COLUMNS}) "
                "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                (token_digest(token), name, checked.value, scope, prefix, now, by, None, None),
            )
            if not inserted:  # the live-name index: one live principal per name
                raise PrincipalExists(
                    f"a live principal is named {name!r}; revoke it first, or replace it",
                    field="name",
                )
            tx.audit(
                "principal_created",
                {
                    "name": name,
                    "role": checked.value,
                    "scope": scope,
                    "token_prefix": prefix,
                    "by": by,
                    **credential_marker(by),
                },
                now,
            )
            return IssuedToken(record, token)

        return self._run(work, f"create principal {name}")

    def revoke_principal(self, name: str, *, revoked_by: str, now: float) -> PrincipalRecord:
        """Revoke the live principal ``name``: its token is refused from the next request on,
        by every replica. :class:`PrincipalNotFound` when no live principal has the name."""
        name = _check_name(name)
        by = check_actor(revoked_by)

        def work(tx: SharedTx, _: Operation | None) -> PrincipalRecord:
            revoked = self._revoke_in(tx, name, by, now)
            if revoked is None:
                raise PrincipalNotFound(f"no live principal is named {name!r}", field="name")
            return revoked

        return self._run(work, f"revoke principal {name}")

    @staticmethod
    def _revoke_in(tx: SharedTx, name: str, by: str, now: float) -> PrincipalRecord | None:
        rows = tx.rows(
            "UPDATE principals SET revoked_at = ?, revoked_by = ? "
            f"WHERE name = ? AND revoked_at IS NULL RETURNING {_COLUMNS}",
            (now, by, name),
        )
        if not rows:
            return None
        record = _record(rows[0])
        tx.audit(
            "principal_revoked",
            {"name": name, "token_prefix": record.token_prefix, "by": by, **credential_marker(by)},
            now,
        )
        return record

    def list_principals(self, *, include_revoked: bool = False) -> list[PrincipalRecord]:
        """Principals by name (live ones; with ``include_revoked``, every token ever issued)."""
        where = "" if include_revoked else "WHERE revoked_at IS NULL "
        return [
            _record(r)
            for r in self._rows(
                f"SELECT {_COLUMNS} FROM principals {where}ORDER BY name, created_at",
                (),
                "list_principals",
            )
        ]

    def principal_for_token(self, token: str) -> Principal | None:
        """The live principal holding ``token``, or None (unknown, revoked, or malformed).

        One primary-key lookup by digest: the digest of a guess says nothing about the digests
        near it, so an index probe leaks no more than a constant-time scan would.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            return None
        rows = self._hot_rows(_PRINCIPAL_BY_DIGEST, (token_digest(token),), "principal_for_token")
        if not rows:
            return None
        name, role, scope = rows[0]
        return Principal(str(name), Role(role), str(scope))
