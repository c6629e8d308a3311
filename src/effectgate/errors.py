"""One exception tree. Each error carries a stable ``code`` that the HTTP and MCP doors report."""

from __future__ import annotations

__all__ = [
    "AdapterError",
    "ApprovalError",
    "AuditTampered",
    "BadRequest",
    "ConfigError",
    "ControlError",
    "EffectgateError",
    "IdempotencyConflict",
    "IndeterminateCommit",
    "IntentError",
    "InvalidTransition",
    "LedgerNotFound",
    "OperationInFlight",
    "OperationNotFound",
    "PermissionDenied",
    "PolicyError",
    "RateLimited",
    "RegistryError",
    "StaleState",
    "StoreError",
    "Unauthenticated",
    "UnknownActionClass",
]


class EffectgateError(Exception):
    """Base of every error effectgate raises on purpose."""

    code: str = "effectgate_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        """A JSON-able form for front doors (problem details, MCP error results)."""
        return {"code": self.code, "message": self.message}


class IntentError(EffectgateError):
    """The intent was refused by the strict parser or the schema. Names the field (a JSON path)."""

    code = "invalid_intent"

    def __init__(self, message: str, *, field: str | None = None, reason: str = "invalid") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = reason

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "field": self.field,
                "reason": self.reason}


class UnknownActionClass(EffectgateError):
    """No action class of that name is registered."""

    code = "unknown_action_class"


class RegistryError(EffectgateError):
    """An action class definition is unsafe or inconsistent (refused at registration)."""

    code = "invalid_action_class"


class IdempotencyConflict(EffectgateError):
    """The operation id was used before with a different effect payload (invariant 2)."""

    code = "idempotency_conflict"

    def __init__(self, message: str, *, operation_id: str, stored: str, offered: str) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.stored_fingerprint = stored
        self.offered_fingerprint = offered


class InvalidTransition(EffectgateError):
    """The state table does not allow this transition."""

    code = "invalid_transition"


class StaleState(EffectgateError):
    """A compare-and-set transition found the row in another state than expected."""

    code = "stale_state"


class OperationNotFound(EffectgateError):
    """No ledger row for that (scope, operation id)."""

    code = "operation_not_found"


class PolicyError(EffectgateError):
    """A policy is missing or malformed (deny by default)."""

    code = "policy_error"


class StoreError(EffectgateError):
    """The store failed in a way that is known not to have changed anything."""

    code = "store_error"


class IndeterminateCommit(StoreError):
    """The connection was lost after COMMIT was sent: the write may or may not be durable.

    The executor treats the operation as uncertain and leaves it to the reconciler; it never
    assumes the commit failed.
    """

    code = "indeterminate_commit"


class AdapterError(EffectgateError):
    """An adapter could not talk to its venue. What happened there is unknown."""

    code = "adapter_error"


class ConfigError(EffectgateError):
    """A configuration value or store URL is invalid."""

    code = "config_error"


class LedgerNotFound(ConfigError):
    """The configured ledger does not exist (a SQLite file, a migrated PostgreSQL schema), and
    the command was not asked to create one."""

    code = "ledger_not_found"


# --- front-door errors (HTTP and MCP map these to statuses; see frontends/) ------------------


class BadRequest(EffectgateError):
    """The request around the intent is unusable (e.g. no ``Idempotency-Key``); nothing written."""

    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Unauthenticated(EffectgateError):
    """No credential, or one no configured token matches."""

    code = "unauthenticated"


class PermissionDenied(EffectgateError):
    """The credential is valid but its role may not do this (agent on admin, operator proposing)."""

    code = "forbidden"


class RateLimited(EffectgateError):
    """The caller exceeded its request budget; ``retry_after`` seconds until a token is free."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class OperationInFlight(EffectgateError):
    """A request with this operation id is still being executed; ask again later."""

    code = "operation_in_flight"

    def __init__(self, message: str, *, operation_id: str, retry_after: float) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.retry_after = retry_after


class ControlError(EffectgateError):
    """An operator control was given bad input (malformed envelope, unknown axis, bad threshold).

    Raised before anything is written: the control's state is unchanged.
    """

    code = "invalid_control"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "field": self.field}


class ApprovalError(EffectgateError):
    """An approval or refusal was not accepted; ``reason`` says why. Nothing was released.

    Reasons: ``not_awaiting`` (the row is in another state), ``fingerprint_mismatch`` (the
    approval names another payload), ``self_approval`` (the approver proposed it),
    ``duplicate_approver`` (this approver already answered), ``expired`` (the approval window
    closed; the row is now ``denied``), ``invalid_approver``.
    """

    code = "approval_refused"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "reason": self.reason}


class AuditTampered(EffectgateError):
    """The audit chain does not verify: an entry was edited, deleted, inserted or reordered."""

    code = "audit_tampered"

    def __init__(self, message: str, *, seq: int | None = None, lane: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.lane = lane

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "seq": self.seq, "lane": self.lane}
