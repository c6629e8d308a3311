"""Run calls as values (pure, no I/O): what a harness records, what a seal closes.

A **run** is one execution of an agent by a harness; a **run call** one invocation inside it (a
model-provider call or a tool call) in a logical **slot**. The journal keeps digests and sizes
of prompts, arguments and results, never their bytes. The slot is the identity: the first
record of a slot is new, the identical record again is a replay, anything else recorded in the
same slot is a conflict. A completion is immutable. A call without a completion is uncertain
forever: nothing here lets a harness invoke the slot again.

Every value is checked on construction (:class:`~effectgate.errors.InvalidRunCall` names the
field); a checked value's :meth:`digest` is SHA-256 over its canonical JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass
from enum import StrEnum

from effectgate.errors import InvalidRunCall

__all__ = [
    "DIGEST_PATTERN",
    "MAX_REASON_CHARS",
    "ProviderOutcome",
    "ProviderReceipt",
    "RunCall",
    "RunCallKind",
    "RunCallRecord",
    "RunCallRef",
    "RunCompletion",
    "RunSeal",
    "RunSummary",
    "canonical_json",
    "sha256_hex",
]

#: Lowercase hex SHA-256: every digest the journal keeps.
DIGEST_PATTERN = re.compile(r"[0-9a-f]{64}")
#: Run ids, slots, call ids: what an operation id may be (they travel in keys and URLs).
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: Provider, model and tool names; agent names.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:/+-]{0,127}")
_SCOPE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_REASON_CHARS = 1000
#: Sizes and token counts stay exact in every JSON reader.
_MAX_COUNT = 2**53 - 1


def canonical_json(value: object) -> bytes:
    """Sorted keys, no spaces, UTF-8: the values here are text, integers, booleans and null
    only (times are rendered as text), so this is the RFC 8785 form."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _id(value: object, field: str) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidRunCall(f"{value!r} must match {_ID.pattern}", field=field)
    return value


