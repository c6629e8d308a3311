"""Effect requirements of an action class (docs/continuations.md): its bounded retry policy and
its compensation, and the reserved operation-id namespaces of continuations and of ids the
boundary mints. Pure: no I/O.

A retry policy is a bound on how many *separately authorised* retries a continuation may ever
make of one original; it is never permission to retry an unknown effect (invariant 9).
"""

from __future__ import annotations

from collections.abc import Mapping

from effectgate.errors import ConfigError, RegistryError

__all__ = [
    "CONTINUATION_PREFIX",
    "MAX_COMPENSATIONS",
    "MAX_RETRIES",
    "MINTED_PREFIX",
    "OPERATION_ID_MODES",
    "PROPOSAL_PREFIX",
    "check_compensations",
    "check_effect_requirements",
    "is_continuation_id",
    "is_minted_id",
    "is_proposal_handle",
]

#: At most this many retries of one original, whatever a class declares.
MAX_RETRIES = 7
#: At most this many compensations of one original.
MAX_COMPENSATIONS = 8
#: Operation ids in this namespace belong to continuations; agent-facing doors refuse them.
CONTINUATION_PREFIX = "cont:"


#: Operation ids in this namespace are minted by the boundary at the decision (a class with
#: ``operation_ids = "minted"``); a caller never chooses one (docs/service.md).
MINTED_PREFIX = "minted:"
#: A minted-id class's proposal that no decision let run (it waits for approval, or policy
#: refused it) is journalled under a handle in this namespace: a name for the proposal, never
#: an operation id; nothing is dispatched under it. Approval mints the operation id.
PROPOSAL_PREFIX = "proposal:"
#: Who supplies a class's operation ids: the caller (its request key is the id), or the
#: boundary, which mints one at the decision and binds the caller's request key to it.
OPERATION_ID_MODES = ("caller", "minted")


def is_continuation_id(operation_id: object) -> bool:
    return isinstance(operation_id, str) and operation_id.startswith(CONTINUATION_PREFIX)


def is_minted_id(operation_id: object) -> bool:
    return isinstance(operation_id, str) and operation_id.startswith(MINTED_PREFIX)


def is_proposal_handle(operation_id: object) -> bool:
    return isinstance(operation_id, str) and operation_id.startswith(PROPOSAL_PREFIX)


def check_effect_requirements(
    name: str, effect_class: str, retries: object, compensation: object
) -> None:
    """Refuse an incomplete or unsafe declaration, naming what is wrong."""
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= MAX_RETRIES:
        raise RegistryError(
            f"{name}: retries must be an integer from 0 to {MAX_RETRIES}, not {retries!r}"
        )
    if effect_class == "read_only" and (retries or compensation is not None):
        raise RegistryError(
            f"{name}: a read_only class has no effect to retry or compensate "
            "(drop retries and compensation)"
        )
    if compensation is None:
        return
    if not isinstance(compensation, str) or not compensation:
        raise RegistryError(f"{name}: compensation must name an action class")
    if compensation == name:
        raise RegistryError(f"{name}: a class cannot compensate itself")


def check_compensations(classes: Mapping[str, tuple[str, str | None]]) -> None:
    """Across a registry (``name -> (effect_class, compensation)``): every declared compensation
    names a registered mutation class. Raises ConfigError naming each one missing."""
    problems: list[str] = []
    for name, (_, compensation) in sorted(classes.items()):
        if compensation is None:
            continue
        target = classes.get(compensation)
        if target is None:
            problems.append(f"{name}: compensation {compensation!r} is not a registered class")
        elif target[0] == "read_only":
            problems.append(f"{name}: compensation {compensation!r} is read_only")
    if problems:
        raise ConfigError("; ".join(problems))
