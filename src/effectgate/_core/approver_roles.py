"""Who may approve what: approver roles per action class (pure, no I/O).

An approver role is a named set of principals (``treasury = ["alice", "bob"]``), or held by a
verified credential that asserts it (a JWT claim); a class may list the roles whose holders may
approve it. A class that lists none keeps the rule every
approval always had (any approver or operator, never the proposer, each at most once). This is
checked when an approval is given and again just before dispatch (an approver removed from a
role since no longer counts).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from effectgate.errors import ApproverNotEntitled, ControlError

__all__ = ["ApproverRoles"]


@dataclass(frozen=True, slots=True)
class ApproverRoles:
    #: Role name -> the principals holding it.
    members: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Action class -> the roles any of whose members may approve it.
    by_class: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for action, roles in self.by_class.items():
            unknown = sorted(set(roles) - set(self.members))
            if unknown or not roles:
                raise ControlError(
                    f"{action}: approver roles {unknown or '[]'} are not defined", field="approvers"
                )

    def entitled(self, action: str, approver: str, claimed: Collection[str] = ()) -> bool:
        """Whether ``approver`` may approve ``action``: a member of one of its roles here, or
        holding one by ``claimed`` (the roles its verified credential asserts)."""
        roles = self.by_class.get(action)
        return (
            roles is None
            or any(approver in self.members[r] for r in roles)
            or not roles.isdisjoint(claimed)
        )

    def require(self, action: str, approver: str, claimed: Collection[str] = ()) -> None:
        """Raise :class:`ApproverNotEntitled` unless ``approver`` may approve ``action``."""
        if not self.entitled(action, approver, claimed):
            roles = ", ".join(sorted(self.by_class[action]))
            raise ApproverNotEntitled(
                f"{approver!r} holds none of the approver roles of {action!r} ({roles})"
            )
