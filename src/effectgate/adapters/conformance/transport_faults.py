"""Loopback servers that fail in one precise way, for classifying transport failures.

Used by the conformance kit's ``transport-classification`` check and the tests of the HTTP
adapter's proof of non-execution. Each :class:`FaultServer` listens on ``127.0.0.1`` only and
fails every connection the same way:

* ``reset-before``: accepts the connection and resets it (RST) before reading a byte; over
  ``https://`` this is a TLS handshake failure, over ``http://`` it races the request's write;
* ``reset-after``: reads the request head, then resets the connection without answering;
* ``hang``: reads the request head and never answers (the client's read times out).

:func:`refused_url` gives a loopback URL where nothing listens (connection refused).
"""

from __future__ import annotations

import socket
import struct
import threading
from types import TracebackType
from typing import Literal

__all__ = ["FaultMode", "FaultServer", "refused_url"]

FaultMode = Literal["reset-before", "reset-after", "hang"]
_MODES = ("reset-before", "reset-after", "hang")


def _reset(conn: socket.socket) -> None:
    # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        conn.close()


def refused_url(scheme: str = "http") -> str:
    """A loopback URL on a port that was just bound and released: nothing listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"{scheme}://127.0.0.1:{port}"


class FaultServer:
    """A loopback TCP server failing every connection by ``mode``; a context manager."""

    def __init__(self, mode: FaultMode) -> None:
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        self.mode = mode
        self.connections = 0
        self.request_bytes = 0
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, name=f"fault-{mode}", daemon=True)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        for conn in self._held:
            conn.close()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            if self.mode == "reset-before":
                _reset(conn)
                continue
            head = self._read_head(conn)
            self.request_bytes += len(head)
            if self.mode == "reset-after":
                _reset(conn)
            else:
                self._held.append(conn)  # never answered; closed when the server stops

    def _read_head(self, conn: socket.socket) -> bytes:
        conn.settimeout(2.0)
        data = b""
        try:
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        return data
