"""Ed25519 keys for signed operation receipts, signing, and the offline verifier.

The service signs with a private key it reads from a PEM file (``[receipts] key_file`` or
``$EFFECTGATE_RECEIPT_KEY``, which holds a path or the PEM itself); the ledger never holds it.
A key id is the first 16 hex digits of SHA-256 over the raw 32-byte public key, carried in every
receipt, so keys rotate: a verifier is given every public key it trusts and picks by key id.

:func:`verify_receipt` needs nothing but the document and the public keys (no ledger): the
format, the receipt id (the digest of the statement) and the signature over the RFC 8785 bytes
of everything but ``signature``. :func:`check_receipts` also links the revisions it is given:
a receipt another one names in ``supersedes`` is reported ``superseded_by`` it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from effectgate._core.receipt_statement import FORMAT, SIGNED_FIELDS, receipt_id, signing_bytes
from effectgate.errors import ConfigError, ReceiptInvalid

__all__ = [
    "RECEIPT_KEY_ENV",
    "ReceiptSigner",
    "VerifiedReceipt",
    "check_receipts",
    "generate_key",
    "key_id",
    "load_public_keys",
    "load_receipts",
    "load_signer",
    "signer_from",
    "verify_receipt",
]

#: A path to the PEM private key, or the PEM text itself.
RECEIPT_KEY_ENV: Final = "EFFECTGATE_RECEIPT_KEY"
_PEM: Final = "-----BEGIN"


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ReceiptSigner:
    """The service's signing key and its key id."""

    key: Ed25519PrivateKey
    key_id: str

    def sign(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """``document`` with ``signature``: standard base64 of Ed25519 over its RFC 8785 bytes."""
        if document.get("key_id") != self.key_id:
            raise ValueError("the document names another key id")
        signature = self.key.sign(signing_bytes(document))
        return {**document, "signature": base64.b64encode(signature).decode("ascii")}


def load_signer(source: str) -> ReceiptSigner:
    """The signer from a PEM text or a PEM file path; :class:`ConfigError` if it is not an
    unencrypted Ed25519 private key (the message names the path, never the key)."""
    where = "the PEM text" if source.lstrip().startswith(_PEM) else source
    try:
        data = source.encode() if where != source else Path(source).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read the receipt key: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        why = "it is encrypted" if isinstance(exc, TypeError) else "it is not a PEM private key"
        raise ConfigError(f"{where}: not a usable receipt key ({why})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{where}: the receipt key must be Ed25519")
    return ReceiptSigner(key, key_id(key.public_key()))


def signer_from(key_file: str | None = None) -> ReceiptSigner | None:
    """The service's signer: ``$EFFECTGATE_RECEIPT_KEY`` when set, else ``key_file`` (the
    config's ``[receipts] key_file``); None when neither is given."""
    source = os.environ.get(RECEIPT_KEY_ENV) or key_file
    return None if not source else load_signer(source)


def generate_key(out_dir: str | os.PathLike[str]) -> tuple[str, Path, Path]:
    """A new key pair in ``out_dir``: ``receipt-<key id>.pem`` (private, mode 0600) and
    ``receipt-<key id>.pub.pem``. Returns ``(key id, private path, public path)``."""
    key = Ed25519PrivateKey.generate()
    kid = key_id(key.public_key())
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"receipt-{kid}.pem", folder / f"receipt-{kid}.pub.pem"
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # O_EXCL: never overwrite a key; 0600 from the start, not chmod after the write.
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return kid, private, public


def load_public_keys(paths: Iterable[str | os.PathLike[str]]) -> dict[str, Ed25519PublicKey]:
    """``{key id: public key}`` from PEM files (SubjectPublicKeyInfo); ConfigError otherwise."""
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        try:
            key = serialization.load_pem_public_key(Path(path).read_bytes())
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the public key: {exc.strerror}") from None
        except ValueError:
            raise ConfigError(f"{path}: not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{path}: the public key must be Ed25519")
        keys[key_id(key)] = key
    return keys


@dataclass(frozen=True, slots=True)
class VerifiedReceipt:
    """A receipt whose signature verified, and how it stands among the receipts given."""

    receipt_id: str
    op_key: str
    state: str
    standing: str
    revision: int
    key_id: str
    supersedes: str | None
    superseded_by: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "valid": True,
            "receipt_id": self.receipt_id,
            "op_key": self.op_key,
            "state": self.state,
            "standing": self.standing,
            "revision": self.revision,
            "key_id": self.key_id,
            "supersedes": self.supersedes,
            "superseded_by": self.superseded_by,
        }


