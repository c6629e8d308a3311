"""The running service: one Gate, its store, adapters, reconciler, tokens and metrics.

Both front doors (HTTP and MCP) call :meth:`Service.propose` and :meth:`Service.lookup`, so the
identity rules, the strict parser and the in-flight rule are the same whichever door an agent
uses. Everything here is synchronous; the async doors run it in a worker thread.

In flight (HTTP 409, MCP error ``operation_in_flight``) has two sources, so that it holds with
several worker processes and hosts on one store:

* this process is executing a request with the same ``(scope, operation id)`` right now;
* the ledger row is ``submitted`` and was journalled less than ``dispatch_timeout +
  in_flight_grace`` seconds ago: whichever process journalled it may still be waiting for the
  venue. Past that bound the call has ended (or its process died) and the row is *uncertain*;
  a replay then returns it as it stands and the reconciler settles it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from effectgate._core.evaluation import Evaluation
from effectgate._core.principals import Capability
from effectgate._core.runs import RunCallRef
from effectgate._core.states import State
from effectgate._execute.adapter import Adapter
from effectgate._execute.alerts import AlertSink, MultiSink, WebhookAlertSink, default_sink
from effectgate._execute.dispatcher import Dispatcher, DispatchReport
from effectgate._execute.evaluate import Evaluator
from effectgate._execute.executor import Gate
from effectgate._execute.operator import Operator
from effectgate._execute.reconciler import Reconciler, ReconcileReport
from effectgate._service._anchor_config import AnchorJob
from effectgate._service._auth import Principal, RateLimiter, TokenBook
from effectgate._service._authority import start_announcers, wire_authority
from effectgate._service._config import AdapterConfig, ServiceConfig, import_object
from effectgate._service._identity import JwtVerifier, RevocationFeed
from effectgate._service._metrics import Metrics, TimedAdapter
from effectgate._service._venues import (
    VENUE_KINDS,
    DeliveryCollector,
    build_venue_adapter,
    config_claims,
)
from effectgate.adapters._paper_sandbox import PaperSandbox
from effectgate.adapters.http import HttpVenueAdapter
from effectgate.adapters.paper import PaperAdapter, PaperVenue
from effectgate.errors import ConfigError, OperationInFlight
from effectgate.store import open_store
from effectgate.store.base import Operation
from effectgate.store.roles import Store

__all__ = ["Service", "build_adapter", "report_dict"]

log = logging.getLogger("effectgate.service")


def build_adapter(cfg: AdapterConfig) -> Adapter:
    """The adapter a config section describes. Credentials are read here, once."""
    if cfg.kind == "http":
        if cfg.endpoint is None:
            raise ConfigError(f"adapters.{cfg.name}: endpoint is required")
        return HttpVenueAdapter(
            cfg.endpoint,
            credential_env=cfg.credential_env,
            credential_file=cfg.credential_file,
            timeout=cfg.timeout,
            speculation=bool(cfg.options.get("speculation", False)),
        )
    if cfg.kind in VENUE_KINDS:
        # For these kinds ``factory`` holds the credential hook's name (never a secret).
        return build_venue_adapter(
            cfg.name,
            cfg.kind,
            endpoint=cfg.endpoint,
            credential={
                "credential_env": cfg.credential_env,
                "credential_file": cfg.credential_file,
                "credential_hook": cfg.factory,
            },
            timeout=cfg.timeout,
            options=dict(cfg.options),
        )
    if cfg.kind == "paper":
        venue = PaperVenue(
            honour_key=bool(cfg.options.get("honour_key", True)),
            read_lag=float(cfg.options.get("read_lag", 0.0)),
        )
        mode = cfg.options.get("sandbox")
        latency = float(cfg.options.get("latency", 0.0))
        if mode is None:
            return PaperAdapter(venue, latency=latency)
        lifetime = float(cfg.options.get("sandbox_lifetime", 60.0))
        sandbox = PaperSandbox(venue, mode=str(mode), lifetime=lifetime)
        return PaperAdapter(venue, sandbox=sandbox, latency=latency)
    if cfg.factory is None:
        raise ConfigError(f"adapters.{cfg.name}: factory is required")
    made = import_object(cfg.factory)(**dict(cfg.options))
    if not isinstance(made, Adapter):
        raise ConfigError(f"adapters.{cfg.name}: {cfg.factory} did not return an Adapter")
    return made


@dataclass
class _Watch:
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    last: ReconcileReport | DispatchReport | None = None


class Service:
    """Everything one service process holds. Safe to share between threads."""

    def __init__(
        self,
        config: ServiceConfig,
        *,
        store: Store | None = None,
        adapters: Mapping[str, Adapter] | None = None,
        clock: Callable[[], float] = time.time,
        create: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock
        # ``create``: only ``serve`` may start a configured ledger that does not exist yet.
        self.store = (
            store
            if store is not None
            else open_store(config.store.url, create=create, **dict(config.store.options))
        )
        raw = dict(adapters) if adapters is not None else {}
        try:
            for name, cfg in config.adapters.items():
                if name not in raw:
                    raw[name] = build_adapter(cfg)
        except Exception:
            for adapter in raw.values():
                adapter.close()
            self.store.close()
            raise
        self.metrics = Metrics(self.store, clock, config.registry.names())
        self.metrics.registry.register(DeliveryCollector(config_claims(config)))
        self.adapters: dict[str, Adapter] = {
            name: TimedAdapter(a, name, self.metrics.dispatch_seconds) for name, a in raw.items()
        }
        settings = config.service
        # Alerts are always logged at ERROR (by deliver); a webhook is the optional pager.
        self._webhook = (
            WebhookAlertSink(config.alerts.webhook, timeout=config.alerts.timeout)
            if config.alerts.webhook
            else None
        )
        self.alerts: AlertSink = MultiSink([self._webhook]) if self._webhook else default_sink()
        self.gate = Gate(
            store=self.store,
            registry=config.registry,
            adapters=self.adapters,
            policy=config.policy,
            clock=clock,
            dispatch_timeout=settings.dispatch_timeout,
            breakers=config.breakers,
            approvals=config.approvals,
            alerts=self.alerts,
            in_flight_grace=settings.in_flight_grace,
            evaluator=evaluator_from_env(config),
        )
        self.reconciler = Reconciler(
            store=self.store,
            registry=config.registry,
            adapters=self.adapters,
            clock=clock,
            keep_repaired=False,
            alerts=self.alerts,
            call_timeout=settings.probe_timeout,
        )
        #: Operator actions (the admin API only; never reachable with an agent token).
        self.operator = Operator(
            store=self.store, registry=config.registry, alerts=self.alerts, clock=clock
        )
        # Tokens are looked up in the ledger on every request (a revocation holds at once).
        #: The revocation feed verified identities are checked against (None: no feed).
        self.revocations: RevocationFeed | None = None
        self.tokens = TokenBook(config.tokens, self.store, verifier=self._verifier(config))
        # Approver roles, precondition binding, the pipeline's authority stages, the policy
        # follower (docs/authority.md); after the verifier, whose revocation feed they read.
        self.policy_follower = wire_authority(self)
        #: Signed webhooks announcing approval requests ([channels.NAME] with a url).
        self.announcers = start_announcers(self)
        self.limiter = RateLimiter(
            settings.rate_limit,
            overrides={t.name: t.rate_limit for t in config.tokens if t.rate_limit},
        )
        if config.tokens:
            log.warning(
                "[tokens] in %s are deprecated: create tokens in the ledger with "
                "`effectgate token create` (they can be revoked at once)",
                config.path,
            )
        self._lock = threading.Lock()
        self._in_flight: set[tuple[str, str]] = set()
        self._watch = _Watch()
        #: Sends the rows a control released (approvals, a lifted switch, a reset breaker).
        self.dispatcher = Dispatcher(self.gate)
        self._dispatch_watch = _Watch()
        self.anchoring: AnchorJob | None = None
        unguarded = sorted(set(config.registry.names()) - config.policy_names)
        if unguarded:
            log.warning(
                "no policy for %s: every intent of these classes is rejected (deny by default)",
                ", ".join(unguarded),
            )

    # --- agent operations -------------------------------------------------------------------

    def propose(
        self,
        principal: Principal,
        action: str,
        operation_id: str,
        body: bytes | Mapping[str, object],
        run_call: RunCallRef | None = None,
        evaluation_token: str | None = None,
    ) -> Operation:
        """Submit an intent under ``operation_id`` in the principal's scope (see module doc);
        ``run_call``: the run call it is proposed from (docs/runs.md); ``evaluation_token``:
        from :meth:`evaluate`, refused if what it covers changed since."""
        principal.require(Capability.PROPOSE)
        key = (principal.scope, operation_id)
        with self._lock:
            if key in self._in_flight:
                raise OperationInFlight(
                    f"operation {operation_id!r} is still being executed; retry shortly",
                    operation_id=operation_id,
                    retry_after=1.0,
                )
            self._in_flight.add(key)
        try:
            # The token's name is recorded as the proposer: it may never approve this action.
            op = self.gate.submit(
                action,
                operation_id,
                body,
                scope=principal.scope,
                principal=principal.name,
                run_call=run_call,
                evaluation_token=evaluation_token,
            )
        finally:
            with self._lock:
                self._in_flight.discard(key)
        if op.replayed and op.state is State.SUBMITTED and op.submitted_at is not None:
            bound = self.config.service.dispatch_timeout + self.config.service.in_flight_grace
            remaining = op.submitted_at + bound - self.clock()
            if remaining > 0:
                raise OperationInFlight(
                    f"operation {operation_id!r} was journalled {bound - remaining:.1f}s ago and "
                    "may still be executing; retry shortly",
                    operation_id=operation_id,
                    retry_after=remaining,
                )
        return op

    def evaluate(
        self,
        principal: Principal,
        action: str,
        body: bytes | Mapping[str, object],
        operation_id: str | None = None,
        run_call: RunCallRef | None = None,
    ) -> Evaluation:
        """What proposing ``body`` would do now, read-only, with its evaluation token."""
        principal.require(Capability.PROPOSE)
        return self.gate.evaluate(
            action,
            body,
            scope=principal.scope,
            principal=principal.name,
            operation_id=operation_id,
            run_call=run_call,
        )

    def lookup(self, principal: Principal, operation_id: str) -> Operation:
        """An operation in the principal's own scope (another tenant's is simply not found)."""
        principal.require(Capability.PROPOSE)
        return self.gate.get(operation_id, scope=principal.scope)

    # --- operator operations ----------------------------------------------------------------

    def reconcile_now(self) -> ReconcileReport:
        return self.reconciler.run_once()

    def start_reconciler(self) -> None:
        """Run the reconciler as a standing job (``reconcile_interval`` > 0), once per process."""
        if self.config.anchor is not None and self.anchoring is None:
            # [anchor]: checkpoint the audit heads on a schedule, beside the reconciler.
            self.anchoring = AnchorJob(self.store, self.config.anchor)
            self.anchoring.start()
        interval = self.config.service.reconcile_interval
        if interval <= 0 or self._watch.thread is not None:
            return

        def keep(report: ReconcileReport) -> None:
            self._watch.last = report

        def run() -> None:
            while not self._watch.stop.is_set():
                try:
                    self.reconciler.watch(interval, self._watch.stop, keep)
                except Exception as exc:  # a venue or store outage must not end the job
                    log.error("reconciler pass failed (%s); retrying", type(exc).__name__)
                    self._watch.stop.wait(interval)

        self._watch.thread = threading.Thread(target=run, name="effectgate-reconciler", daemon=True)
        self._watch.thread.start()

    def dispatch_now(self) -> DispatchReport:
        return self.dispatcher.run_once()

    def start_dispatcher(self) -> None:
        """Run the dispatcher of released rows as a standing job (``dispatch_interval`` > 0)."""
        interval = self.config.service.dispatch_interval
        watch = self._dispatch_watch
        if interval <= 0 or watch.thread is not None:
            return

        def keep(report: DispatchReport) -> None:
            watch.last = report

        def run() -> None:
            while not watch.stop.is_set():
                try:
                    self.dispatcher.watch(interval, watch.stop, keep)
                except Exception as exc:  # a store outage must not end the job
                    log.error("dispatcher pass failed (%s); retrying", type(exc).__name__)
                    watch.stop.wait(interval)

        watch.thread = threading.Thread(target=run, name="effectgate-dispatcher", daemon=True)
        watch.thread.start()

    def _verifier(self, config: ServiceConfig) -> JwtVerifier | None:
        """JWT verification and its revocation feed, from ``[identity]`` (docs/authority.md)."""
        if config.identity is None:
            return None
        if config.identity.revocations is not None:
            self.revocations = RevocationFeed(
                config.identity.revocations, interval=config.identity.revocation_interval
            )
            self.revocations.start()
        return JwtVerifier(config.identity.jwt, self.revocations)

    def close(self) -> None:
        if self.anchoring is not None:
            self.anchoring.close()
        if self.revocations is not None:
            self.revocations.stop()
        if self.policy_follower is not None:
            self.policy_follower.stop()
        for hook in self.announcers:
            hook.close()
        for job in (self._watch, self._dispatch_watch):
            job.stop.set()
        for job in (self._watch, self._dispatch_watch):
            if job.thread is not None:
                job.thread.join(timeout=10)
        for adapter in self.adapters.values():
            adapter.close()
        if self._webhook is not None:
            self._webhook.close()
        self.store.close()


#: Where the service reads the evaluation tokens' HMAC secret (every process of one service
#: must share it; unset: a random secret per process, so a token verifies only where issued).
EVALUATION_SECRET_ENV = "EFFECTGATE_EVALUATION_SECRET"  # noqa: S105 - a variable name


def evaluator_from_env(config: ServiceConfig) -> Evaluator:
    """The gate's evaluator: the secret from ``$EFFECTGATE_EVALUATION_SECRET`` (never the
    config file), the approver roles from ``[authority]``."""
    raw = os.environ.get(EVALUATION_SECRET_ENV)
    if raw is not None and len(raw.encode()) < 16:
        raise ConfigError(f"${EVALUATION_SECRET_ENV} must hold at least 16 bytes")
    return Evaluator(
        raw.encode() if raw is not None else None, approver_roles=config.authority.approver_roles
    )


def report_dict(report: ReconcileReport) -> dict[str, object]:
    """A reconcile report as JSON-able data (CLI ``--json`` and the admin API)."""
    return {
        "swept": report.swept,
        "ledger_rows": report.ledger_rows,
        "venue_records": report.venue_records,
        "confirmed": report.confirmed,
        "written_off": report.written_off,
        "still_uncertain": report.still_uncertain,
        "quarantined": report.quarantined,
        "probe_errors": report.probe_errors,
        "new_divergences": [
            {"kind": k, "op_key": key, "venue_ids": list(ids), "ledger_state": state}
            for k, key, ids, state in report.new_divergences
        ],
    }
