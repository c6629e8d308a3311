"""``effectgate verify --adapters``: the conformance kit against the configured adapters, where
effectgate has a sandbox to drive them against.

* ``paper``: the configured adapter's own settings (``honour_key``, ``read_lag``) on a fresh
  paper venue that can refuse (``max_quantity``), so the kit measures what this adapter does;
* ``http``: the HTTP venue adapter, with the configured timeout, against a local paper venue
  server on loopback standing in for ``endpoint`` (the kit never calls your real endpoint: it
  makes effects, and it needs direct access to the venue to make one outside the boundary);
  the transport classification is checked against loopback fault servers;
* ``stripe``, ``aws``, ``email``: the adapter built from your ``[adapters.NAME]`` against a
  local stand-in (localstripe, moto's server mode, an aiosmtpd relay;
  :mod:`effectgate._checks.verify_sandboxes`), ``n/a`` saying which package to install when the
  stand-in is not;
* every other kind (a ``factory``): ``n/a``, saying why (no sandbox effectgate can drive; run
  the kit in your own tests with :func:`effectgate.testing.run_conformance` and a
  ``VenueDriver``).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

from effectgate._checks._check import FAIL, NA, PASS, Check
from effectgate._execute.adapter import Adapter, OutboundRequest
from effectgate._service._config import AdapterConfig, ServiceConfig
from effectgate.adapters.conformance.kit import ConformanceReport, run_conformance
from effectgate.adapters.paper import PaperAdapter, PaperVenue

__all__ = ["adapter_checks"]

_ORDER = {"instrument": "XYZ-PERP", "side": "buy", "order_type": "limit", "limit_price": "10"}


class _PaperDriver:
    """The kit's access to a paper venue (it can refuse: quantity over ``max_quantity``)."""

    venue = "paper"

    def __init__(
        self,
        paper: PaperVenue,
        *,
        secret: str = "",
        unreachable: Callable[[], Adapter] | None = None,
        pointed_at: Callable[[str], Adapter] | None = None,
    ) -> None:
        self.paper, self._secret = paper, secret
        self._unreachable, self._pointed_at = unreachable, pointed_at

    def pointed_at(self, url: str) -> Adapter | None:
        return None if self._pointed_at is None else self._pointed_at(url)

    def request(self, operation_key: str) -> OutboundRequest:
        return OutboundRequest(operation_key, "submit_order", {**_ORDER, "quantity": "1"})

    def refused_request(self, operation_key: str) -> OutboundRequest | None:
        return OutboundRequest(operation_key, "submit_order", {**_ORDER, "quantity": "1000000"})

    def unreachable(self) -> Adapter:
        if self._unreachable is not None:
            return self._unreachable()
        dead = PaperVenue()
        dead.fail_next(10, after_apply=False)
        return PaperAdapter(dead)

    def direct_effect(self) -> str | None:
        return self.paper.inject_record("outside-no-scope")

    def delivered(self, operation_key: str) -> int | None:
        return None

    def secrets(self) -> list[str]:
        return [self._secret] if self._secret else []


def _paper(cfg: AdapterConfig) -> tuple[ConformanceReport, str]:
    venue = PaperVenue(
        honour_key=bool(cfg.options.get("honour_key", True)),
        read_lag=float(cfg.options.get("read_lag", 0.0)),
        max_quantity=1000,
    )
    horizon = max(1.0, 2 * float(cfg.options.get("read_lag", 0.0)))
    report = run_conformance(PaperAdapter(venue), _PaperDriver(venue), horizon=horizon)
    return report, "the paper venue with this adapter's settings"


def _http(cfg: AdapterConfig) -> tuple[ConformanceReport, str]:
    from effectgate.adapters._paper_server import serve_paper_venue
    from effectgate.adapters.http import HttpVenueAdapter

    key = "kit-" + secrets.token_urlsafe(24)

    def pointed(url: str) -> Adapter:
        return HttpVenueAdapter(url, credential=key, timeout=min(cfg.timeout, 2.0))

    venue = PaperVenue(max_quantity=1000)
    with serve_paper_venue(venue, api_key=key) as running:
        driver = _PaperDriver(
            venue, secret=key, unreachable=lambda: pointed("http://127.0.0.1:9"), pointed_at=pointed
        )
        report = run_conformance(pointed(running.url), driver, horizon=1.0)
    return report, f"a local paper venue server on loopback standing in for {cfg.endpoint}"


_KITS: dict[str, Callable[[AdapterConfig], tuple[ConformanceReport, str]]] = {
    "paper": _paper,
    "http": _http,
}


def _kit(name: str, cfg: AdapterConfig) -> Callable[[], tuple[ConformanceReport, str]] | None:
    from effectgate._checks.verify_sandboxes import SANDBOXES

    own = _KITS.get(cfg.kind)
    if own is not None:
        return lambda: own(cfg)
    stand_in = SANDBOXES.get(cfg.kind)
    return None if stand_in is None else lambda: stand_in(name, cfg)


def _checks(name: str, cfg: AdapterConfig, svc: ServiceConfig | None = None) -> Iterator[Check]:
    from effectgate._checks.verify_sandboxes import Unavailable

    kit = _kit(name, cfg)
    if kit is None:
        yield Check(
            "conformance kit",
            name,
            NA,
            f"kind {cfg.kind!r}: effectgate has no sandbox it can drive for it; run "
            "effectgate.testing.run_conformance with your venue's sandbox in your own tests "
            "(docs/adapters.md)",
        )
        return
    try:
        report, against = kit()
    except Unavailable as exc:
        yield Check("conformance kit", name, NA, f"kind {cfg.kind!r}: no local stand-in: {exc}")
        return
    except Exception as exc:
        # The type only: a message could carry the adapter's settings.
        yield Check("conformance kit", name, FAIL, f"the kit did not run: {type(exc).__name__}")
        return
    status = {"pass": PASS, "fail": FAIL}
    for check, result in report.results.items():
        yield Check(
            f"conformance {check}",
            name,
            status.get(result["status"], NA),
            f"{result['detail']} (against {against})",
        )
    yield Check(
        "conformance kit",
        name,
        PASS if not report.failed else FAIL,
        f"honours_key measured {report.honours_key!r}; {len(report.failed)} check(s) failed",
    )
    # A class that declares its venue honours keys, over an adapter the kit measured otherwise.
    stand_in = cfg.kind not in _KITS  # a stand-in's keys are not the real venue's
    for ac in svc.registry if svc is not None else ():
        if ac.adapter == name and ac.venue.honours_key.value == "true" and stand_in:
            yield Check(
                "declared honours_key measured by the kit",
                ac.name,
                NA,
                f"measured against {against}, whose keys are not the real venue's; the class's "
                "conformance_report from your venue's sandbox is what backs the claim",
            )
        elif ac.adapter == name and ac.venue.honours_key.value == "true":
            yield Check(
                "declared honours_key measured by the kit",
                ac.name,
                PASS if report.honours_key == "true" else FAIL,
                f"the class declares honours_key = true; adapter {name} measured "
                f"{report.honours_key!r}",
            )


def adapter_checks(cfg: ServiceConfig) -> list[Check]:
    """The conformance kit's checks for every configured adapter (module docstring)."""
    return [c for name, a in cfg.adapters.items() for c in _checks(name, a, cfg)]