def verify_receipt(
    document: Mapping[str, Any], keys: Mapping[str, Ed25519PublicKey]
) -> VerifiedReceipt:
    """Check one receipt offline; raise :class:`ReceiptInvalid` saying why it does not hold."""
    if not isinstance(document, Mapping) or set(document) != SIGNED_FIELDS | {"signature"}:
        raise ReceiptInvalid("not a receipt: its members are not those of a signed receipt")
    if document["format"] != FORMAT:
        raise ReceiptInvalid(f"unknown receipt format {document['format']!r} (want {FORMAT!r})")
    kid, statement = document["key_id"], document["statement"]
    if not isinstance(statement, Mapping):
        raise ReceiptInvalid("not a receipt: 'statement' is not an object")
    key = keys.get(kid) if isinstance(kid, str) else None
    if key is None:
        raise ReceiptInvalid(
            f"signed with key id {kid!r}, which none of the {len(keys)} public key(s) given "
            f"has ({', '.join(sorted(keys)) or 'none'}): wrong or missing public key",
            reason="unknown_key",
        )
    try:
        signature = base64.b64decode(str(document["signature"]), validate=True)
        body = signing_bytes(document)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise ReceiptInvalid(f"not in the signed form: {exc}") from None
    try:
        key.verify(signature, body)
    except InvalidSignature:
        raise ReceiptInvalid(
            f"the signature does not verify with key {kid}: a field was changed after "
            "signing (or another key with this id signed it)",
            reason="bad_signature",
        ) from None
    try:
        expected = receipt_id(statement)
        op_key, state = str(statement["operation"]["op_key"]), str(statement["state"])
        standing, revision = str(statement["standing"]), int(statement["revision"])
        supersedes = statement["supersedes"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReceiptInvalid(f"the statement lacks {exc}") from None
    if document["receipt_id"] != expected:
        raise ReceiptInvalid(
            "its receipt_id is not the digest of its statement", reason="id_mismatch"
        )
    return VerifiedReceipt(
        expected,
        op_key,
        state,
        standing,
        revision,
        kid,
        supersedes if isinstance(supersedes, str) else None,
    )


def check_receipts(
    documents: Sequence[Mapping[str, Any]], keys: Mapping[str, Ed25519PublicKey]
) -> list[VerifiedReceipt]:
    """:func:`verify_receipt` each (the first that fails raises), then link revisions: one
    named in another's ``supersedes`` is returned with ``superseded_by`` set."""
    verified = [verify_receipt(d, keys) for d in documents]
    by_successor = {v.supersedes: v.receipt_id for v in verified if v.supersedes}
    return [
        VerifiedReceipt(
            v.receipt_id,
            v.op_key,
            v.state,
            v.standing,
            v.revision,
            v.key_id,
            v.supersedes,
            by_successor.get(v.receipt_id),
        )
        for v in verified
    ]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Two parsers may keep different copies: a signed document must have one.
            raise ReceiptInvalid(f"duplicate member {key!r}: not a canonical receipt")
        out[key] = value
    return out


def load_receipts(text: str) -> list[dict[str, Any]]:
    """The receipts in a file: one receipt object, or a JSON array of them (``--all``)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:
        raise ReceiptInvalid(f"not JSON: {exc}") from None
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(d, dict) for d in items):
        raise ReceiptInvalid("not a receipt: expected an object or an array of objects")
    return items
