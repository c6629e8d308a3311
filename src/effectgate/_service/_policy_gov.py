"""Governed policy in the service: policy files, the active version every replica follows, and
the recorded decisions a proposed policy is replayed over (docs/authority.md).

A policy file holds ``[policies.NAME]`` tables, exactly as in the service config. The active
version lives in the store (``PolicyVersions``); :class:`PolicyFollower` reads it and swaps the
gate's policy when it changes, so an approved change reaches every replica without a restart.
"""

from __future__ import annotations

import json
import logging
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

from effectgate._core.governed_policy import RecordedDecision, document_of, policy_set
from effectgate._core.intent import Registry
from effectgate._core.policy import LimitPolicy
from effectgate._execute.executor import Gate
from effectgate._service._config import _policy
from effectgate._service._toml import Section
from effectgate.errors import ConfigError
from effectgate.store.roles import Store

__all__ = ["PolicyFollower", "read_policy_file", "read_policy_text", "recorded_decisions"]

log = logging.getLogger("effectgate.policy")


def read_policy_file(path: str, registry: Registry) -> dict[str, dict[str, object]]:
    """The canonical document of a policy file, checked like the config's ``[policies]``."""
    try:
        source = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    return read_policy_text(source, registry, path)


def read_policy_text(
    source: str, registry: Registry, origin: str = "policy"
) -> dict[str, dict[str, object]]:
    """The canonical document of a policy file's text (``origin`` names it in errors): the
    one check the CLI's files and the HTTP API's bodies both go through."""
    try:
        data = tomllib.loads(source)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    top = Section(data, (), origin, source)
    limits: dict[str, LimitPolicy] = {}
    for name, sec in top.tables("policies"):
        if name not in registry:
            sec.fail(None, f"no action class named {name!r}")
        limits[name] = _policy(sec)
        if registry.get(name).value_of is None and (
            limits[name].max_value is not None or limits[name].approve_above is not None
        ):
            sec.fail(
                None,
                f"class {name!r} declares no value measure: a value limit could never be checked",
            )
    top.done()
    return document_of(limits)


def recorded_decisions(
    store: Store, *, since: float, until: float | None = None
) -> Iterator[RecordedDecision]:
    """Every proposal journalled in the window, with the decision recorded for it."""
    for e in store.iter_audit():
        if e.kind != "transition" or e.at < since or (until is not None and e.at > until):
            continue
        decision = e.detail.get("decision")
        if not isinstance(decision, dict) or e.scope is None or e.operation_id is None:
            continue
        row = store.get(e.scope, e.operation_id)
        if row is None:
            continue
        yield RecordedDecision(
            e.scope,
            e.operation_id,
            row.action,
            row.effect,
            bool(decision.get("allowed")),
            str(decision.get("tier")),
            str(decision.get("policy_version")),
        )


class PolicyFollower:
    """Keeps a gate on the store's active policy version."""

    def __init__(self, store: Store, gate: Gate, registry: Registry) -> None:
        self.store = store
        self.gate = gate
        self.registry = registry
        self.active_hash: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> bool:
        """Adopt the active version if it changed; True when it did."""
        active = self.store.active_policy()
        if active is None or active.policy_hash == self.active_hash:
            return False
        self.gate.policy = policy_set(json.loads(active.document), self.registry)
        self.active_hash = active.policy_hash
        log.warning(
            "policy %s is active (proposal %s, by %s)",
            active.policy_hash,
            active.proposal_id,
            active.activated_by,
        )
        return True

    def start(self, interval: float) -> None:
        def run() -> None:
            while not self._stop.wait(interval):
                try:
                    self.refresh()
                except Exception:  # keep following; the next poll tries again
                    log.exception("reading the active policy failed")

        self._thread = threading.Thread(target=run, name="policy-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
