"""Evidence that lasts (docs/evidence.md): ``effectgate audit anchor [--verify]`` (checkpoint
the audit heads outside the store, or verify the chain against them), ``audit prune`` and
``audit hold place|list|release`` (retention with legal holds), and ``effectgate verify``
(the guarantees on the user's own configuration)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt
from effectgate._doors.cli._common import (
    JsonOpt,
    StoreOpt,
    acting_operator,
    console,
    err,
    operator_on,
    print_json,
)
from effectgate.errors import ConfigError

__all__ = ["register"]

EXIT_ALARM = 3


def _providers(
    files: list[Path] | None, urls: list[str] | None, command: str | None, read_command: str | None
) -> list[object]:
    from effectgate._evidence.anchor import CommandAnchor, FileAnchor, HttpAnchor

    out: list[object] = [FileAnchor(p) for p in files or []]
    token = os.environ.get("EFFECTGATE_ANCHOR_TOKEN")
    out += [HttpAnchor(u, token=token) for u in urls or []]
    if command:
        out.append(
            CommandAnchor(
                shlex.split(command), read_argv=shlex.split(read_command) if read_command else None
            )
        )
    return out


def register(audit_app: typer.Typer) -> None:
    """Add ``anchor`` to the ``audit`` command group."""

    @audit_app.command("anchor")
    def audit_anchor(
        store: StoreOpt,
        file: Annotated[
            list[Path] | None, typer.Option(help="Append checkpoints to this file (repeatable).")
        ] = None,
        http: Annotated[
            list[str] | None,
            typer.Option(help="PUT checkpoints under this URL (bearer: $EFFECTGATE_ANCHOR_TOKEN)."),
        ] = None,
        command: Annotated[
            str | None, typer.Option(help="Run this command with the checkpoint on stdin.")
        ] = None,
        read_command: Annotated[
            str | None, typer.Option(help="A command printing the last checkpoint (--verify).")
        ] = None,
        key_env: Annotated[
            str | None, typer.Option(help="Environment variable holding the HMAC signing key.")
        ] = None,
        verify: Annotated[
            bool, typer.Option("--verify", help="Verify the chain against the last anchors.")
        ] = False,
        as_json: JsonOpt = False,
        token_env: TokenEnvOpt = TOKEN_ENV,
    ) -> None:
        """Checkpoint every lane's head to the anchors (recorded in the chain as an
        ``audit_anchored`` entry naming who); with --verify, check the chain against them
        instead (exit 3 on a truncated or forged tail)."""
        from effectgate._evidence.anchor import AnchorProvider, anchor_heads, verify_against_anchors

        key: bytes | None = None
        if key_env is not None:
            secret = os.environ.get(key_env)
            if not secret:
                err.print(f"environment variable {key_env} is not set or empty")
                raise typer.Exit(2)
            key = secret.encode()
        try:
            providers: list[AnchorProvider] = _providers(file, http, command, read_command)  # type: ignore[assignment]
            if not providers:
                raise ConfigError("give at least one of --file, --http, --command")
            acts = None if verify else token_env  # a verification only reads: nobody acts
            with acting_operator(store, acts, Capability.OPERATE) as (op, actor):
                if verify:
                    result, found = verify_against_anchors(op.store, providers, key=key)
                else:
                    checkpoint, where = anchor_heads(op.store, providers, key=key, by=actor)
        except ConfigError as exc:
            err.print(f"error: {exc.message}")
            raise typer.Exit(2) from None
        if not verify:
            if as_json:
                print_json({**checkpoint.to_dict(), "anchored_at": where})
            else:
                console.print(
                    f"anchored {len(checkpoint.heads)} head(s), digest {checkpoint.digest[:16]}"
                )
                for w in where:
                    console.print(f"  -> {w}")
            return
        if as_json:
            print_json({**result.to_dict(), "checkpoints": [c.to_dict() for c in found]})
        else:
            for f in result.findings:
                err.print(f"[red]TAMPERED[/red] {f.problem}: {f.message}")
            console.print(
                f"checked {result.checked} entries against {len(found)} checkpoint(s): "
                f"{'intact' if result.ok else 'NOT intact'}"
            )
            for lane, seq, by in result.covered:
                console.print(
                    f"  anchored head {lane}:{seq} was pruned: covered by checkpoint {by}"
                )
        if not found and not result.findings:
            err.print("no checkpoint found at any anchor: nothing to compare against")
            raise typer.Exit(EXIT_ALARM)
        if not result.ok:
            raise typer.Exit(EXIT_ALARM)


hold_app = typer.Typer(help="Legal holds: what no prune may remove.", no_args_is_help=True)


def _when(text: str) -> float:
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is not an ISO date (2026-01-31 or 2026-01-31T12:00Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def register_retention(audit_app: typer.Typer) -> None:
    """Add ``prune`` and ``hold place|list|release`` to the ``audit`` command group."""
    audit_app.add_typer(hold_app, name="hold")

    @audit_app.command("prune")
    def audit_prune(
        store: StoreOpt,
        before: Annotated[str, typer.Option(help="Prune only what settled before this date.")],
        file: Annotated[
            list[Path] | None, typer.Option(help="Anchor file for the checkpoint (repeatable).")
        ] = None,
        http: Annotated[list[str] | None, typer.Option(help="Anchor URL (repeatable).")] = None,
        command: Annotated[str | None, typer.Option(help="Anchor command.")] = None,
        read_command: Annotated[str | None, typer.Option(help="Anchor read command.")] = None,
        key_env: Annotated[str | None, typer.Option(help="Variable holding the HMAC key.")] = None,
        token_env: TokenEnvOpt = TOKEN_ENV,
        as_json: JsonOpt = False,
    ) -> None:
        """Verify against the anchors, anchor a checkpoint, then remove each lane's prunable
        prefix, carrying what is still in force in a checkpoint entry (docs/evidence.md lists
        exactly what may go); anchor again; the chain verifies after."""
        from effectgate._evidence.anchor import AnchorProvider
        from effectgate._execute.retention import prune

        cutoff = _when(before)
        key = os.environ.get(key_env, "").encode() or None if key_env else None
        try:
            providers: list[AnchorProvider] = _providers(file, http, command, read_command)  # type: ignore[assignment]
            with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
                report, after = prune(
                    op.store, op.registry, providers, before=cutoff, by=actor, key=key
                )
        except ConfigError as exc:
            err.print(f"error: {exc.message}")
            raise typer.Exit(2) from None
        if as_json:
            print_json({**report.to_dict(), "verify": after.to_dict()})
        else:
            console.print(
                f"pruned {report.entries} entries and {report.operations} operations "
                f"from {len(report.cuts)} lane(s), carrying {report.carried} still in force; "
                f"chain {'intact' if after.ok else 'NOT intact'}"
            )
            for lane, why in sorted(report.stopped.items()):
                console.print(f"  lane {lane} stopped at {why}")
        if not after.ok:
            raise typer.Exit(EXIT_ALARM)

    @hold_app.command("place")
    def hold_place(
        store: StoreOpt,
        reason: Annotated[str, typer.Option(help="Why (the matter, the order).")],
        scope: Annotated[str, typer.Option(help="The scope held.")] = "default",
        operation: Annotated[
            str | None, typer.Option(help="Hold only this operation id (else the whole scope).")
        ] = None,
        token_env: TokenEnvOpt = TOKEN_ENV,
    ) -> None:
        """Place a legal hold (audited): no prune removes what it covers until released."""
        import time

        try:
            with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
                hold = op.store.place_hold(
                    scope, operation, by=actor, reason=reason, now=time.time()
                )
        except ConfigError as exc:
            err.print(f"error: {exc.message}")
            raise typer.Exit(2) from None
        console.print(
            f"hold {hold.hold_id} placed on {scope}{':' + operation if operation else ''}"
        )

    @hold_app.command("list")
    def hold_list(
        store: StoreOpt,
        all_holds: Annotated[bool, typer.Option("--all", help="Released holds too.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Active legal holds (with --all, released ones too)."""
        with operator_on(store) as op:
            holds = op.store.list_holds(active_only=not all_holds)
        if as_json:
            print_json({"holds": [h.to_dict() for h in holds]})
            return
        for h in holds:
            state = "active" if h.released_at is None else f"released by {h.released_by}"
            console.print(
                f"{h.hold_id}  {h.scope}:{h.operation_id or '*'}  {state}  "
                f"by {h.placed_by}: {h.reason}"
            )
        if not holds:
            console.print("no legal holds")

    @hold_app.command("release")
    def hold_release(
        hold_id: str,
        store: StoreOpt,
        reason: Annotated[str, typer.Option(help="Why the hold ends.")],
        token_env: TokenEnvOpt = TOKEN_ENV,
    ) -> None:
        """Release a legal hold (audited)."""
        import time

        from effectgate.errors import OperationNotFound

        try:
            with acting_operator(store, token_env, Capability.OPERATE) as (op, actor):
                op.store.release_hold(hold_id, by=actor, reason=reason, now=time.time())
        except (ConfigError, OperationNotFound) as exc:
            err.print(f"error: {exc.message}")
            raise typer.Exit(1 if isinstance(exc, OperationNotFound) else 2) from None
        console.print(f"hold {hold_id} released")


