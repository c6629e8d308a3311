"""effectgate: the boundary between what an AI agent proposes and an irreversible effect.

The curated public API. Everything else lives in private-by-convention modules and may move.
"""

from __future__ import annotations

from effectgate.audit import VerifyResult, verify_bundle, verify_entries
from effectgate.core.controls import (
    Alert,
    ApprovalOutcome,
    ApprovalRules,
    AuthorityStep,
    BreakerConfig,
    ClassControls,
    Envelope,
)
from effectgate.core.intent import (
    ActionClass,
    EffectClass,
    Intent,
    IntentBase,
    PositiveDecimal,
    Registry,
    Tier,
    identifier,
)
from effectgate.core.policy import Decision, LimitPolicy, Policy, PolicySet
from effectgate.core.states import State
from effectgate.errors import (
    AccessError,
    AdapterError,
    ApprovalError,
    AuditTampered,
    BadRequest,
    CommitOutcomeUnknown,
    ConfigError,
    ControlError,
    EffectgateError,
    IdempotencyConflict,
    IntentError,
    InvalidTransition,
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
    StaleState,
    StoreError,
    Unauthenticated,
    UnknownActionClass,
)
from effectgate.execute.adapter import Adapter, OutboundRequest, Outcome, Receipt, VenueRecord
from effectgate.execute.alerts import AlertSink, LogAlertSink, WebhookAlertSink, default_sink
from effectgate.execute.executor import Gate
from effectgate.execute.operator import BlastRadius, Operator, ShadowReport
from effectgate.execute.reconciler import Reconciler, ReconcileReport
from effectgate.store import SQLiteStore, Store, open_store
from effectgate.store.base import Operation

__version__ = "0.1.0"

__all__ = [
    "AccessError",
    "ActionClass",
    "Adapter",
    "AdapterError",
    "Alert",
    "AlertSink",
    "ApprovalError",
    "ApprovalOutcome",
    "ApprovalRules",
    "AuditTampered",
    "AuthorityStep",
    "BadRequest",
    "BlastRadius",
    "BreakerConfig",
    "ClassControls",
    "CommitOutcomeUnknown",
    "ConfigError",
    "ControlError",
    "Decision",
    "EffectClass",
    "EffectgateError",
    "Envelope",
    "Gate",
    "IdempotencyConflict",
    "Intent",
    "IntentBase",
    "IntentError",
    "InvalidTransition",
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
    "Policy",
    "PolicyError",
    "PolicySet",
    "PositiveDecimal",
    "RateLimited",
    "Receipt",
    "ReconcileReport",
    "Reconciler",
    "Registry",
    "RegistryError",
    "RequestError",
    "SQLiteStore",
    "ShadowReport",
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
    "default_sink",
    "identifier",
    "open_store",
    "verify_bundle",
    "verify_entries",
]
