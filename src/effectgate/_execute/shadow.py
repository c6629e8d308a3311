"""The shadow report: the agent against the incumbent, per model, harness version and window.

In shadow mode every proposal is recorded with what it would have done: a request that would
have been sent (the row ends ``shadowed``), or nothing, when policy rejected it or it waits for
approval (the agent would not have acted). The incumbent's outcome is fed by correlation id:
what it did, or that it did nothing. A case is compared once the incumbent's outcome is fed:

| agent | incumbent | verdict |
|---|---|---|
| would have sent X | did X (same fingerprint) | agreement |
| would have sent X | did Y, or nothing | disagreement |
| would not have acted (rejected, awaiting approval, no proposal) | did nothing | agreement |
| would not have acted | did something | disagreement |

The rate is reported overall and per group: the proposal's model and harness version (its
``proposed_by`` audit field; reports may group by audit fields, decisions never use them) and,
with ``window``, per time window, so it can be re-run after every model change and compared.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from effectgate._core.controls import ShadowPair
from effectgate.errors import ControlError

__all__ = ["ShadowGroup", "ShadowReport", "build_report"]


@dataclass
class ShadowGroup:
    """The cases of one model, harness version and (with a window) time window."""

    model: str | None
    harness_version: str | None
    window_start: float | None = None
    window_end: float | None = None
    agreed: int = 0
    disagreed: int = 0
    awaiting_incumbent: int = 0

    @property
    def compared(self) -> int:
        return self.agreed + self.disagreed

    @property
    def disagreement_rate(self) -> float | None:
        return self.disagreed / self.compared if self.compared else None

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "harness_version": self.harness_version,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "compared": self.compared,
            "agreed": self.agreed,
            "disagreed": self.disagreed,
            "awaiting_incumbent": self.awaiting_incumbent,
            "disagreement_rate": self.disagreement_rate,
        }


@dataclass
class ShadowReport:
    """Proposals in shadow mode against what the incumbent did, by correlation id.

    ``agreed``, ``disagreed`` and ``awaiting_incumbent`` are every case of the report (after
    ``since`` / ``until``); :meth:`groups` splits them by model, harness version and window.
    """

    action: str | None
    agreed: list[ShadowPair] = field(default_factory=list)
    disagreed: list[ShadowPair] = field(default_factory=list)
    awaiting_incumbent: list[ShadowPair] = field(default_factory=list)
    window: float | None = None
    since: float | None = None
    until: float | None = None

    @property
    def compared(self) -> int:
        return len(self.agreed) + len(self.disagreed)

    @property
    def disagreement_rate(self) -> float | None:
        return len(self.disagreed) / self.compared if self.compared else None

    @property
    def agreed_inaction(self) -> int:
        """Agreements where neither the agent nor the incumbent acted."""
        return sum(1 for p in self.agreed if not p.agent_acted)

    def groups(self) -> list[ShadowGroup]:
        """One group per model, harness version and window, in that order."""
        out: dict[tuple[str, str, float], ShadowGroup] = {}
        for cases, count in (
            (self.agreed, "agreed"),
            (self.disagreed, "disagreed"),
            (self.awaiting_incumbent, "awaiting_incumbent"),
        ):
            for p in cases:
                start = _window_start(p.at, self.window)
                # "" and -inf only sort the keys; the group keeps None.
                when = -math.inf if start is None else start
                key = (p.model or "", p.harness_version or "", when)
                group = out.get(key)
                if group is None:
                    end = None if start is None or self.window is None else start + self.window
                    group = out[key] = ShadowGroup(p.model, p.harness_version, start, end)
                setattr(group, count, getattr(group, count) + 1)
        return [out[k] for k in sorted(out)]

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action,
            "compared": self.compared,
            "agreed": len(self.agreed),
            "disagreed": len(self.disagreed),
            "awaiting_incumbent": len(self.awaiting_incumbent),
            "disagreement_rate": self.disagreement_rate,
            "agreed_inaction": self.agreed_inaction,
            "window": self.window,
            "since": self.since,
            "until": self.until,
            "groups": [g.to_dict() for g in self.groups()],
            "cases": [_case(p) for p in self.disagreed],
        }


def build_report(
    pairs: Iterable[ShadowPair],
    action: str | None,
    *,
    window: float | None = None,
    since: float | None = None,
    until: float | None = None,
) -> ShadowReport:
    """Sort ``pairs`` into a report; ``since`` <= a case's time < ``until``."""
    for name, value in (("window", window), ("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ControlError(f"{value!r} is not a finite number of seconds", field=name)
    if window is not None and window <= 0:
        raise ControlError("a report window must be longer than 0 seconds", field="window")
    report = ShadowReport(action, window=window, since=since, until=until)
    for pair in pairs:
        at = pair.at
        if at is not None and (
            (since is not None and at < since) or (until is not None and at >= until)
        ):
            continue
        verdict = pair.agrees
        if verdict is None:
            report.awaiting_incumbent.append(pair)
        elif verdict:
            report.agreed.append(pair)
        else:
            report.disagreed.append(pair)
    return report


def _window_start(at: float | None, window: float | None) -> float | None:
    if at is None or window is None:
        return None
    return math.floor(at / window) * window


def _case(p: ShadowPair) -> dict[str, object]:
    """One disagreeing case: what each side did (None: it did nothing) and where it came from."""
    effect = p.request.get("effect") if p.request else None
    return {
        "correlation_id": p.correlation_id,
        "action": p.action,
        "operation_id": p.operation_id,
        "shadow": dict(effect) if isinstance(effect, dict) else None,
        "incumbent": dict(p.incumbent_effect) if p.incumbent_effect is not None else None,
        "agent": p.outcome or "no proposal",
        "model": p.model,
        "harness_version": p.harness_version,
        "at": p.at,
    }
