"""Where a real venue's credential comes from (environment, file, secrets-manager hook), and
that no failure to read it ever repeats it (invariant 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from effectgate.adapters._credentials import Secret, load_secret, scrub
from effectgate.errors import ConfigError

CANARY = "CANARY-credential-value-0123456789"


def leaky_hook() -> str:
    raise RuntimeError(f"vault said no for token {CANARY}")


def good_hook() -> str:
    return CANARY


def empty_hook() -> str:
    return ""


class TestSources:
    def test_environment_file_and_hook(self, tmp_path: Path) -> None:
        f = tmp_path / "key"
        f.write_text(CANARY + "\n")
        assert load_secret("x", env="K", environ={"K": CANARY}).reveal() == CANARY
        assert load_secret("x", file=str(f)).reveal() == CANARY
        assert load_secret("x", hook=f"{__name__}:good_hook").reveal() == CANARY

    @pytest.mark.parametrize(
        ("kwargs", "needle"),
        [
            ({}, "exactly one"),
            ({"env": "A", "file": "/x"}, "exactly one"),
            ({"env": "NOT_SET_ANYWHERE"}, "NOT_SET_ANYWHERE is not set"),
            ({"file": "/nonexistent/key"}, "cannot be read"),
            ({"hook": "no_colon"}, "package.module:function"),
            ({"hook": "no_such_module_x:fn"}, "cannot be imported"),
            ({"hook": f"{__name__}:empty_hook"}, "returned no secret"),
        ],
    )
    def test_each_failure_is_specific(self, kwargs: dict[str, str], needle: str) -> None:
        with pytest.raises(ConfigError, match=needle):
            load_secret("stripe", environ={}, **kwargs)


class TestNeverRepeated:
    def test_a_hook_error_carrying_the_secret_is_not_repeated(self) -> None:
        """Invariant 6: the hook's own message (which held the value) is dropped."""
        with pytest.raises(ConfigError) as info:
            load_secret("stripe", hook=f"{__name__}:leaky_hook")
        assert CANARY not in str(info.value) and CANARY not in repr(info.value)
        assert info.value.__cause__ is None and info.value.__suppress_context__

    def test_secret_repr_str_format_and_scrub(self) -> None:
        s = Secret(CANARY)
        assert CANARY not in f"{s} {s!r} {s:>40}"
        text = f"error: bad key {CANARY} (ends ...{CANARY[-8:]})"
        assert CANARY not in scrub(text, s) and CANARY[-8:] not in scrub(text, s)
