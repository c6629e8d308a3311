"""``[classes.NAME.speculation]``: a class's speculative pre-execution (seed 000).

::

    [classes.submit_order.speculation]
    mode = "required"            # required | optional | off
    verdict_lifetime = 60        # seconds; must exceed dispatch_timeout + in_flight_grace
    strategy = "refuse"          # refuse | ledger_authoritative | sandbox_authoritative
    max_tries = 3                # re-speculations before the caller gets an error
    max_wait = 30                # seconds, the same bound in time

The retry horizon check (condition 3) needs the service section, so :func:`check_horizons`
runs once every class is read.
"""

from __future__ import annotations

from effectgate._core.intent import Registry
from effectgate._core.speculation import KeyStrategy, Speculation, SpeculationMode, check_horizon
from effectgate._service._toml import Section
from effectgate.errors import ConfigError

__all__ = ["check_horizons", "speculation_section"]


def speculation_section(sec: Section | None) -> Speculation | None:
    if sec is None:
        return None
    mode = sec.text("mode", "required", choices=[m.value for m in SpeculationMode])
    lifetime = sec.req_number(
        "verdict_lifetime", "seconds a verdict may be committed; take it from the sandbox"
    )
    strategy = sec.text("strategy", "refuse", choices=[s.value for s in KeyStrategy])
    max_tries = sec.integer("max_tries", 3, minimum=1, maximum=100)
    max_wait = sec.number("max_wait", 30.0)
    sec.done()
    return Speculation(
        mode=SpeculationMode(mode or "required"),
        verdict_lifetime=lifetime,
        strategy=KeyStrategy(strategy or "refuse"),
        max_tries=max_tries,
        max_wait=max_wait,
    )


def check_horizons(registry: Registry, *, dispatch_timeout: float, in_flight_grace: float) -> None:
    """Every speculating class's verdict lifetime exceeds the retry horizon, or refuse the file."""
    horizon = dispatch_timeout + in_flight_grace
    for name in registry.names():
        spec = registry.get(name).speculation
        if spec is not None:
            try:
                check_horizon(name, spec, horizon)
            except ConfigError as exc:
                raise ConfigError(f"classes.{name}.speculation: {exc.message}") from None
