"""``effectgate continue retry|compensate OP``: a continuation, only with proof.

Each command goes through :class:`~effectgate._execute.continuations.ContinuationService`, the
same service the Python API and the operator HTTP API call (docs/continuations.md). The fence
(``--seq`` and ``--predecessor``) comes from ``effectgate ops show OP``: what the operator saw.
"""

from __future__ import annotations

from typing import Annotated

import typer

from effectgate._core.continuation import ContinuationProof, Ground
from effectgate._core.principals import Capability
from effectgate._core.resolution import EvidenceKind, Proof
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli._common import JsonOpt, ScopeOpt, json_arg, print_json
from effectgate.errors import EffectgateError

__all__ = ["register"]

continue_app = typer.Typer(
    help="Retry or compensate an operation: a new, separately authorised action with proof.",
    no_args_is_help=True,
)

ConfigArg = Annotated[str, typer.Option("--config", help="The service config (effectgate.toml).")]
GroundOpt = Annotated[Ground, typer.Option("--proof", help="The ground of the proof.")]
EvidenceOpt = Annotated[EvidenceKind, typer.Option("--evidence", help="The evidence's kind.")]
ReferenceOpt = Annotated[
    str | None, typer.Option("--reference", help="Where the evidence is (a venue id).")
]
NoteOpt = Annotated[str | None, typer.Option("--note", help="Why it proves it (audited).")]
ExpiresOpt = Annotated[
    float, typer.Option("--expires-in", min=1.0, max=86400.0, help="Seconds the proof holds.")
]
SeqOpt = Annotated[int, typer.Option("--seq", min=1, help="next_seq from `ops show`.")]
PredecessorOpt = Annotated[
    str, typer.Option("--predecessor", help="predecessor_digest from `ops show`.")
]


def register(app: typer.Typer) -> None:
    app.add_typer(continue_app, name="continue")


def _run(
    kind: str,
    operation_id: str,
    config: str,
    ground: Ground,
    evidence: EvidenceKind,
    reference: str | None,
    note: str | None,
    expires_in: float,
    seq: int,
    predecessor: str,
    scope: str,
    token_env: str,
    intent: str | None,
) -> None:
    from effectgate._doors.cli.service import service_from
    from effectgate._execute.continuations import ContinuationService

    service = service_from(config, log_level="warning")
    try:
        by = acting(
            service.store,
            token_env,
            Capability.OPERATE,
            scope=scope,
            config_tokens=service.config.tokens,
        )
        conts = ContinuationService(
            service.gate, probe_timeout=service.config.service.probe_timeout
        )
        proof = ContinuationProof(
            ground, Proof(evidence, reference, note), service.gate.clock() + expires_in
        )
        if kind == "retry":
            row = conts.retry(
                operation_id, proof=proof, by=by, seq=seq, predecessor=predecessor, scope=scope
            )
        else:
            body = json_arg(intent or "", "--intent")
            if not isinstance(body, dict):
                raise typer.BadParameter("--intent must be a JSON object")
            row = conts.compensate(
                operation_id,
                body,
                proof=proof,
                by=by,
                seq=seq,
                predecessor=predecessor,
                scope=scope,
            )
        chain = conts.chain(operation_id, scope=scope).to_dict()
    except EffectgateError as exc:
        print_json(exc.to_dict())
        raise typer.Exit(1) from None
    finally:
        service.close()
    print_json({"continuation": row.to_dict(), "chain": chain})


@continue_app.command("retry")
def continue_retry(
    operation_id: str,
    config: ConfigArg,
    ground: GroundOpt,
    evidence: EvidenceOpt,
    seq: SeqOpt,
    predecessor: PredecessorOpt,
    reference: ReferenceOpt = None,
    note: NoteOpt = None,
    expires_in: ExpiresOpt = 300.0,
    scope: ScopeOpt = "default",
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = True,
) -> None:
    """Retry OP's exact intent as a new operation (cont:OP:SEQ)."""
    _run(
        "retry",
        operation_id,
        config,
        ground,
        evidence,
        reference,
        note,
        expires_in,
        seq,
        predecessor,
        scope,
        token_env,
        None,
    )


@continue_app.command("compensate")
def continue_compensate(
    operation_id: str,
    config: ConfigArg,
    ground: GroundOpt,
    evidence: EvidenceOpt,
    seq: SeqOpt,
    predecessor: PredecessorOpt,
    intent: Annotated[str, typer.Option("--intent", help="The compensation's intent (JSON).")],
    reference: ReferenceOpt = None,
    note: NoteOpt = None,
    expires_in: ExpiresOpt = 300.0,
    scope: ScopeOpt = "default",
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = True,
) -> None:
    """Undo OP's applied effect with its class's declared compensation."""
    _run(
        "compensate",
        operation_id,
        config,
        ground,
        evidence,
        reference,
        note,
        expires_in,
        seq,
        predecessor,
        scope,
        token_env,
        intent,
    )
