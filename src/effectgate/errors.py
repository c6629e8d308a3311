"""One exception tree. Every class carries, as class attributes, a stable ``code`` (what the HTTP
and MCP doors report), its HTTP ``status`` and the :class:`ModelOutcome` a model is told.

::

    EffectgateError                   effectgate_error               500  uncertain
    +-- RequestError                  invalid_request                400  refused
    |   +-- IntentError               invalid_intent                 400
    |   |   +-- BodyTooLarge          body_too_large                 413
    |   +-- UnsupportedMediaType      unsupported_media_type         415
    |   +-- BadRequest                bad_request                    400
    |   |   +-- IdempotencyKeyMissing idempotency_key_missing        400
    |   |   +-- InvalidIdempotencyKey invalid_idempotency_key        400
    |   +-- UnknownActionClass        unknown_action_class           404
    |   +-- RouteNotFound             not_found                      404
    |   +-- MethodNotAllowed          method_not_allowed             405
    |   +-- InvalidRunCall            invalid_run_call               400
    +-- AccessError                   access_refused                 403  refused
    |   +-- Unauthenticated           unauthenticated                401
    |   +-- PermissionDenied          forbidden                      403
    |   +-- RateLimited               rate_limited                   429
    +-- OperationError                operation_refused              409  refused
    |   +-- IdempotencyConflict       idempotency_conflict           422
    |       +-- RequestKeyConflict    request_key_conflict           422
    |   +-- OperationNotFound         operation_not_found            404
    |   +-- OperationInFlight         operation_in_flight            409  uncertain
    |   +-- InvalidTransition         invalid_transition             409
    |   +-- StaleState                stale_state                    409
    |   +-- ApprovalError             approval_refused               409
    |       +-- NotAwaitingApproval   not_awaiting_approval          409
    |       +-- ApprovalFingerprintMismatch
    |       |                         approval_fingerprint_mismatch  409
    |       +-- SelfApproval          self_approval                  403
    |       +-- DuplicateApprover     duplicate_approver             409
    |       +-- InvalidApprover       invalid_approver               400
    |       +-- ApprovalExpired       approval_expired               409
    |       +-- ApproverNotEntitled   approver_not_entitled          403
    |   +-- KeyNamespaceDivergence    key_namespace_divergence       409  held
    |   +-- SpeculationStalled        speculation_stalled            503  held
    |   +-- ResolutionRefused         resolution_refused             409
    |   +-- DispatchRefused           dispatch_refused               409
    |   +-- ContinuationRefused       continuation_refused           409
    |   +-- EvaluationTokenRefused    evaluation_token_refused       409
    |       +-- EvaluationTokenInvalid
    |       |                         evaluation_token_invalid       400
    |       +-- EvaluationTokenStale  evaluation_token_stale         409
    |   +-- ReceiptUnavailable        receipt_unavailable            409
    |   +-- RunError                  run_refused                    409
    |       +-- RunNotFound           run_not_found                  404
    |       +-- RunCallNotFound       run_call_not_found             404
    |       +-- RunCallConflict       run_call_conflict              409
    |       +-- RunCallNotOpen        run_call_not_open              409
    |       +-- RunSealed             run_sealed                     409
    |       +-- RunNotSealed          run_not_sealed                 409
    |       +-- RunSnapshotTooLarge   run_snapshot_too_large         413
    |       +-- RunSealDeadline       run_seal_deadline              504
    |   +-- BudgetError               budget_refused                 409
    |       +-- BudgetExceeded        budget_exceeded                409
    |       +-- InvalidBudget         invalid_budget                 400
    |       +-- ReservationNotFound   reservation_not_found          404
    |       +-- ReservationConflict   reservation_conflict           409
    |       +-- SettlementOutOfOrder  settlement_out_of_order        409
    +-- StoreError                    store_error                    503  refused
    +-- OutcomeUnknown                outcome_unknown                503  uncertain
    |   +-- CommitOutcomeUnknown      indeterminate_commit           503
    +-- AdapterError                  adapter_error                  502  uncertain
    +-- OperatorError                 operator_error                 500  refused
    |   +-- ConfigError               config_error                   500
    |   |   +-- LedgerNotFound        ledger_not_found               500
    |   +-- RegistryError             invalid_action_class           500
    |   +-- PolicyError               policy_error                   500
    |   +-- ControlError              invalid_control                400
    |   |   +-- PrincipalExists       principal_exists               409
    |   |   +-- PrincipalNotFound     principal_not_found            404
    |   |   +-- GrantWider            grant_wider                    403
    |   |   +-- GrantNotFound         grant_not_found                404
    |   |   +-- StepEvidenceRefused   evidence_unverified            400
    |   |       +-- StepEvidenceMismatch evidence_mismatch           409
    |   +-- AuditTampered             audit_tampered                 500
    |   +-- RunSnapshotInvalid        run_snapshot_invalid           500
    |   +-- ReceiptInvalid            receipt_invalid                500
    |   +-- ServiceUnavailable        unavailable                    503
    |   +-- UpstreamSchemaHeld        upstream_schema_held           503
    +-- InternalError                 internal_error                 500  uncertain

The outcome column is inherited unless a class says otherwise. The split that matters most is
between ``StoreError`` (known to have changed nothing: retrying the same operation id is safe)
and ``OutcomeUnknown`` (the write or the action may or may not have taken effect: the row is
left to the reconciler and nothing is ever sent again on a guess). Each base's comment names the
errors later features add under it, so a feature only adds a class.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

__all__ = [
    "AccessError",
    "AdapterError",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalFingerprintMismatch",
    "ApproverNotEntitled",
    "AuditTampered",
    "BadRequest",
    "BodyTooLarge",
    "BudgetError",
    "BudgetExceeded",
    "CommitOutcomeUnknown",
    "ConfigError",
    "ContinuationRefused",
    "ControlError",
    "DispatchRefused",
    "DuplicateApprover",
    "EffectgateError",
    "EvaluationTokenInvalid",
    "EvaluationTokenRefused",
    "EvaluationTokenStale",
    "GrantNotFound",
    "GrantWider",
    "IdempotencyConflict",
    "IdempotencyKeyMissing",
    "IntentError",
    "InternalError",
    "InvalidApprover",
    "InvalidBudget",
    "InvalidIdempotencyKey",
    "InvalidRunCall",
    "InvalidTransition",
    "KeyNamespaceDivergence",
    "LedgerNotFound",
    "MethodNotAllowed",
    "ModelOutcome",
    "NotAwaitingApproval",
    "OperationError",
    "OperationInFlight",
    "OperationNotFound",
    "OperatorError",
    "OutcomeUnknown",
    "PermissionDenied",
    "PolicyError",
    "PrincipalExists",
    "PrincipalNotFound",
    "RateLimited",
    "ReceiptInvalid",
    "ReceiptUnavailable",
    "RegistryError",
    "RequestError",
    "RequestKeyConflict",
    "ReservationConflict",
    "ReservationNotFound",
    "ResolutionRefused",
    "RouteNotFound",
    "RunCallConflict",
    "RunCallNotFound",
    "RunCallNotOpen",
    "RunError",
    "RunNotFound",
    "RunNotSealed",
    "RunSealDeadline",
    "RunSealed",
    "RunSnapshotInvalid",
    "RunSnapshotTooLarge",
    "SelfApproval",
    "ServiceUnavailable",
    "SettlementOutOfOrder",
    "SpeculationStalled",
    "StaleState",
    "StepEvidenceMismatch",
    "StepEvidenceRefused",
    "StoreError",
    "Unauthenticated",
    "UnknownActionClass",
    "UnsupportedMediaType",
    "UpstreamSchemaHeld",
]


class ModelOutcome(StrEnum):
    """What a model is told happened to its action: the operation result's ``outcome``.

    Kept small on purpose (docs/service.md gives the mapping from ledger states).
    """

    #: The effect happened (acknowledged), or was recorded in shadow mode by design.
    DONE = "done"
    #: Nothing was sent and nothing will be under this request: policy, an approver or a
    #: check refused it, or the request itself was unusable.
    REFUSED = "refused"
    #: It was sent (or attempted) and the venue proved it did not apply, or it was written off.
    FAILED = "failed"
    #: It may or may not have taken effect; only the same operation id may ask again.
    UNCERTAIN = "uncertain"
    #: Nothing sent yet: a human must approve it first.
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    #: Allowed, nothing sent yet: an operator control holds it, or it waits for dispatch.
    HELD = "held"


class EffectgateError(Exception):
    """Base of every error effectgate raises on purpose."""

    code: ClassVar[str] = "effectgate_error"
    status: ClassVar[int] = 500
    # Unknown by default: a caller must never read an unclassified error as "nothing happened".
    outcome: ClassVar[ModelOutcome] = ModelOutcome.UNCERTAIN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, object]:
        """Fields beyond code and message that a caller needs (a field name, a reason)."""
        return {}

    def to_dict(self) -> dict[str, object]:
        """A JSON-able form for front doors (problem details, MCP error results) and audit."""
        return {"code": self.code, "message": self.message, **self.details()}


# --- request errors: the request is unusable as sent; nothing was written but an audit line --
# Later: a malformed run-call record or budget request, an unknown effect class.


class RequestError(EffectgateError):
    """The request cannot be used as sent. Fix it and send it again (same operation id)."""

    code = "invalid_request"
    status = 400
    outcome = ModelOutcome.REFUSED


class IntentError(RequestError):
    """The intent was refused by the strict parser or the schema. Names the field (a JSON path)."""

    code = "invalid_intent"

    def __init__(self, message: str, *, field: str | None = None, reason: str = "invalid") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = reason

    def details(self) -> dict[str, object]:
        return {"field": self.field, "reason": self.reason}


class BodyTooLarge(IntentError):
    """The body exceeds the configured byte cap (refused before it is parsed)."""

    code = "body_too_large"
    status = 413

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="too_large")


class UnsupportedMediaType(RequestError):
    """A request body that is not JSON (``Content-Type: application/json``, UTF-8)."""

    code = "unsupported_media_type"
    status = 415


class BadRequest(RequestError):
    """The request around the intent is unusable (a header, the route's parameters)."""

    code = "bad_request"


class IdempotencyKeyMissing(BadRequest):
    """No ``Idempotency-Key`` header: the operation id is required (the IETF draft's 400)."""

    code = "idempotency_key_missing"


class InvalidIdempotencyKey(BadRequest):
    """The ``Idempotency-Key`` is not a valid operation id."""

    code = "invalid_idempotency_key"


class UnknownActionClass(RequestError):
    """No action class (or MCP tool) of that name is registered."""

    code = "unknown_action_class"
    status = 404


class InvalidRunCall(RequestError):
    """A run-call record, reference, seal or listing that is malformed; names the field."""

    code = "invalid_run_call"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field

    def details(self) -> dict[str, object]:
        return {"field": self.field}


class RouteNotFound(RequestError):
    """No such HTTP route."""

    code = "not_found"
    status = 404


class MethodNotAllowed(RequestError):
    """The HTTP route exists but not with this method."""

    code = "method_not_allowed"
    status = 405


# --- access errors: who is asking, not what is asked; nothing was written ---------------------
# Later: an expired or revoked principal token, a grant that does not cover the action.


class AccessError(EffectgateError):
    """The caller may not make this request now."""

    code = "access_refused"
    status = 403
    outcome = ModelOutcome.REFUSED


class Unauthenticated(AccessError):
    """No credential, or one no configured token matches."""

    code = "unauthenticated"
    status = 401


class PermissionDenied(AccessError):
    """The credential is valid but its role may not do this (agent on admin, operator proposing)."""

    code = "forbidden"


class RateLimited(AccessError):
    """The caller exceeded its request budget; ``retry_after`` seconds until a token is free."""

    code = "rate_limited"
    status = 429

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- operation errors: the request is well formed, the operation's state or history refuses it -
# Later, each a class here: a refused continuation without proof (`ContinuationRefused`,
# invariant 9), an exhausted budget or reservation at admission (`BudgetExhausted`,
# outcome refused; invariant 12). A budget refusal just before dispatch is no exception: the row
# ends `rejected` with its reason.


class OperationError(EffectgateError):
    """The operation's state refuses this request; nothing was changed."""

    code = "operation_refused"
    status = 409
    outcome = ModelOutcome.REFUSED


class IdempotencyConflict(OperationError):
    """The operation id was used before with a different effect payload (invariant 2)."""

    code = "idempotency_conflict"
    status = 422  # the IETF Idempotency-Key draft's status for a reused key

    def __init__(self, message: str, *, operation_id: str, stored: str, offered: str) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.stored_fingerprint = stored
        self.offered_fingerprint = offered

    def details(self) -> dict[str, object]:
        return {"operation_id": self.operation_id}


class RequestKeyConflict(IdempotencyConflict):
    """A minted-id class's request key was used before with a different effect payload: the
    proposal it named is another action, so the key cannot name this one (docs/service.md,
    "Operation ids: caller or minted")."""

    code = "request_key_conflict"
    status = 422  # as for a reused Idempotency-Key: the key names one proposal

    def __init__(
        self, message: str, *, request_key: str, operation_id: str, stored: str, offered: str
    ) -> None:
        super().__init__(message, operation_id=operation_id, stored=stored, offered=offered)
        self.request_key = request_key

    def details(self) -> dict[str, object]:
        # The operation the key names is the caller's own (same scope): it may look it up.
        return {"request_key": self.request_key, "operation_id": self.operation_id}


class OperationNotFound(OperationError):
    """No ledger row for that (scope, operation id)."""

    code = "operation_not_found"
    status = 404


class OperationInFlight(OperationError):
    """A request with this operation id is still being executed; ask again later."""

    code = "operation_in_flight"
    # The first request may still be sending it: not a refusal of the action.
    outcome = ModelOutcome.UNCERTAIN

    def __init__(self, message: str, *, operation_id: str, retry_after: float) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.retry_after = retry_after

    def details(self) -> dict[str, object]:
        return {"operation_id": self.operation_id}


class InvalidTransition(OperationError):
    """The state table does not allow this transition."""

    code = "invalid_transition"


class StaleState(OperationError):
    """A compare-and-set transition found the row in another state than expected."""

    code = "stale_state"


class ApprovalError(OperationError):
    """An approval or refusal was not accepted; nothing was released. Subclasses say why.

    ``reason`` (a class attribute) is the short name the doors have always reported.
    """

    code = "approval_refused"
    reason: ClassVar[str] = "refused"

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class NotAwaitingApproval(ApprovalError):
    """The row is in another state than ``awaiting_approval``."""

    code = "not_awaiting_approval"
    reason = "not_awaiting"


class ApprovalFingerprintMismatch(ApprovalError):
    """The approval names another payload than the row carries.

    409, not 422: 422 is the Idempotency-Key draft's "key reused with another payload". Here the
    approver's view of the row is stale; re-read the row and approve its current fingerprint.
    """

    code = "approval_fingerprint_mismatch"
    reason = "fingerprint_mismatch"


class SelfApproval(ApprovalError):
    """The approver proposed the action; nobody may approve their own proposal."""

    code = "self_approval"
    status = 403
    reason = "self_approval"


class DuplicateApprover(ApprovalError):
    """This approver already answered for the row; approvers must be distinct."""

    code = "duplicate_approver"
    reason = "duplicate_approver"


class InvalidApprover(ApprovalError):
    """The approver's identity is malformed (bad input, not a conflict)."""

    code = "invalid_approver"
    status = 400
    reason = "invalid_approver"


class ApprovalExpired(ApprovalError):
    """The approval window closed; the row is now ``denied``."""

    code = "approval_expired"
    reason = "expired"


class ApproverNotEntitled(ApprovalError):
    """The approver holds none of the approver roles the action class names (who may approve
    what, docs/authority.md)."""

    code = "approver_not_entitled"
    status = 403


class KeyNamespaceDivergence(OperationError, RuntimeError):
    """The sandbox's key and the ledger's key for one operation disagree, or the speculation
    record's identity is not the row's (seed 000): the row is quarantined, never retried.

    Also a :class:`RuntimeError`, as seed 000 defines it, so code written against the seed's
    contract (``except RuntimeError``) catches it.

    Carries both keys, the attempt (how many times the proposal arrived) and the operation id.
    """

    code = "key_namespace_divergence"
    # Nothing was sent under this commit, and nothing will be until an operator resolves it.
    outcome = ModelOutcome.HELD

    def __init__(
        self,
        message: str,
        *,
        operation_id: str,
        ledger_key: str,
        sandbox_key: str | None,
        attempt: int,
    ) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.ledger_key = ledger_key
        self.sandbox_key = sandbox_key
        self.attempt = attempt

    def details(self) -> dict[str, object]:
        return {
            "operation_id": self.operation_id,
            "ledger_key": self.ledger_key,
            "sandbox_key": self.sandbox_key,
            "attempt": self.attempt,
        }


class SpeculationStalled(OperationError):
    """No committable verdict within the class's bound of tries and time (invariant 11): the
    row stays ``validated`` with this detail and an alert fires; nothing was sent."""

    code = "speculation_stalled"
    status = 503
    outcome = ModelOutcome.HELD

    def __init__(self, message: str, *, operation_id: str, attempt: int) -> None:
        super().__init__(message)
        self.operation_id = operation_id
        self.attempt = attempt

    def details(self) -> dict[str, object]:
        return {"operation_id": self.operation_id, "attempt": self.attempt}


class ResolutionRefused(OperationError):
    """An operator's resolution of a quarantined row was refused: the row is not quarantined,
    the evidence does not prove the outcome claimed, or a release of a row that may have been
    dispatched (invariant 10). Nothing was changed."""

    code = "resolution_refused"


class DispatchRefused(OperationError):
    """An admission check of the pre-dispatch pipeline refused a dispatch inside its
    transaction (docs/continuations.md): the transaction rolled back, and the refusal's move
    (``validated -> rejected`` or a new approval round) is applied instead. ``refusal`` is the
    check's :class:`~effectgate._execute.predispatch.Refusal`."""

    code = "dispatch_refused"

    def __init__(self, message: str, *, refusal: object = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class ContinuationRefused(OperationError):
    """A retry or compensation was refused (docs/continuations.md): no proof or an expired
    one, a stale sequence or predecessor, the original's worker, a bound reached. ``reason``
    says which. Nothing was changed but the audit log."""

    code = "continuation_refused"

    def __init__(self, message: str, *, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class EvaluationTokenRefused(OperationError):
    """A submit presented an evaluation token (``Gate.evaluate``) that does not hold for it.
    ``reason`` says why; nothing was written but the audit line of the refusal. Evaluate again
    and decide again."""

    code = "evaluation_token_refused"

    def __init__(self, message: str, *, reason: str = "refused", stage: str = "pre") -> None:
        super().__init__(message)
        self.reason = reason
        #: ``pre``: the gate's check before the journal; ``in_tx``: the recheck inside the
        #: journal's transaction (a change committed between the two).
        self.stage = stage

    def details(self) -> dict[str, object]:
        return {"reason": self.reason, "stage": self.stage}


class EvaluationTokenInvalid(EvaluationTokenRefused):
    """The token is malformed, its signature does not verify (tampered, or another service's
    secret), or it was issued for another principal, scope or action class."""

    code = "evaluation_token_invalid"
    status = 400


class EvaluationTokenStale(EvaluationTokenRefused):
    """Something the token covers changed since the evaluation: it expired, the payload's
    fingerprint differs, the policy or its decision, the class's controls (kill switch,
    breaker, shadow, envelope), the breaker's window now trips on this proposal, or a
    budget's headroom fell below what was quoted."""

    code = "evaluation_token_stale"


class ReceiptUnavailable(OperationError):
    """No signed receipt can be issued for the operation: it has not reached a final state
    (``reason`` ``not_final``), its audit trail no longer holds the entry that made it final
    (``audit_pruned``), or the service holds no receipt signing key (``no_signing_key``).
    Nothing was written."""

    code = "receipt_unavailable"

    def __init__(self, message: str, *, reason: str = "not_final") -> None:
        super().__init__(message)
        self.reason = reason

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class RunError(OperationError):
    """A run's journal or seal refuses the request (docs/runs.md); nothing was changed."""

    code = "run_refused"


class RunNotFound(RunError):
    """No run of that id in the scope (nothing was ever recorded or sealed under it)."""

    code = "run_not_found"
    status = 404


class RunCallNotFound(RunError):
    """No journalled call in that run and slot, or not with that invocation id."""

    code = "run_call_not_found"
    status = 404


class RunCallConflict(RunError):
    """The slot holds another call, a different completion, or the operation is bound to
    another call: a changed attempt is never a replay."""

    code = "run_call_conflict"


class RunCallNotOpen(RunError):
    """The named call cannot admit an effect: it finished, its deadline passed, or it is a
    model call. Effects are proposed from an unfinished tool call only."""

    code = "run_call_not_open"


class RunSealed(RunError):
    """The run is sealed (invariant 13): nothing more is admitted or recorded, replays
    included. ``row`` is the stored operation when a bound replay found one, so a recovering
    harness still learns its outcome; nothing was dispatched."""

    code = "run_sealed"

    def __init__(self, message: str, *, row: object | None = None) -> None:
        super().__init__(message)
        self.row = row

    def details(self) -> dict[str, object]:
        to_dict = getattr(self.row, "to_dict", None)
        return {"operation": to_dict() if callable(to_dict) else None}


class RunNotSealed(RunError):
    """A recovery snapshot or provider reconciliation needs a sealed run."""

    code = "run_not_sealed"


class RunSnapshotTooLarge(RunError):
    """The sealed journal exceeds a snapshot bound (entries or bytes): no truncated snapshot
    is ever produced."""

    code = "run_snapshot_too_large"
    status = 413


class RunSealDeadline(RunError):
    """The seal's deadline passed before it could be written (authorisation or the fence took
    too long); nothing was sealed, and sealing again is safe."""

    code = "run_seal_deadline"
    status = 504


class BudgetError(OperationError):
    """A run budget or a plan's shared account refuses the request (docs/budgets.md); nothing
    was changed but an audit line."""

    code = "budget_refused"


class BudgetExceeded(BudgetError):
    """Admitting this would pass a limit; ``dimension`` names which (``tool_calls``,
    ``tokens``, ``deadline``, ...). Nothing was written, so the same id may ask again once
    budget frees."""

    code = "budget_exceeded"

    def __init__(self, message: str, *, dimension: str) -> None:
        super().__init__(message)
        self.dimension = dimension

    def details(self) -> dict[str, object]:
        return {"dimension": self.dimension}


class InvalidBudget(BudgetError):
    """A budget, account, reservation or settlement request is malformed (a negative limit,
    a depth past 16, a branch reporting its own usage)."""

    code = "invalid_budget"
    status = 400


class ReservationNotFound(BudgetError):
    """No plan account, or no reservation of that id in it."""

    code = "reservation_not_found"
    status = 404


class ReservationConflict(BudgetError):
    """The id holds another request (or another settlement): a changed request is never a
    replay."""

    code = "reservation_conflict"


class SettlementOutOfOrder(BudgetError):
    """A branch closes only after every child settled; a child settles only while its parent
    is open."""

    code = "settlement_out_of_order"


# --- store errors: the ledger failed in a way known to have changed nothing -------------------
# Later: a migration the store refuses, a lease lost before any write. An error that may have
# written something never goes here: it is an OutcomeUnknown.


class StoreError(EffectgateError):
    """The store failed in a way that is known not to have changed anything.

    Retrying with the same operation id is safe.
    """

    code = "store_error"
    status = 503
    outcome = ModelOutcome.REFUSED


# --- outcome unknown: the write or the action may or may not have taken effect ---------------
# Later: a provider call whose result was lost (run journals keep it as an uncertain call).


class OutcomeUnknown(EffectgateError):
    """The write or the action may or may not have taken effect.

    Never treated as a failure: the operation stays uncertain until the reconciler (or an
    operator) settles it, and nothing is dispatched again on a guess (invariants 1 and 3).
    """

    code = "outcome_unknown"
    status = 503
    outcome = ModelOutcome.UNCERTAIN


class CommitOutcomeUnknown(OutcomeUnknown):
    """The connection was lost after COMMIT was sent: the write may or may not be durable.

    The executor treats the operation as uncertain and leaves it to the reconciler; it never
    assumes the commit failed.
    """

    code = "indeterminate_commit"  # the wire code predates the class's name; kept stable


# --- adapter errors: a venue call went wrong; what happened there is unknown -----------------
# The real venues (stripe, aws, email) raise AdapterError itself, with the venue's own error
# class named in the message and never its credential.


class AdapterError(EffectgateError):
    """An adapter could not talk to its venue. What happened there is unknown."""

    code = "adapter_error"
    status = 502
    outcome = ModelOutcome.UNCERTAIN


# --- operator and configuration errors: an operator must act; no agent can fix them ----------
# Later: a policy version that does not verify, an anchor mismatch, a principal store error.


class OperatorError(EffectgateError):
    """Configuration or operator input is wrong, or the service is not able to serve."""

    code = "operator_error"
    status = 500
    outcome = ModelOutcome.REFUSED


class ConfigError(OperatorError):
    """A configuration value or store URL is invalid."""

    code = "config_error"


class LedgerNotFound(ConfigError):
    """The configured ledger does not exist (a SQLite file, a migrated PostgreSQL schema), and
    the command was not asked to create one."""

    code = "ledger_not_found"


class RegistryError(OperatorError):
    """An action class definition is unsafe or inconsistent (refused at registration)."""

    code = "invalid_action_class"


class PolicyError(OperatorError):
    """A policy is missing or malformed (deny by default).

    An operator's configuration error. A policy *refusing* an intent is no error: the row ends
    ``rejected`` with the policy's reason.
    """

    code = "policy_error"


class ControlError(OperatorError):
    """An operator control was given bad input (malformed envelope, unknown axis, bad threshold).

    Raised before anything is written: the control's state is unchanged.
    """

    code = "invalid_control"
    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field

    def details(self) -> dict[str, object]:
        return {"field": self.field}


class StepEvidenceRefused(ControlError):
    """A step that widens an envelope axis names no evidence the boundary can check from its
    own records (a shadow report or a window of operations, by digest), or names it wrongly."""

    code = "evidence_unverified"


class StepEvidenceMismatch(StepEvidenceRefused):
    """The evidence a widening step names differs from what the boundary recomputes from its
    records now (a figure or the digest): it is stale or was never the boundary's."""

    code = "evidence_mismatch"
    status = 409


class PrincipalExists(ControlError):
    """A live principal already has that name (revoke it first, or replace it)."""

    code = "principal_exists"
    status = 409


class PrincipalNotFound(ControlError):
    """No live principal has that name."""

    code = "principal_not_found"
    status = 404


class GrantWider(ControlError):
    """A delegation would reach beyond the grant it is made under; ``field`` names the axis
    (actions, targets, max_value, budget, environments, scope, expires_at, hops, delegable)."""

    code = "grant_wider"
    status = 403


class GrantNotFound(ControlError):
    """No grant has that id (or none is live, where a live one is needed)."""

    code = "grant_not_found"
    status = 404


class AuditTampered(OperatorError):
    """The audit chain does not verify: an entry was edited, deleted, inserted or reordered."""

    code = "audit_tampered"

    def __init__(self, message: str, *, seq: int | None = None, lane: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq
        self.lane = lane

    def details(self) -> dict[str, object]:
        return {"seq": self.seq, "lane": self.lane}


class RunSnapshotInvalid(OperatorError):
    """A recovery snapshot file does not verify: its digest, shape or order is wrong."""

    code = "run_snapshot_invalid"


class ReceiptInvalid(OperatorError):
    """A signed operation receipt does not verify. ``reason``: ``malformed`` (not a receipt,
    or not in the form signed), ``unknown_key`` (no given public key has its key id),
    ``bad_signature`` (a field was changed after signing, or another key signed it) or
    ``id_mismatch`` (its receipt id is not the digest of its statement)."""

    code = "receipt_invalid"

    def __init__(self, message: str, *, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class ServiceUnavailable(OperatorError):
    """A part of the service is not running (e.g. the MCP endpoint outside the app's lifespan)."""

    code = "unavailable"
    status = 503


class UpstreamSchemaHeld(OperatorError):
    """A gateway tool is held: its upstream's schema no longer matches the pinned digest (or the
    upstream no longer lists it). Nothing was journalled or sent; an operator must accept the
    new schema (``effectgate gateway accept``) before the tool is served again."""

    code = "upstream_schema_held"
    status = 503


# --- the doors' last resort ------------------------------------------------------------------


class InternalError(EffectgateError):
    """An exception outside this tree reached a front door (a bug). Its text is not shown."""

    code = "internal_error"
    # Inherits `uncertain`: a bug may strike after the journal, so nothing is assumed.
