"""Where a real venue adapter's credential comes from: the environment, a file, or a hook.

Never the config file (the config parser refuses secret-looking keys). A *hook* is a
``"package.module:function"`` the operator names (a secrets-manager client, say); it is called
once, with no arguments, when the adapter is built, and must return the secret as a string.
The value is held in a :class:`Secret`, whose ``repr``/``str`` never show it; :func:`scrub`
removes it from any text an adapter is about to put in an exception or a receipt.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from pathlib import Path

from effectgate.errors import ConfigError

__all__ = ["Secret", "load_secret", "scrub"]


class Secret:
    """A credential: shown as ``***`` by repr, str and format."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)


def load_secret(
    what: str,
    *,
    env: str | None = None,
    file: str | None = None,
    hook: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Secret:
    """Read one credential from exactly one source; errors name the source, never the value."""
    given = [s for s in (env, file, hook) if s is not None]
    if len(given) != 1:
        raise ConfigError(
            f"{what}: give exactly one of credential_env, credential_file or credential_hook"
        )
    environ = os.environ if environ is None else environ
    if env is not None:
        value = environ.get(env, "")
        if not value:
            raise ConfigError(f"{what}: environment variable {env} is not set or empty")
    elif file is not None:
        try:
            value = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"{what}: credential file {file!r} cannot be read: {exc.strerror}"
            ) from None
        if not value:
            raise ConfigError(f"{what}: credential file {file!r} is empty")
    else:
        value = _from_hook(what, hook or "")
    return Secret(value)


def _from_hook(what: str, ref: str) -> str:
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{what}: credential_hook must be 'package.module:function', got {ref!r}")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{what}: credential_hook {ref!r} cannot be imported: {type(exc).__name__}"
        ) from None
    try:
        value = fn()
    except Exception as exc:  # a hook may raise anything; its message may carry the secret
        raise ConfigError(f"{what}: credential_hook {ref!r} raised {type(exc).__name__}") from None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{what}: credential_hook {ref!r} returned no secret string")
    return value


def scrub(text: str, *secrets: Secret | None) -> str:
    """``text`` with every secret's value (and any 8+ character tail of it) replaced by ***."""
    for secret in secrets:
        if secret is None:
            continue
        value = secret.reveal()
        if value:
            text = text.replace(value, "***")
            # Client libraries often echo a key's last characters ("...k_test_abcd1234").
            if len(value) > 12:
                text = text.replace(value[-8:], "***")
    return text
