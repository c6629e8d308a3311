"""effectgate: the boundary between what an AI agent proposes and an irreversible effect.

The curated public API: every name here is in ``__all__`` and documented. Besides it, the public
modules are ``effectgate.errors`` (the exception tree), ``effectgate.store`` (the store roles and
records, ``open_store``, the two dialects), ``effectgate.adapters`` (venue adapters),
``effectgate.testing`` (helpers for users' tests), ``effectgate.examples`` and ``effectgate.bench``
(the benchmark command). Modules and packages named ``_name`` are private and may move.
"""

from effectgate._core.budgets import Resources, RunBudget, RunBudgetState, RunUsage
from effectgate._core.continuation import ContinuationKind, ContinuationProof, Ground
from effectgate._core.controls import (
    Alert,
    ApprovalOutcome,
    ApprovalRules,
    AuthorityStep,
    BreakerConfig,
    ClassControls,
    Envelope,
)
from effectgate._core.evaluation import Evaluation
from effectgate._core.intent import (
    ActionClass,
    AsciiPattern,
    EffectClass,
    Intent,
    IntentBase,
    PositiveDecimal,
    Registry,
    Tier,
    identifier,
)
from effectgate._core.policy import Decision, LimitPolicy, Policy, PolicySet
from effectgate._core.principals import Principal, PrincipalRecord, Role
from effectgate._core.reservations import (
    AccountSnapshot,
    PlanPolicy,
    Reservation,
    ReservationKind,
    ReservationRequest,
    Settlement,
)
from effectgate._core.resolution import EvidenceKind, Proof, Resolution, ResolutionOutcome
from effectgate._core.run_snapshot import verify as verify_run_snapshot
from effectgate._core.run_value import RunLink
from effectgate._core.runs import (
    ProviderOutcome,
    ProviderReceipt,
    RunCall,
    RunCallKind,
    RunCallRecord,
    RunCallRef,
    RunCompletion,
    RunSeal,
    RunSummary,
)
from effectgate._core.signals import RepeatKey
from effectgate._core.speculation import (
    KeyStrategy,
    Speculation,
    SpeculationMode,
    SpeculationRecord,
    SpeculationVerdict,
)
from effectgate._core.states import State
from effectgate._evidence.audit import VerifyResult, verify_bundle, verify_entries
from effectgate._execute.adapter import (
    Adapter,
    DryRun,
    OutboundRequest,
    Outcome,
    Receipt,
    Speculates,
    VenueRecord,
)
from effectgate._execute.alerts import AlertSink, LogAlertSink, WebhookAlertSink, default_sink
from effectgate._execute.continuations import Chain, ContinuationService
from effectgate._execute.dispatcher import Dispatcher, DispatchReport
from effectgate._execute.evaluate import Evaluator
from effectgate._execute.executor import Gate
from effectgate._execute.operator import BlastRadius, Operator, ShadowReport
from effectgate._execute.predispatch import DispatchContext, Refusal
from effectgate._execute.provider_recovery import ProviderPage, ProviderReconciler
from effectgate._execute.quarantine import QuarantineService, QuarantineView
from effectgate._execute.reconciler import Reconciler, ReconcileReport
from effectgate._execute.runs import (
    RunJournal,
    RunSealer,
    SealRequest,
    current_run_call,
    run_call_context,
)
from effectgate._execute.shadow import ShadowGroup
from effectgate.errors import (
    AccessError,
    AdapterError,
    ApprovalError,
    AuditTampered,
    BadRequest,
    CommitOutcomeUnknown,
    ConfigError,
    ContinuationRefused,
    ControlError,
    DispatchRefused,
    EffectgateError,
    IdempotencyConflict,
    IntentError,
    InvalidTransition,
    KeyNamespaceDivergence,
    LedgerNotFound,
    ModelOutcome,
    OperationError,
    OperationInFlight,
    OperationNotFound,
    OperatorError,
    OutcomeUnknown,
    PermissionDenied,
    PolicyError,
    RateLimited,
    RegistryError,
    RequestError,
    ResolutionRefused,
    SpeculationStalled,
    StaleState,
    StoreError,
    Unauthenticated,
    UnknownActionClass,
)
from effectgate.store import SQLiteStore, Store, open_store
from effectgate.store.base import Operation

__version__ = "0.1.0"

__all__ = [
    "AccessError",
    "AccountSnapshot",
    "ActionClass",
    "Adapter",
    "AdapterError",
    "Alert",
    "AlertSink",
    "ApprovalError",
    "ApprovalOutcome",
    "ApprovalRules",
    "AsciiPattern",
    "AuditTampered",
    "AuthorityStep",
    "BadRequest",
    "BlastRadius",
    "BreakerConfig",
    "Chain",
    "ClassControls",
    "CommitOutcomeUnknown",
    "ConfigError",
    "ContinuationKind",
    "ContinuationProof",
    "ContinuationRefused",
    "ContinuationService",
    "ControlError",
    "Decision",
    "DispatchContext",
    "DispatchRefused",
    "DispatchReport",
    "Dispatcher",
    "DryRun",
    "EffectClass",
    "EffectgateError",
    "Envelope",
    "Evaluation",
    "Evaluator",
    "EvidenceKind",
    "Gate",
    "Ground",
    "IdempotencyConflict",
    "Intent",
    "IntentBase",
    "IntentError",
    "InvalidTransition",
    "KeyNamespaceDivergence",
    "KeyStrategy",
    "LedgerNotFound",
    "LimitPolicy",
    "LogAlertSink",
    "ModelOutcome",
    "Operation",
    "OperationError",
    "OperationInFlight",
    "OperationNotFound",
    "Operator",
    "OperatorError",
    "OutboundRequest",
    "Outcome",
    "OutcomeUnknown",
    "PermissionDenied",
    "PlanPolicy",
    "Policy",
    "PolicyError",
    "PolicySet",
    "PositiveDecimal",
    "Principal",
    "PrincipalRecord",
    "Proof",
    "ProviderOutcome",
    "ProviderPage",
    "ProviderReceipt",
    "ProviderReconciler",
    "QuarantineService",
    "QuarantineView",
    "RateLimited",
    "Receipt",
    "ReconcileReport",
    "Reconciler",
    "Refusal",
    "Registry",
    "RegistryError",
    "RepeatKey",
    "RequestError",
    "Reservation",
    "ReservationKind",
    "ReservationRequest",
    "Resolution",
    "ResolutionOutcome",
    "ResolutionRefused",
    "Resources",
    "Role",
    "RunBudget",
    "RunBudgetState",
    "RunCall",
    "RunCallKind",
    "RunCallRecord",
    "RunCallRef",
    "RunCompletion",
    "RunJournal",
    "RunLink",
    "RunSeal",
    "RunSealer",
    "RunSummary",
    "RunUsage",
    "SQLiteStore",
    "SealRequest",
    "Settlement",
    "ShadowGroup",
    "ShadowReport",
    "Speculates",
    "Speculation",
    "SpeculationMode",
    "SpeculationRecord",
    "SpeculationStalled",
    "SpeculationVerdict",
    "StaleState",
    "State",
    "Store",
    "StoreError",
    "Tier",
    "Unauthenticated",
    "UnknownActionClass",
    "VenueRecord",
    "VerifyResult",
    "WebhookAlertSink",
    "__version__",
    "current_run_call",
    "default_sink",
    "identifier",
    "open_store",
    "run_call_context",
    "verify_bundle",
    "verify_entries",
    "verify_run_snapshot",
]
