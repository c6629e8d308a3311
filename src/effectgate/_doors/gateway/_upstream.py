"""One upstream MCP server, reached through the official SDK's client from synchronous code.

The gateway's adapter is called by the executor in a worker thread and by the reconciler in its
own thread, while the SDK's client is asynchronous and its connection must be opened and closed
in one task. Each :class:`UpstreamLink` therefore owns an event loop in a daemon thread; one task
there holds the connection open, and synchronous callers submit coroutines to that loop.

A connection that fails (the upstream process died, the HTTP server went away) is dropped and
opened afresh on the next call; a call that merely timed out leaves the connection alone (the
upstream may still be working on it, and a stdio upstream would be killed with its connection).
The credential (an environment variable's value passed to a stdio upstream, or a bearer token
for an HTTP one) is read here, once, and never appears in what the agent sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from effectgate.errors import AdapterError, ConfigError

__all__ = ["CallRefused", "UpstreamLink", "UpstreamSpec"]

_T = TypeVar("_T")
# Added to a call's own timeout when waiting from another thread: the loop needs a moment to
# cancel the call and report.
_SLACK = 5.0


class CallRefused(Exception):
    """Raised by a call's guard, after connecting and before sending: nothing was sent."""


@dataclass(frozen=True)
class UpstreamSpec:
    """How to reach one upstream: a command (stdio) or a URL (streamable HTTP)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    cwd: str | None = None
    #: Variables given to a stdio upstream: its name -> the gateway's variable holding the value.
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    #: The gateway's variable holding a bearer token for an HTTP upstream.
    credential_env: str | None = None
    timeout: float = 10.0
    #: Upstream tools passed through unjournalled (the config's say, never the upstream's hint).
    read_only: tuple[str, ...] = ()


class UpstreamLink:
    """A lazily opened, self-healing client connection to one upstream, usable from any thread."""

    def __init__(self, spec: UpstreamSpec) -> None:
        self.spec = spec
        self._secrets = _read_secrets(spec)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"effectgate-upstream-{spec.name}", daemon=True
        )
        self._thread.start()
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        #: Called with each fresh connection's tool listing (the schema-drift check).
        self.on_connect: Callable[[list[types.Tool]], None] | None = None
        self.connections = 0

    # --- synchronous API --------------------------------------------------------------------

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        timeout: float,
        guard: Callable[[], None] | None = None,
    ) -> types.CallToolResult:
        """Call ``tool``; raise on a transport failure or after ``timeout`` seconds.

        ``guard`` runs once the connection is up (its schema checks done), just before the
        request is sent; it raises :class:`CallRefused` to send nothing."""
        return self._run(self._call(tool, dict(arguments), timeout, guard), timeout)

    def list_tools(self) -> list[types.Tool]:
        return self._run(self._list(), self.spec.timeout)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):  # closing: the upstream may be gone already
            self._run(self._disconnect(), self.spec.timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self.spec.timeout)
        if not self._thread.is_alive():
            self._loop.close()

    def _run(self, coro: Awaitable[_T], timeout: float) -> _T:
        future = asyncio.run_coroutine_threadsafe(_awaited(coro), self._loop)
        try:
            return future.result(timeout + self.spec.timeout + _SLACK)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"upstream {self.spec.name}: no answer in time") from None

    # --- on the link's loop -------------------------------------------------------------------

    async def _call(
        self, tool: str, arguments: dict[str, Any], timeout: float, guard: Callable[[], None] | None
    ) -> types.CallToolResult:
        client = await self._connected()
        if guard is not None:
            guard()
        try:
            async with asyncio.timeout(timeout):
                return await client.call_tool(tool, arguments)
        except TimeoutError:
            raise
        except Exception:
            await self._drop(client)
            raise

    async def _list(self) -> list[types.Tool]:
        client = await self._connected()
        try:
            return await _all_tools(client)
        except Exception:
            await self._drop(client)
            raise

    async def _connected(self) -> Client:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is not None:
                return self._client
            ready: asyncio.Future[Client] = self._loop.create_future()
            stop = asyncio.Event()
            self._holder = self._loop.create_task(self._hold(ready, stop))
            try:
                async with asyncio.timeout(self.spec.timeout):
                    client = await asyncio.shield(ready)
            except TimeoutError:
                stop.set()
                raise AdapterError(
                    f"upstream {self.spec.name}: no connection within {self.spec.timeout:g}s"
                ) from None
            self._client, self._stop = client, stop
            self.connections += 1
            if self.on_connect is not None:
                # A new connection may be a new upstream version: its schemas are checked
                # before any call goes through it.
                self.on_connect(await _all_tools(client))
            return client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with Client(self._target(), read_timeout_seconds=None) as client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    AdapterError(f"upstream {self.spec.name}: cannot connect ({exc!r:.200})")
                )

    async def _drop(self, client: Client) -> None:
        if self._client is client:
            self._client = None
            if self._stop is not None:
                self._stop.set()

    async def _disconnect(self) -> None:
        if self._client is not None:
            await self._drop(self._client)
        if self._holder is not None:
            try:
                async with asyncio.timeout(self.spec.timeout):
                    await self._holder
            except (TimeoutError, Exception):  # noqa: S110 - closing
                pass

    def _target(self) -> Any:
        spec = self.spec
        if spec.command is not None:
            return StdioServerParameters(
                command=spec.command, args=list(spec.args), env=dict(self._secrets), cwd=spec.cwd
            )
        if spec.url is None:
            raise ConfigError(f"upstreams.{spec.name}: give command or url")
        headers = dict(self._secrets)
        http = httpx2.AsyncClient(headers=headers, timeout=spec.timeout)
        return streamable_http_client(spec.url, http_client=http)


async def _awaited(coro: Awaitable[_T]) -> _T:
    return await coro


async def _all_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _read_secrets(spec: UpstreamSpec) -> dict[str, str]:
    """The values the upstream needs, read from the gateway's environment once, at start."""
    out: dict[str, str] = {}
    for target, source in spec.env.items():
        value = os.environ.get(source)
        if not value:
            raise ConfigError(
                f"upstreams.{spec.name}.env.{target}: environment variable {source} is not set"
            )
        out[target] = value
    if spec.credential_env is not None:
        token = os.environ.get(spec.credential_env)
        if not token:
            raise ConfigError(
                f"upstreams.{spec.name}.credential_env: environment variable "
                f"{spec.credential_env} is not set"
            )
        out = {"Authorization": f"Bearer {token}"}
    return out
