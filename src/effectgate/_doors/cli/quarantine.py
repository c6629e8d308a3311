"""``effectgate quarantine list|show|resolve|take-over``: the operators' queue (seed 000).

Every command goes through :class:`~effectgate._execute.quarantine.QuarantineService`, the one
resolution service the HTTP operator API calls too.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from effectgate._core.principals import Capability
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt
from effectgate._doors.cli._common import (
    JsonOpt,
    ScopeOpt,
    StoreOpt,
    acting_operator,
    console,
    operator_on,
    print_json,
    timestamp,
)
from effectgate._doors.cli._tables import print_table
from effectgate._execute.quarantine import QuarantineService

__all__ = ["register"]

quarantine_app = typer.Typer(
    help="The quarantine queue: rows that wait for an operator's resolution.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(quarantine_app, name="quarantine")


@quarantine_app.command("list")
def quarantine_list(
    store: StoreOpt,
    scope: Annotated[str | None, typer.Option(help="Only this tenant scope.")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Quarantined rows, the longest-waiting first."""
    with operator_on(store) as op:
        service = QuarantineService(op.store, clock=op.clock)
        rows = service.list(scope, limit=limit)
        count, age = service.summary()
    if as_json:
        print_json({"count": count, "oldest_age_seconds": age, "rows": [r.to_dict() for r in rows]})
        return
    _table(
        f"quarantine: {count} row(s), oldest waiting {age:.0f}s",
        ["operation", "action", "since", "why"],
        [[r.op_key, r.action, timestamp(r.updated_at), r.detail or "-"] for r in rows],
    )


@quarantine_app.command("show")
def quarantine_show(
    operation_id: str, store: StoreOpt, scope: ScopeOpt = "default", as_json: JsonOpt = False
) -> None:
    """Both keys, both records and the audit entries of both phases, side by side."""
    with operator_on(store) as op:
        view = QuarantineService(op.store, clock=op.clock).show(scope, operation_id)
    data = view.to_dict()
    if as_json:
        print_json(data)
        return
    row = view.row
    console.print(
        f"{row.op_key} [{row.action}] {row.state.value} "
        f"(from {data['quarantined_from'] or '-'}; dispatched: {view.dispatched}; "
        f"attempts: {view.arrivals})"
    )
    console.print(f"  why: {row.detail or '-'}")
    console.print(f"  ledger key : {view.ledger_key}")
    console.print(f"  sandbox key: {', '.join(str(k) for k in view.sandbox_keys) or '-'}")
    if view.declared_mapping:
        console.print(f"  declared mapping: {view.declared_mapping}")
    _table(
        "speculations",
        ["seq", "at", "verdict", "sandbox key", "expires", "attempt", "reason"],
        [
            [
                str(s.seq),
                timestamp(s.at),
                s.verdict.value,
                str(s.sandbox_key),
                timestamp(s.expires_at),
                str(s.attempt),
                s.reason,
            ]
            for s in view.speculations
        ],
    )
    left = view.speculative_audit
    right = view.ledger_audit
    _table(
        "audit: speculative phase | ledger phase",
        ["speculative", "ledger"],
        [
            [_line(left[i]) if i < len(left) else "", _line(right[i]) if i < len(right) else ""]
            for i in range(max(len(left), len(right)))
        ],
    )


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    print_table(console, table)


def _line(entry: object) -> str:
    seq, kind, detail = (getattr(entry, n) for n in ("seq", "kind", "detail"))
    return f"#{seq} {kind} {json.dumps(detail, default=str)[:160]}"


@quarantine_app.command("resolve")
def quarantine_resolve(
    operation_id: str,
    store: StoreOpt,
    outcome: Annotated[ResolutionOutcome, typer.Option(help="applied, failed or released.")],
    evidence: Annotated[EvidenceKind, typer.Option(help="What proves it.")],
    reason: Annotated[str, typer.Option(help="Why (audited).")],
    reference: Annotated[
        str | None, typer.Option(help="Where the evidence is (a venue id, a console URL).")
    ] = None,
    note: Annotated[str | None, typer.Option(help="An attestation's own words.")] = None,
    venue_id: Annotated[str | None, typer.Option(help="The venue's id of the effect.")] = None,
    scope: ScopeOpt = "default",
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Settle a quarantined row with evidence: applied, failed, or released (never dispatched)."""
    with acting_operator(store, token_env, Capability.OPERATE, scope) as (op, actor):
        resolution = Resolution(
            outcome=outcome,
            by=actor,
            proof=Proof(evidence, reference=reference, note=note),
            reason=reason,
            venue_id=venue_id,
        )
        row = QuarantineService(op.store, clock=op.clock).resolve(scope, operation_id, resolution)
    console.print(f"{row.op_key}: {row.state.value} ({outcome.value}, {evidence.value})")


@quarantine_app.command("take-over")
def quarantine_take_over(
    operation_id: str,
    store: StoreOpt,
    reason: Annotated[str, typer.Option(help="Why an operator takes it (audited).")],
    scope: ScopeOpt = "default",
    token_env: TokenEnvOpt = TOKEN_ENV,
) -> None:
    """Take a non-terminal row (e.g. an uncertain one) into the queue."""
    with acting_operator(store, token_env, Capability.OPERATE, scope) as (op, actor):
        row = QuarantineService(op.store, clock=op.clock).take_over(
            scope, operation_id, by=actor, reason=reason
        )
    console.print(f"{row.op_key}: {row.state.value}")
