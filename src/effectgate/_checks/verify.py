"""``effectgate verify``: effectgate's guarantees checked against the user's own configuration.

Two kinds of check, each ending ``pass``, ``fail`` or ``n/a`` with why:

* the configuration's safety, which a file can load and still get wrong: a mutation class
  whose policy allows every value automatically; a class that declares its venue honours keys
  without a passing conformance report; a kill switch an agent credential can reach (one name
  that both proposes and operates, across the file's tokens and the ledger's principals); an
  approval tier whose class floor needs more distinct approvers than exist for it;
* the ledger cases of seed 001 and the design's invariants, run by the same scenarios and the
  same shared checkers as ``effectgate demo`` (:mod:`effectgate._evidence.invariants`) in scratch
  ledgers of the configured store's kind (temporary SQLite files, or scratch schemas of the
  PostgreSQL server, dropped after), with the paper venue standing in for the venue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from xml.etree import ElementTree as ET

from effectgate._checks._check import FAIL, NA, PASS, Check
from effectgate._core.intent import EffectClass, Tier
from effectgate._core.policy import LimitPolicy
from effectgate._core.principals import Capability, Principal
from effectgate._service._config import ServiceConfig
from effectgate.adapters.conformance.kit import EXACTLY_ONCE
from effectgate.store.roles import Store

__all__ = ["Check", "config_checks", "junit_xml", "run_verify", "scenario_checks"]


def _policy_checks(cfg: ServiceConfig) -> Iterable[Check]:
    name = "policy-does-not-allow-every-value"
    for ac in cfg.registry:
        if ac.effect_class is EffectClass.READ_ONLY:
            yield Check(name, ac.name, NA, "read-only class: nothing to bound")
            continue
        if ac.name not in cfg.policy_names:
            yield Check(name, ac.name, PASS, "no policy: every proposal is denied")
            continue
        if ac.value_of is None:
            yield Check(name, ac.name, NA, "the class declares no value measure")
            continue
        pol = cfg.policy.get(ac.name)
        if not isinstance(pol, LimitPolicy):
            yield Check(name, ac.name, NA, f"policy {type(pol).__name__} cannot be inspected")
            continue
        if ac.tier_floor is not Tier.VALIDATE:
            yield Check(name, ac.name, PASS, f"tier floor {ac.tier_floor.value}: a human decides")
        elif pol.max_value is None and pol.approve_above is None:
            yield Check(
                name,
                ac.name,
                FAIL,
                "a mutation with a value measure, no max_value and no approve_above: every "
                f"value runs automatically (set [policies.{ac.name}] max_value)",
            )
        else:
            bound = pol.max_value if pol.max_value is not None else pol.approve_above
            yield Check(name, ac.name, PASS, f"automatic only up to {bound}")


def _key_checks(cfg: ServiceConfig) -> Iterable[Check]:
    from effectgate._service._venues import class_claims

    name = "honoured-key-is-measured"
    kinds = {n: a.kind for n, a in cfg.adapters.items()}
    claims = class_claims(cfg.registry, cfg.path, kinds)
    for ac in cfg.registry:
        declared = ac.venue.honours_key.value
        if declared != "true":
            yield Check(name, ac.name, NA, f"honours_key = {declared!r}: at-most-once claimed")
        elif claims[ac.name]["claim"] == EXACTLY_ONCE:
            yield Check(name, ac.name, PASS, claims[ac.name]["why"])
        else:
            yield Check(name, ac.name, FAIL, f"honours_key = true but {claims[ac.name]['why']}")


def _granted(name: str, role: str) -> set[Capability]:
    who = Principal(name, role, "*")  # type: ignore[arg-type]
    return {c for c in Capability if who.may(c)}


def _capabilities(cfg: ServiceConfig, store: Store | None) -> dict[str, set[Capability]]:
    caps: dict[str, set[Capability]] = defaultdict(set)
    for t in cfg.tokens:
        caps[t.name] |= _granted(t.name, t.role)
    if store is not None:
        for p in store.list_principals():
            if p.revoked_at is None:
                caps[p.name] |= _granted(p.name, p.role)
    return caps


def _kill_switch_check(cfg: ServiceConfig, store: Store | None) -> Check:
    name = "kill-switch-unreachable-by-agents"
    caps = _capabilities(cfg, store)
    both = sorted(n for n, c in caps.items() if Capability.PROPOSE in c and Capability.OPERATE in c)
    if both:
        return Check(
            name,
            "credentials",
            FAIL,
            f"{', '.join(both)} can propose actions and also operate the kill switches",
        )
    where = "the file's tokens and the ledger's principals" if store else "the file's tokens"
    return Check(name, "credentials", PASS, f"no agent credential operates ({where})")


def _approval_checks(cfg: ServiceConfig, store: Store | None) -> Iterable[Check]:
    name = "approval-quorum-reachable"
    anyone = sorted(n for n, c in _capabilities(cfg, store).items() if Capability.APPROVE in c)
    roles = cfg.authority.approver_roles
    for ac in cfg.registry:
        if ac.tier_floor is not Tier.MULTI_APPROVE:
            yield Check(name, ac.name, NA, f"tier floor {ac.tier_floor.value}")
            continue
        need = cfg.approvals.multi_approvers
        approvers, who = anyone, "can approve"
        if roles is not None and ac.name in roles.by_class:
            # Only members of the class's approver roles count (docs/authority.md).
            listed = sorted(roles.by_class[ac.name])
            approvers = sorted(set().union(*(roles.members[r] for r in listed)))
            who = f"hold its approver roles ({', '.join(listed)})"
        if len(approvers) < need:
            yield Check(
                name,
                ac.name,
                FAIL,
                f"floor multi_approve needs {need} distinct approvers; "
                f"{len(approvers)} {who} ({', '.join(approvers) or 'none'})",
            )
        else:
            yield Check(name, ac.name, PASS, f"{len(approvers)} approvers for {need} required")


def config_checks(cfg: ServiceConfig, store: Store | None = None) -> list[Check]:
    """The configuration's safety (module docstring); ``store``: the ledger, for principals."""
    return [
        *_policy_checks(cfg),
        *_key_checks(cfg),
        _kill_switch_check(cfg, store),
        *_approval_checks(cfg, store),
    ]


