"""Effect requirements and the adapter-call ceiling in the config file: refused at load with
the key named (docs/continuations.md, docs/service.md)."""

from __future__ import annotations

import pytest

from effectgate._service import parse_config
from effectgate.errors import ConfigError
from servicekit import config_text

BASE = config_text(store_url="sqlite:///unused.db")
SUBMIT = 'effect_class = "non_idempotent_mutation"\n'


class TestEffectRequirementsInConfig:
    def test_retries_and_compensation_are_read(self) -> None:
        cfg = parse_config(
            BASE.replace(SUBMIT, SUBMIT + 'retries = 3\ncompensation = "cancel_order"\n'), "t.toml"
        )
        ac = cfg.registry.get("submit_order")
        assert (ac.retries, ac.compensation) == (3, "cancel_order")

    def test_more_than_seven_retries_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="retries"):
            parse_config(BASE.replace(SUBMIT, SUBMIT + "retries = 8\n"), "t.toml")

    def test_a_compensation_that_is_not_a_class_is_refused(self) -> None:
        with pytest.raises(ConfigError, match="'refund_order' is not a registered class"):
            parse_config(BASE.replace(SUBMIT, SUBMIT + 'compensation = "refund_order"\n'), "t.toml")


class TestCeiling:
    def test_a_dispatch_timeout_above_thirty_seconds_is_refused(self) -> None:
        with pytest.raises(ConfigError, match=r"dispatch_timeout.*ceiling"):
            parse_config(
                BASE.replace('host = "127.0.0.1"\n', 'host = "127.0.0.1"\ndispatch_timeout = 31\n'),
                "t.toml",
            )
