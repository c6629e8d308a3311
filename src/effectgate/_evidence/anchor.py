"""Anchoring the audit chain's heads outside the store, and verifying the chain against them.

A hash chain proves the log consistent with itself; an attacker with write access to the store
can still truncate its tail or rewrite it and re-chain. A *checkpoint* (every lane's head
``(seq, hash)`` at one moment, digested and, with a key, HMAC-signed) written somewhere the
store's writer cannot reach closes that gap: :func:`verify_against_anchors` then reports an
anchored head that is gone (``truncated``) or carries another hash (``head``: the tail was
forged and re-chained).

Providers (:class:`AnchorProvider`): :class:`FileAnchor` (a JSON-lines file, on another volume
or host path), :class:`HttpAnchor` (``PUT`` to an object store's API, ``GET`` back), and
:class:`CommandAnchor` (a command receiving the checkpoint on stdin; write-only unless a read
command is given). ``effectgate audit anchor [--verify]`` drives them; docs/evidence.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from effectgate._evidence.audit import Finding, VerifyResult, verify_store
from effectgate.errors import ConfigError
from effectgate.store.roles import Store

__all__ = [
    "AnchorProvider",
    "Checkpoint",
    "CommandAnchor",
    "FileAnchor",
    "HttpAnchor",
    "anchor_heads",
    "verify_against_anchors",
]

_VERSION = 1


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every lane's head at ``at``; ``digest`` over the rest, ``signature`` an HMAC of it."""

    heads: Mapping[int, tuple[int, str]]
    at: float
    label: str
    digest: str
    signature: str | None = None

    @staticmethod
    def _body(heads: Mapping[int, tuple[int, str]], at: float, label: str) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "at": at,
            "label": label,
            "heads": {str(k): {"seq": s, "hash": h} for k, (s, h) in sorted(heads.items())},
        }

    @classmethod
    def make(
        cls, heads: Mapping[int, tuple[int, str]], *, at: float, label: str, key: bytes | None
    ) -> Checkpoint:
        digest = hashlib.sha256(_canonical(cls._body(heads, at, label))).hexdigest()
        sig = hmac.new(key, digest.encode(), hashlib.sha256).hexdigest() if key else None
        return cls(dict(heads), at, label, digest, sig)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self._body(self.heads, self.at, self.label),
            "digest": self.digest,
            "signature": self.signature,
        }

    @classmethod
    def from_dict(cls, data: Any, *, key: bytes | None) -> Checkpoint:
        """Parse and check a stored checkpoint: its digest, and its signature when ``key``."""
        try:
            heads = {
                int(k): (int(v["seq"]), str(v["hash"])) for k, v in dict(data["heads"]).items()
            }
            at, label = float(data["at"]), str(data["label"])
            digest, sig = str(data["digest"]), data.get("signature")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"not a checkpoint: {type(exc).__name__}") from None
        made = cls.make(heads, at=at, label=label, key=key)
        if not hmac.compare_digest(made.digest, digest):
            raise ConfigError("checkpoint digest does not verify (edited)")
        if key is not None and not (
            isinstance(sig, str) and made.signature and hmac.compare_digest(made.signature, sig)
        ):
            raise ConfigError("checkpoint signature does not verify with the anchor key")
        return cls(heads, at, label, digest, sig if isinstance(sig, str) else None)


#: Who anchors when no principal asked (the service's schedule).
ANCHOR_ACTOR = "system:anchor"


class AnchorProvider(Protocol):
    """Where checkpoints go. ``latest()`` None: nothing anchored yet, or write-only."""

    name: str

    def put(self, checkpoint: Checkpoint) -> str: ...
    def latest(self, *, key: bytes | None) -> Checkpoint | None: ...