def scenario_checks(store_url: str | None) -> list[Check]:
    """Seed 001's ledger cases and the invariants, as ``effectgate demo`` runs them, in scratch
    ledgers of ``store_url``'s kind (None or SQLite: temporary files)."""
    from effectgate._checks.demo import run_demo

    return [
        Check(f"scenario {r.number}: {r.title}", r.invariant, PASS if r.held else FAIL, r.observed)
        for r in run_demo(store_url if store_url and store_url.startswith("postgres") else None)
    ]


def run_verify(
    cfg: ServiceConfig, store_url: str | None, store: Store | None, *, adapters: bool = False
) -> list[Check]:
    """Every check; ``adapters``: also the conformance kit against the configured adapters."""
    from effectgate._checks.verify_own import own_class_checks

    checks = [
        *config_checks(cfg, store),
        *own_class_checks(cfg, store_url),
        *scenario_checks(store_url),
    ]
    if adapters:
        from effectgate._checks.verify_adapters import adapter_checks

        checks += adapter_checks(cfg)
    return checks


def junit_xml(checks: list[Check]) -> bytes:
    """A JUnit report: one test case per check; ``fail`` is a failure, ``n/a`` skipped."""
    suite = ET.Element(
        "testsuite",
        name="effectgate verify",
        tests=str(len(checks)),
        failures=str(sum(c.status == FAIL for c in checks)),
        skipped=str(sum(c.status == NA for c in checks)),
    )
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=c.guarantee, name=c.subject)
        if c.status == FAIL:
            ET.SubElement(case, "failure", message=c.why)
        elif c.status == NA:
            ET.SubElement(case, "skipped", message=c.why)
        else:
            ET.SubElement(case, "system-out").text = c.why
    return bytes(ET.tostring(suite, encoding="utf-8", xml_declaration=True))
