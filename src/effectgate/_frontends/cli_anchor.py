"""``effectgate audit anchor [--verify]``: checkpoint the audit heads outside the store, or
verify the chain against the last checkpoints (docs/evidence.md)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from effectgate._frontends._cli_common import JsonOpt, StoreOpt, console, err, operator_on, print_json
from effectgate.errors import ConfigError

__all__ = ["register"]

EXIT_ALARM = 3


def _providers(
    files: list[Path] | None, urls: list[str] | None, command: str | None, read_command: str | None
) -> list[object]:
    from effectgate._anchor import CommandAnchor, FileAnchor, HttpAnchor

    out: list[object] = [FileAnchor(p) for p in files or []]
    token = os.environ.get("EFFECTGATE_ANCHOR_TOKEN")
    out += [HttpAnchor(u, token=token) for u in urls or []]
    if command:
        out.append(
            CommandAnchor(shlex.split(command), read_argv=shlex.split(read_command) if read_command else None)
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
    ) -> None:
        """Checkpoint every lane's head to the anchors; with --verify, check the chain against
        them instead (exit 3 on a truncated or forged tail)."""
        from effectgate._anchor import AnchorProvider, anchor_heads, verify_against_anchors

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
            with operator_on(store) as op:
                if verify:
                    result, found = verify_against_anchors(op.store, providers, key=key)
                else:
                    checkpoint, where = anchor_heads(op.store, providers, key=key)
        except ConfigError as exc:
            err.print(f"error: {exc.message}")
            raise typer.Exit(2) from None
        if not verify:
            if as_json:
                print_json({**checkpoint.to_dict(), "anchored_at": where})
            else:
                console.print(f"anchored {len(checkpoint.heads)} head(s), digest {checkpoint.digest[:16]}")
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
        if not found and not result.findings:
            err.print("no checkpoint found at any anchor: nothing to compare against")
            raise typer.Exit(EXIT_ALARM)
        if not result.ok:
            raise typer.Exit(EXIT_ALARM)
