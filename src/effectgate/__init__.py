"""effectgate: the boundary between what an AI agent proposes and an irreversible effect.

The curated public API. Everything else lives in private-by-convention modules and may move.
"""

from __future__ import annotations

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
    AdapterError,
    BadRequest,
    ConfigError,
    EffectgateError,
    IdempotencyConflict,
    IndeterminateCommit,
    IntentError,
    InvalidTransition,
    OperationInFlight,
    OperationNotFound,
    PermissionDenied,
    PolicyError,
    RateLimited,
    RegistryError,
    StaleState,
    StoreError,
    Unauthenticated,
    UnknownActionClass,
)
from effectgate.execute.adapter import Adapter, OutboundRequest, Outcome, Receipt, VenueRecord
from effectgate.execute.executor import Gate
from effectgate.execute.reconciler import Reconciler, ReconcileReport
from effectgate.store import SQLiteStore, Store, open_store
from effectgate.store.base import Operation

__version__ = "0.1.0"

__all__ = [
    "ActionClass",
    "Adapter",
    "AdapterError",
    "BadRequest",
    "ConfigError",
    "Decision",
    "EffectClass",
    "EffectgateError",
    "Gate",
    "IdempotencyConflict",
    "IndeterminateCommit",
    "Intent",
    "IntentBase",
    "IntentError",
    "InvalidTransition",
    "LimitPolicy",
    "Operation",
    "OperationInFlight",
    "OperationNotFound",
    "OutboundRequest",
    "Outcome",
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
    "SQLiteStore",
    "StaleState",
    "State",
    "Store",
    "StoreError",
    "Tier",
    "Unauthenticated",
    "UnknownActionClass",
    "VenueRecord",
    "__version__",
    "identifier",
    "open_store",
]
