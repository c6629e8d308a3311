"""``effectgate receipt keygen|get|verify``: signed operation receipts (docs/evidence.md).

``keygen`` writes an Ed25519 key pair; ``get`` signs the receipt of a final operation from the
ledger (the key from ``--key``, ``$EFFECTGATE_RECEIPT_KEY`` or the config's ``[receipts]
key_file``); ``verify`` checks receipt files offline, with the public keys only: exit 0 when
every one verifies, 1 when one does not (tampered, wrong key, unknown key id), 2 on bad usage.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from effectgate._doors.cli.service import ConfigOpt, load_service_config, open_ledger
from effectgate.errors import ConfigError, OperationError, ReceiptInvalid

__all__ = ["register"]

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
EXIT_INVALID, EXIT_USAGE = 1, 2

receipt_app = typer.Typer(
    help="Signed operation receipts: make a key, get a final operation's receipt, verify one "
    "offline.",
    no_args_is_help=True,
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="EFFECTGATE_STORE",
        help="Ledger URL: sqlite:///PATH or postgresql://... (or give --config).",
    ),
]


def register(app: typer.Typer) -> None:
    app.add_typer(receipt_app, name="receipt")


@receipt_app.command("keygen")
def keygen(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the key pair into.")],
) -> None:
    """Write a new Ed25519 key pair: receipt-<key id>.pem (private, mode 0600) and
    receipt-<key id>.pub.pem (give it to whoever verifies)."""
    from effectgate._evidence.receipt_signing import generate_key

    try:
        kid, private, public = generate_key(out)
    except OSError as exc:
        err.print(f"error: cannot write the key pair in {out}: {exc.strerror}")
        raise typer.Exit(EXIT_USAGE) from None
    console.print(f"key id {kid}\nprivate key {private}\npublic key {public}", highlight=False)


@receipt_app.command("get")
def get(
    operation_id: Annotated[str, typer.Argument(help="The operation id.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write here (default: stdout).")] = None,
    store: StoreOpt = None,
    config: ConfigOpt = None,
    scope: Annotated[str, typer.Option(help="Tenant scope of the operation.")] = "default",
    key: Annotated[
        str | None,
        typer.Option(help="PEM private key file (default: $EFFECTGATE_RECEIPT_KEY, [receipts])."),
    ] = None,
    history: Annotated[
        bool, typer.Option("--all", help="Every revision, oldest first (a JSON array).")
    ] = False,
) -> None:
    """Sign the receipt of a final operation (with --all, every revision: a later divergence
    supersedes the earlier receipt)."""
    from effectgate._evidence.receipt_signing import load_signer, signer_from
    from effectgate._evidence.signed_receipts import issue_receipts

    try:
        key_file = load_service_config(config).receipt_key_file if config else None
        signer = load_signer(key) if key else signer_from(key_file)
        ledger = open_ledger(store, config)
        try:
            receipts = issue_receipts(
                ledger, scope, operation_id, signer, now=time.time(), history=history
            )
        finally:
            ledger.close()
    except (ConfigError, OperationError) as exc:
        err.print(f"error: {escape(exc.message)}", highlight=False)
        raise typer.Exit(EXIT_INVALID if isinstance(exc, OperationError) else EXIT_USAGE) from None
    text = json.dumps(receipts if history else receipts[-1], indent=2) + "\n"
    if out is None:
        print(text, end="")
        return
    out.write_text(text, encoding="utf-8")
    last = receipts[-1]
    err.print(
        f"wrote {len(receipts)} receipt(s) to {out}: {last['statement']['state']}, "
        f"{last['statement']['standing']}, key {last['key_id']}",
        highlight=False,
    )


@receipt_app.command("verify")
def verify(
    files: Annotated[list[Path], typer.Argument(help="Receipt files (an object or an array).")],
    public_key: Annotated[
        list[Path],
        typer.Option("--public-key", help="A trusted PEM public key (repeatable: rotation)."),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Verify receipts offline (no ledger): format, receipt id, and the Ed25519 signature with
    the public key of its key id. Receipts given together are linked: one another supersedes
    is reported superseded_by it."""
    from effectgate._evidence.receipt_signing import check_receipts, load_public_keys, load_receipts

    try:
        keys = load_public_keys(public_key)
        texts = [(f, f.read_text(encoding="utf-8")) for f in files]
    except ConfigError as exc:
        err.print(f"error: {escape(exc.message)}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as exc:
        err.print(f"error: cannot read {exc.filename}: {exc.strerror}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    documents = []
    for path, text in texts:
        try:
            found = load_receipts(text)
            check_receipts(found, keys)  # each file alone first: the error names its file
        except ReceiptInvalid as exc:
            _invalid(path, exc, as_json)
        documents += found
    results = check_receipts(documents, keys)
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
        return
    for r in results:
        console.print(
            f"VALID {r.receipt_id[:16]} {r.op_key} {r.state} ({r.standing}, revision "
            f"{r.revision}) signed by key {r.key_id}",
            highlight=False,
        )
        if r.supersedes:
            console.print(f"  supersedes {r.supersedes[:16]}", highlight=False)
        if r.superseded_by:
            console.print(f"  SUPERSEDED by {r.superseded_by[:16]}", highlight=False)


def _invalid(path: Path, exc: ReceiptInvalid, as_json: bool) -> NoReturn:
    if as_json:
        print(json.dumps({"valid": False, "file": str(path), **exc.to_dict()}, indent=2))
    err.print(f"INVALID {path}: {escape(exc.message)} ({exc.reason})", highlight=False)
    raise typer.Exit(EXIT_INVALID)
