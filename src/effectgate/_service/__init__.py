"""The effectgate service: a config file in, a running gate with its front doors out.

Public names: :func:`load_config` / :func:`parse_config` (validated :class:`ServiceConfig`),
:class:`Service` (the gate, store, adapters, reconciler, tokens and metrics of one process),
:class:`Principal` (who is calling), :func:`preflight` (what ``serve`` needs from the machine)
and :func:`write_starter` (``effectgate init``). The HTTP
and MCP doors live in :mod:`effectgate._doors`.
"""

from __future__ import annotations

from effectgate._service._auth import Principal, RateLimiter, TokenBook, os_actor
from effectgate._service._config import (
    AdapterConfig,
    RateLimit,
    ServiceConfig,
    ServiceSettings,
    StoreConfig,
    TokenConfig,
    load_config,
    parse_config,
)
from effectgate._service._logging import LOG_FORMATS, configure_logging
from effectgate._service._preflight import EXTRAS, Preflight, missing_modules, preflight
from effectgate._service._runtime import Service, build_adapter, report_dict
from effectgate._service._starter import CLASSES_FILE, CONFIG_FILE, Starter, write_starter

__all__ = [
    "CLASSES_FILE",
    "CONFIG_FILE",
    "EXTRAS",
    "LOG_FORMATS",
    "AdapterConfig",
    "Preflight",
    "Principal",
    "RateLimit",
    "RateLimiter",
    "Service",
    "ServiceConfig",
    "ServiceSettings",
    "Starter",
    "StoreConfig",
    "TokenBook",
    "TokenConfig",
    "build_adapter",
    "configure_logging",
    "load_config",
    "missing_modules",
    "os_actor",
    "parse_config",
    "preflight",
    "report_dict",
    "write_starter",
]
