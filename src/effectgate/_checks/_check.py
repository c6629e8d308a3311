"""One check's outcome, shared by every ``effectgate verify`` module (so none imports another)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAIL", "NA", "PASS", "Check"]

PASS, FAIL, NA = "pass", "fail", "n/a"


@dataclass(frozen=True, slots=True)
class Check:
    """A guarantee checked for one subject: ``pass``, ``fail`` or ``n/a``, and why."""

    guarantee: str
    subject: str
    status: str
    why: str