def verify_command(
    config: Annotated[str, typer.Option("--config", "-c", help="Your effectgate.toml.")],
    store: Annotated[
        str | None,
        typer.Option(help="Scratch ledgers on this store's kind (default: the config's)."),
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Also write a JUnit XML report.")] = None,
    as_json: JsonOpt = False,
    adapters: Annotated[
        bool,
        typer.Option(
            "--adapters", help="Also run the conformance kit against the configured adapters."
        ),
    ] = False,
    from_agent: Annotated[
        bool,
        typer.Option(
            "--from-agent",
            help="Run in the agent's environment: fail if a configured venue is reachable "
            "from here (only this check runs; no ledger is opened).",
        ),
    ] = False,
) -> None:
    """Check effectgate's guarantees against YOUR configuration: its safety (policies, keys,
    kill switches, approvals) and the ledger cases and invariants in scratch ledgers. Exit 1 on
    any failure (for CI), 2 if the file does not load."""
    import json as _json

    from effectgate._checks._check import FAIL
    from effectgate._checks.verify import run_verify
    from effectgate._service._config import load_config
    from effectgate.store import open_store

    try:
        cfg = load_config(config)
    except ConfigError as exc:
        err.print(f"error: {exc.message}")
        raise typer.Exit(2) from None
    if from_agent:
        from effectgate._checks.reach import reach_checks

        # The agent's side holds no ledger credential: nothing but the venues is touched.
        checks = reach_checks(cfg)
    else:
        url = store or cfg.store.url
        ledger = None
        try:
            ledger = open_store(cfg.store.url, **dict(cfg.store.options))
        except Exception as exc:
            err.print(
                f"note: the configured ledger cannot be opened ({type(exc).__name__}); "
                "its principals are not checked"
            )
        try:
            checks = run_verify(cfg, url, ledger, adapters=adapters)
        finally:
            if ledger is not None:
                ledger.close()
    if junit is not None:
        from effectgate._checks.verify import junit_xml

        junit.write_bytes(junit_xml(checks))
    if as_json:
        rows = [
            {"guarantee": c.guarantee, "subject": c.subject, "status": c.status, "why": c.why}
            for c in checks
        ]
        print(_json.dumps(rows))
    else:
        for c in checks:
            colour = {"pass": "green", "fail": "red"}.get(c.status, "yellow")
            console.print(
                f"[{colour}]{c.status:>4}[/{colour}]  "
                + escape(f"{c.guarantee} [{c.subject}]: {c.why}"),
                highlight=False,
            )
        failed = sum(c.status == FAIL for c in checks)
        console.print(f"{len(checks)} checks, {failed} failed")
    if any(c.status == FAIL for c in checks):
        raise typer.Exit(1)
