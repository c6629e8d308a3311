"""Mutations of tenant isolation (:mod:`effectgate._sim.actors.tenants`): a scope's view that
lets a neighbour's records in. Each replaces one named store function or method for a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from effectgate._sim.actor import Mutation

__all__ = ["TENANTS"]

F = Callable[..., Any]


def _scope_as_prefix(original: F) -> F:
    # The listing matches the scope as a prefix of the row's (a LIKE 'scope%' bug): "t" also
    # lists "t-x", "t0", "t_x" and "tx".
    def list_operations(self: Any, *, scope: str | None = None, limit: int = 100, **kw: Any) -> Any:
        if scope is None:
            return original(self, limit=limit, **kw)
        rows = original(self, limit=10_000, **kw)
        return [r for r in rows if r.scope.startswith(scope)][:limit]

    return list_operations


def _get_by_id_only(original: F) -> F:
    # A lookup that misses in its scope falls back to the id alone (a query without the scope).
    def get(self: Any, scope: str, operation_id: str) -> Any:
        row = original(self, scope, operation_id)
        if row is not None:
            return row
        others = self.list_operations(limit=10_000)
        return next((r for r in others if r.operation_id == operation_id), None)

    return get


def _range_one_off(original: F) -> F:
    # The scope's key range starts at the bare scope instead of "scope:": the keys of every
    # scope sorting between "t" and "t;" ("t-x:...", "t0:...") fall inside "t"'s.
    def scope_key_range(scope: str) -> tuple[str, str]:
        _, high = original(scope)
        return scope, high

    return scope_key_range


_L = "effectgate.store._ledger:SQLStore"

TENANTS: tuple[Mutation, ...] = (
    Mutation("tenant_scope_as_prefix", "2 tenant_views", f"{_L}.list_operations", _scope_as_prefix),
    Mutation("tenant_get_by_id_only", "1,2 tenant_views", f"{_L}.get", _get_by_id_only),
    Mutation(
        "tenant_key_range_one_off",
        "2 tenant_views",
        "effectgate.store._hooks:scope_key_range",
        _range_one_off,
    ),
)
