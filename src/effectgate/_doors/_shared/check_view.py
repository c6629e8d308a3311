"""What ``effectgate check`` says about each action class, in one place (service and gateway).

Per class: its adapter, effect class, tier floor and policy; its venue contract (key honoured,
read view, visibility horizon, key retention, sandbox promises, listing, conformance report)
with the delivery claim effectgate makes from it (exactly-once only where declared and verified
by a conformance report, docs/adapters.md); and its speculation settings (mode, verdict
lifetime, strategy, the retry horizon a verdict must outlive and the margin by which it does,
the re-speculation bound; docs/speculation.md).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from effectgate._core.intent import ActionClass

__all__ = ["class_summary", "print_class_details"]


def class_summary(
    ac: ActionClass,
    claim: dict[str, str],
    *,
    policy: bool,
    dispatch_timeout: float,
    in_flight_grace: float,
    listing: str | None = None,
) -> dict[str, Any]:
    """One class as ``check --json`` shows it. ``listing``: how its adapter lists, where known
    (else the venue block's declaration, else "as the adapter declares")."""
    venue = ac.venue
    spec = ac.speculation
    horizon = dispatch_timeout + in_flight_grace
    speculation: dict[str, Any] | None = None
    if spec is not None:
        speculation = {
            "mode": spec.mode.value,
            "verdict_lifetime": spec.verdict_lifetime,
            "strategy": spec.strategy.value,
            "retry_horizon": horizon,
            "margin": round(spec.verdict_lifetime - horizon, 6),
            "max_tries": spec.max_tries,
            "max_wait": spec.max_wait,
        }
    return {
        "adapter": ac.adapter,
        "effect_class": ac.effect_class.value,
        "tier_floor": ac.tier_floor.value,
        "policy": policy,
        "listing": venue.listing or listing or "as the adapter declares",
        "delivery": claim["claim"],
        "delivery_why": claim["why"],
        "venue": {
            "honours_key": venue.honours_key.value,
            "read_view": venue.read_view.value,
            "visibility_horizon": ac.visibility_horizon,
            "key_retention": ac.key_retention,
            "sandbox_uses_given_key": venue.sandbox_uses_given_key,
            "sandbox_key_persistence": venue.sandbox_key_persistence,
            "conformance_report": venue.conformance_report,
            # Pinned at registration (docs/continuations.md, "Contract revisions").
            "revisions": dict(venue.revisions),
        },
        "speculation": speculation,
    }


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}s"


def print_class_details(console: Console, classes: dict[str, dict[str, Any]]) -> None:
    """Each class's venue contract, delivery claim and speculation, a few lines per class."""
    for name, c in classes.items():
        v = c["venue"]
        console.print(f"{name}: {c['delivery']}: {c['delivery_why']}", highlight=False)
        sandbox = (
            f"; sandbox uses the given key {'yes' if v['sandbox_uses_given_key'] else 'no'}, "
            f"keeps its keys {_seconds(v['sandbox_key_persistence'])}"
            if c["speculation"] is not None
            else ""
        )
        console.print(
            f"  venue: honours_key {v['honours_key']}, read view {v['read_view']}, "
            f"visibility horizon {_seconds(v['visibility_horizon'])}, key retention "
            f"{_seconds(v['key_retention'])}, listing {c['listing']}, report "
            f"{v['conformance_report'] or 'none'}{sandbox}",
            highlight=False,
        )
        s = c["speculation"]
        if s is None:
            console.print("  speculation: off", highlight=False)
        else:
            console.print(
                f"  speculation: {s['mode']}, verdict lifetime {_seconds(s['verdict_lifetime'])}, "
                f"strategy {s['strategy']}, retry horizon {_seconds(s['retry_horizon'])} "
                f"(dispatch_timeout + in_flight_grace), margin {_seconds(s['margin'])}, "
                f"at most {s['max_tries']} tries in {_seconds(s['max_wait'])}",
                highlight=False,
            )
        pins = v["revisions"]
        console.print(
            "  revisions: "
            + (", ".join(f"{k} {r}" for k, r in sorted(pins.items())) if pins else "none pinned"),
            highlight=False,
        )