class FileAnchor:
    """Appends one JSON line per checkpoint to ``path`` (fsynced); reads back the last."""

    name = "file"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def put(self, checkpoint: Checkpoint) -> str:
        line = json.dumps(checkpoint.to_dict(), sort_keys=True) + "\n"
        with self.path.open("a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return str(self.path)

    def latest(self, *, key: bytes | None) -> Checkpoint | None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return None
        for line in reversed(lines):
            if line.strip():
                return Checkpoint.from_dict(json.loads(line), key=key)
        return None


class HttpAnchor:
    """``PUT``s each checkpoint to ``{url}/checkpoint-<ms>.json`` and ``{url}/latest.json``
    (an object store's API, e.g. a bucket path); reads back ``latest.json``."""

    name = "http"

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 10.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError("an HTTP anchor needs an http(s) URL")
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(timeout=timeout, trust_env=False, follow_redirects=False)

    def put(self, checkpoint: Checkpoint) -> str:
        body = _canonical(checkpoint.to_dict())
        where = f"{self.url}/checkpoint-{int(checkpoint.at * 1000)}.json"
        for target in (where, f"{self.url}/latest.json"):
            resp = self._client.put(target, content=body, headers=self._headers)
            if resp.status_code >= 300:
                raise ConfigError(f"anchor PUT {target}: status {resp.status_code}")
        return where

    def latest(self, *, key: bytes | None) -> Checkpoint | None:
        resp = self._client.get(f"{self.url}/latest.json", headers=self._headers)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise ConfigError(f"anchor GET {self.url}/latest.json: status {resp.status_code}")
        return Checkpoint.from_dict(resp.json(), key=key)


class CommandAnchor:
    """Runs ``argv`` with the checkpoint's JSON on stdin (e.g. a signer, ``aws s3 cp -``);
    ``read_argv``, if given, prints the last checkpoint's JSON (else write-only)."""

    name = "command"

    def __init__(self, argv: Sequence[str], *, read_argv: Sequence[str] | None = None) -> None:
        if not argv:
            raise ConfigError("a command anchor needs a command")
        self.argv, self.read_argv = list(argv), list(read_argv) if read_argv else None

    def put(self, checkpoint: Checkpoint) -> str:
        body = json.dumps(checkpoint.to_dict(), sort_keys=True)
        done = subprocess.run(  # noqa: S603 - the operator's own configured command, no shell
            self.argv, input=body, capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise ConfigError(f"anchor command {self.argv[0]} exited {done.returncode}")
        return done.stdout.strip() or self.argv[0]

    def latest(self, *, key: bytes | None) -> Checkpoint | None:
        if self.read_argv is None:
            return None
        done = subprocess.run(  # noqa: S603 - as above
            self.read_argv, capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise ConfigError(f"anchor read command exited {done.returncode}")
        return Checkpoint.from_dict(json.loads(done.stdout), key=key) if done.stdout else None


def anchor_heads(
    store: Store,
    providers: Sequence[AnchorProvider],
    *,
    key: bytes | None = None,
    label: str = "effectgate",
    clock: Callable[[], float] = time.time,
    by: str = ANCHOR_ACTOR,
) -> tuple[Checkpoint, list[str]]:
    """Checkpoint the store's current heads to every provider; ``(checkpoint, locations)``.
    A provider that fails raises :class:`ConfigError` (the checkpoint is not anchored there).

    Once every provider has it, a chained ``audit_anchored`` entry records the checkpoint,
    where it went and ``by`` whom, whatever the provider (file, HTTP, command) and whatever
    the door (CLI, operator API, the service's schedule, a prune). The entry follows the heads
    it anchors, so the next checkpoint covers it."""
    if not providers:
        raise ConfigError("no anchor provider configured")
    checkpoint = Checkpoint.make(store.audit_heads(), at=clock(), label=label, key=key)
    where = [p.put(checkpoint) for p in providers]
    store.record_anchor(checkpoint.to_dict(), where, by=by, now=clock())
    return checkpoint, where


def verify_against_anchors(
    store: Store, providers: Sequence[AnchorProvider], *, key: bytes | None = None
) -> tuple[VerifyResult, list[Checkpoint]]:
    """Verify the whole chain and that every anchored head is still in it, unchanged.

    Per lane the newest anchored head is checked (a later checkpoint includes the earlier
    entries by the chain); one a prune removed must be recorded by its checkpoint
    (``VerifyResult.covered``). A checkpoint that does not verify is itself a finding
    (``anchor``); with ``key``, so is a prune checkpoint not signed with it.
    """
    expect: dict[int, tuple[int, str]] = {}
    found: list[Checkpoint] = []
    bad: list[Finding] = []
    for provider in providers:
        try:
            checkpoint = provider.latest(key=key)
        except (ConfigError, ValueError, OSError, httpx.HTTPError) as exc:
            why = exc.message if isinstance(exc, ConfigError) else type(exc).__name__
            bad.append(Finding(None, 0, "anchor", f"{provider.name} anchor unreadable: {why}"))
            continue
        if checkpoint is None:
            continue
        found.append(checkpoint)
        for lane, (seq, h) in checkpoint.heads.items():
            if lane not in expect or expect[lane][0] < seq:
                expect[lane] = (seq, h)
    result = verify_store(store, expect_heads=expect, key=key)
    for lane, (seq, _) in sorted(expect.items()):
        last = result.heads.get(lane)
        if last is None or last[0] < seq:
            result.findings.append(
                Finding(
                    seq,
                    lane,
                    "truncated",
                    f"lane {lane}: anchored head seq {seq} but the log ends at "
                    f"{last[0] if last else 'nothing'} (the tail past the anchor was deleted)",
                )
            )
    result.findings.extend(bad)
    return result, found
