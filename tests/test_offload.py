"""The doors' request pool: sized for calls in flight, not cores (issue 40)."""

from __future__ import annotations

import pytest

from effectgate._doors._shared import offload
from effectgate.errors import ConfigError


def test_the_default_pool_holds_a_fleet_in_flight() -> None:
    """256 agents waiting on a 100 ms venue need 256 workers, or the door caps at 400/s."""
    assert offload.WORKERS >= 256 or "EFFECTGATE_REQUEST_WORKERS" in __import__("os").environ


@pytest.mark.parametrize("raw", ["0", "-3", "ten", "1e3", "5000", ""])
def test_a_bad_worker_count_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigError, match="EFFECTGATE_REQUEST_WORKERS"):
        offload._workers(raw)


def test_a_worker_count_is_read() -> None:
    assert offload._workers("64") == 64