def _name(value: object, field: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise InvalidRunCall(f"{value!r} must match {_NAME.pattern}", field=field)
    return value


def _digest(value: object, field: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not DIGEST_PATTERN.fullmatch(value):
        raise InvalidRunCall("must be a lowercase hex SHA-256 (64 characters)", field=field)
    return value


def _count(value: object, field: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if type(value) is not int or not 0 <= value <= _MAX_COUNT:
        raise InvalidRunCall(f"must be an integer from 0 to {_MAX_COUNT}", field=field)
    return value


def _time(value: object, field: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidRunCall("must be a finite time in seconds since the epoch", field=field)
    if value < 0:
        raise InvalidRunCall("must not be negative", field=field)
    return float(value)


def render_time(value: float | None) -> str | None:
    """A time as the snapshot writes it: fixed microseconds, so no float reaches its JSON."""
    return None if value is None else f"{value:.6f}"


class RunCallKind(StrEnum):
    """What the harness invoked: a model provider or a tool (not an effect class)."""

    MODEL = "model"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class RunCallRef:
    """The exact call an operation is proposed from: run, slot and invocation id."""

    run_id: str
    slot: str
    call_id: str

    def __post_init__(self) -> None:
        _id(self.run_id, "run_id")
        _id(self.slot, "slot")
        _id(self.call_id, "call_id")

    def to_dict(self) -> dict[str, str]:
        return {"run_id": self.run_id, "slot": self.slot, "call_id": self.call_id}


@dataclass(frozen=True, slots=True)
class RunCall:
    """One invocation as the harness records it before making it: metadata and digests only.

    ``request_digest``/``request_bytes``: the prompt (model) or the arguments (tool), hashed by
    the harness. ``provider`` and ``model`` are the routing evidence of a model call (the
    provider reconciler binds receipts to them); ``tool`` names a tool call's tool.
    ``deadline``: after it, no effect is admitted against the call.
    """

    run_id: str
    slot: str
    call_id: str
    kind: RunCallKind
    request_digest: str
    request_bytes: int
    provider: str | None = None
    model: str | None = None
    tool: str | None = None
    deadline: float | None = None
    agent: str | None = None
    parent_run_id: str | None = None

    def __post_init__(self) -> None:
        RunCallRef(self.run_id, self.slot, self.call_id)
        try:
            kind = RunCallKind(self.kind)
        except ValueError:
            raise InvalidRunCall(
                f"{self.kind!r} is not a run call kind (model, tool)", field="kind"
            ) from None
        object.__setattr__(self, "kind", kind)
        _digest(self.request_digest, "request_digest")
        _count(self.request_bytes, "request_bytes")
        if kind is RunCallKind.MODEL:
            _name(self.provider, "provider")
            _name(self.model, "model")
            if self.tool is not None:
                raise InvalidRunCall("a model call names no tool", field="tool")
        else:
            _name(self.tool, "tool")
            if self.provider is not None or self.model is not None:
                raise InvalidRunCall("a tool call names no provider or model", field="provider")
        _time(self.deadline, "deadline", optional=True)
        _name(self.agent, "agent", optional=True)
        if self.parent_run_id is not None:
            _id(self.parent_run_id, "parent_run_id")

    @property
    def ref(self) -> RunCallRef:
        return RunCallRef(self.run_id, self.slot, self.call_id)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["kind"] = self.kind.value
        out["deadline"] = render_time(self.deadline)
        return out

    def digest(self) -> str:
        """What a replay must match exactly."""
        return sha256_hex(canonical_json(self.to_dict()))


@dataclass(frozen=True, slots=True)
class RunCompletion:
    """A call's local return: the result's digest and size, and the tokens the provider
    reported (None: not reported, which is not zero). Immutable once recorded."""

    result_digest: str
    result_bytes: int
    reported_tokens: int | None = None

    def __post_init__(self) -> None:
        _digest(self.result_digest, "result_digest")
        _count(self.result_bytes, "result_bytes")
        _count(self.reported_tokens, "reported_tokens", optional=True)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def digest(self) -> str:
        return sha256_hex(canonical_json(self.to_dict()))


@dataclass(frozen=True, slots=True)
class RunCallRecord:
    """A journalled call: its request, when it was recorded, and its return if any."""

    scope: str
    call: RunCall
    started_at: float
    completion: RunCompletion | None
    completed_at: float | None
    effects: int

    @property
    def finished(self) -> bool:
        return self.completion is not None

    def to_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "call": self.call.to_dict(),
            "started_at": render_time(self.started_at),
            "completion": None if self.completion is None else self.completion.to_dict(),
            "completed_at": render_time(self.completed_at),
            "effects": self.effects,
        }


class ProviderOutcome(StrEnum):
    """Terminal knowledge of a model-provider call. A lookup miss is not one of them."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_ACCEPTED = "not_accepted"


@dataclass(frozen=True, slots=True)
class ProviderReceipt:
    """A provider's authenticated terminal answer about one original model call.

    ``provider``, ``model`` and ``request_digest`` must be the original call's routing
    evidence; ``proof_ref``/``proof_digest`` name the evidence the host retained (no
    credentials, no result bytes). ``result_digest`` only on ``succeeded``.
    """

    outcome: ProviderOutcome
    provider: str
    model: str
    request_digest: str
    provider_ref: str
    proof_digest: str
    observed_at: float
    result_digest: str | None = None
    reported_tokens: int | None = None

    def __post_init__(self) -> None:
        try:
            outcome = ProviderOutcome(self.outcome)
        except ValueError:
            raise InvalidRunCall(
                f"{self.outcome!r} is not a terminal provider outcome "
                "(succeeded, failed, not_accepted)",
                field="outcome",
            ) from None
        object.__setattr__(self, "outcome", outcome)
        _name(self.provider, "provider")
        _name(self.model, "model")
        _digest(self.request_digest, "request_digest")
        _name(self.provider_ref, "provider_ref")
        _digest(self.proof_digest, "proof_digest")
        _time(self.observed_at, "observed_at")
        if outcome is ProviderOutcome.SUCCEEDED:
            _digest(self.result_digest, "result_digest")
        elif self.result_digest is not None:
            raise InvalidRunCall("only a succeeded call has a result", field="result_digest")
        _count(self.reported_tokens, "reported_tokens", optional=True)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["outcome"] = self.outcome.value
        out["observed_at"] = render_time(self.observed_at)
        return out

    def digest(self) -> str:
        return sha256_hex(canonical_json(self.to_dict()))

    def contradiction(self, record: RunCallRecord) -> str | None:
        """Why this receipt cannot be about ``record`` as journalled now, or None.

        Checked before a receipt is stored and again before anyone adopts it: a local
        return may arrive after the provider was asked.
        """
        call = record.call
        if call.kind is not RunCallKind.MODEL:
            return "the call is a tool call, not a model-provider call"
        if (self.provider, self.model) != (call.provider, call.model):
            return (
                f"the receipt names {self.provider}/{self.model}, the call was routed to "
                f"{call.provider}/{call.model}"
            )
        if self.request_digest != call.request_digest:
            return "the receipt's request digest is not the call's"
        done = record.completion
        if done is not None:
            if self.outcome is not ProviderOutcome.SUCCEEDED:
                return f"the call returned locally, the provider says {self.outcome.value}"
            if self.result_digest != done.result_digest:
                return "the provider's result digest differs from the local return's"
        return None


@dataclass(frozen=True, slots=True)
class RunSeal:
    """A run's permanent admission barrier: who sealed it, why, when."""

    scope: str
    run_id: str
    actor: str
    reason: str
    sealed_at: float

    def to_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "run_id": self.run_id,
            "actor": self.actor,
            "reason": self.reason,
            "sealed_at": render_time(self.sealed_at),
        }


def check_seal_request(scope: object, run_id: object, actor: object, reason: object) -> None:
    """A seal names its scope, run, actor and a non-empty reason."""
    if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
        raise InvalidRunCall(f"{scope!r} must match {_SCOPE.pattern}", field="scope")
    _id(run_id, "run_id")
    _name(actor, "actor")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidRunCall(
            f"a seal needs a reason of 1 to {MAX_REASON_CHARS} characters", field="reason"
        )
    if not reason.isprintable():
        raise InvalidRunCall("a seal's reason is one line of printable text", field="reason")


def check_scope(scope: object) -> str:
    if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
        raise InvalidRunCall(f"{scope!r} must match {_SCOPE.pattern}", field="scope")
    return scope


def check_run_id(run_id: object) -> str:
    return _id(run_id, "run_id")


def check_cursor(after: str | None, limit: int, *, most: int) -> tuple[str | None, int]:
    """A listing's cursor (a slot, or None to start) and its bound (1 to ``most``)."""
    if after is not None:
        _id(after, "after")
    if type(limit) is not int or not 1 <= limit <= most:
        raise InvalidRunCall(f"limit must be an integer from 1 to {most}", field="limit")
    return after, limit


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as listed: how many calls, how many unfinished, effects admitted, its seal."""

    scope: str
    run_id: str
    created_at: float
    calls: int
    open_calls: int
    effects: int
    seal: RunSeal | None

    def to_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "run_id": self.run_id,
            "created_at": render_time(self.created_at),
            "calls": self.calls,
            "open_calls": self.open_calls,
            "effects": self.effects,
            "seal": None if self.seal is None else self.seal.to_dict(),
        }
