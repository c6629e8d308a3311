"""Helpers for the fault tests: child processes, a PostgreSQL wire proxy, a throwaway cluster.

Used two ways: imported by tests (``import faultkit``), and run as a child process
(``python tests/faultkit.py COMMAND JSON``) so executors and reconcilers are real processes that
can be SIGKILLed. The paper venue always lives in the test process behind a real HTTP server, so
every venue call is counted there, whatever happens to the children.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HERE = Path(__file__).resolve()
VENUE_KEY_ENV = "EFFECTGATE_FAULT_VENUE_KEY"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


# --- intents and gates (shared by the parent and the children) -----------------------------


def intent(variant: int = 0) -> dict[str, object]:
    """Variant 0 is the example order; others change an effect field (a changed payload)."""
    from effectgate.examples import EXAMPLE_ORDER

    body = dict(EXAMPLE_ORDER)
    if variant:
        body["quantity"] = str(4 + variant)  # stays under the policy limit (notional <= 1000)
    return body


def fingerprint(variant: int) -> str:
    from effectgate.examples import default_registry

    return default_registry().parse("submit_order", intent(variant)).fingerprint


def policy() -> Any:
    from effectgate._core.policy import LimitPolicy, PolicySet

    return PolicySet({"submit_order": LimitPolicy(Decimal("1000")), "cancel_order": LimitPolicy()})


def http_gate(store: Any, venue_url: str, clock: Callable[[], float] = time.time) -> Any:
    from effectgate._execute.executor import Gate
    from effectgate.adapters.http import HttpVenueAdapter
    from effectgate.examples import default_registry

    adapter = HttpVenueAdapter(venue_url, credential_env=VENUE_KEY_ENV)
    return Gate(
        store=store,
        registry=default_registry(adapter="http"),
        adapters={"http": adapter},
        policy=policy(),
        clock=clock,
    )


def http_reconciler(store: Any, venue_url: str, offset: float = 0.0, **kw: Any) -> Any:
    from effectgate._execute.reconciler import Reconciler
    from effectgate.adapters.http import HttpVenueAdapter
    from effectgate.examples import default_registry

    adapter = HttpVenueAdapter(venue_url, credential_env=VENUE_KEY_ENV)
    return Reconciler(
        store=store,
        registry=default_registry(adapter="http"),
        adapters={"http": adapter},
        clock=lambda: time.time() + offset,
        **kw,
    )


@contextlib.contextmanager
def venue_server(honour_key: bool = True) -> Iterator[tuple[Any, str]]:
    """A paper venue behind a real HTTP server; its key is put in the environment for children."""
    from effectgate.adapters._paper_server import serve_paper_venue
    from effectgate.adapters.paper import PaperVenue

    venue = PaperVenue(honour_key=honour_key)
    key = uuid.uuid4().hex
    os.environ[VENUE_KEY_ENV] = key
    with serve_paper_venue(venue, api_key=key) as server:
        yield venue, server.url


def open_url(url: str) -> Any:
    from effectgate.store import open_store

    return open_store(url, create=True)


# --- child processes -------------------------------------------------------------------------


def spawn(
    command: str, args: dict[str, Any], *, crash_at: str | None = None
) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("EFFECTGATE_CRASH_AT", None)
    if crash_at:
        env["EFFECTGATE_CRASH_AT"] = crash_at
    return subprocess.Popen(
        [sys.executable, str(HERE), command, json.dumps(args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@dataclass
class ChildResult:
    returncode: int
    result: dict[str, Any] | None
    stderr: str


def finish(child: subprocess.Popen[str], timeout: float = 120.0) -> ChildResult:
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"child hung past {timeout}s (deadlock?): {err[-2000:]}") from None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return ChildResult(child.returncode, json.loads(lines[-1]) if lines else None, err)


def run_child(
    command: str, args: dict[str, Any], *, crash_at: str | None = None, timeout: float = 120.0
) -> ChildResult:
    return finish(spawn(command, args, crash_at=crash_at), timeout)


def _child_submit(args: dict[str, Any]) -> dict[str, Any]:
    """Submit each ``[operation_id, variant]``; with ``retry`` keep going through store faults."""
    from effectgate.errors import CommitOutcomeUnknown, IdempotencyConflict, StoreError

    store = open_url(args["store_url"])
    gate = http_gate(store, args["venue_url"])
    if args.get("start_at"):
        time.sleep(max(0.0, args["start_at"] - time.time()))
    deadline = time.time() + args.get("max_seconds", 90)
    began = time.perf_counter()
    outcomes: dict[str, str] = {}
    counts = {"created": 0, "replayed": 0, "conflict": 0, "store_errors": 0, "indeterminate": 0}
    for operation_id, variant in args["ops"]:
        while True:
            try:
                row = gate.submit("submit_order", operation_id, intent(variant))
                kind = "replayed" if row.replayed else "created"
            except IdempotencyConflict:
                kind = "conflict"
            except CommitOutcomeUnknown:
                # The journal may or may not be durable: retrying the same id is safe (it either
                # creates the row or replays it) and never dispatches twice.
                counts["indeterminate"] += 1
                if not args.get("retry") or time.time() > deadline:
                    raise
                continue
            except StoreError:
                counts["store_errors"] += 1
                if not args.get("retry") or time.time() > deadline:
                    raise
                time.sleep(0.2)
                continue
            counts[kind] += 1
            outcomes[operation_id] = kind
            break
    store.close()
    return {
        "counts": counts,
        "outcomes": outcomes,
        "seconds": round(time.perf_counter() - began, 3),
    }


def _child_reconcile(args: dict[str, Any]) -> dict[str, Any]:
    """Run ``run_once`` until no uncertain row is left (or the stop file appears)."""
    from effectgate._core.states import State
    from effectgate.errors import OutcomeUnknown, StoreError

    store = open_url(args["store_url"])
    rec = http_reconciler(
        store, args["venue_url"], args.get("offset", 0.0), page_size=args.get("page_size", 500)
    )
    if args.get("start_at"):
        time.sleep(max(0.0, args["start_at"] - time.time()))
    stop_file = args.get("stop_file")
    deadline = time.time() + args.get("max_seconds", 90)
    totals = {
        "rounds": 0,
        "sweeps": 0,
        "confirmed": 0,
        "written_off": 0,
        "quarantined": 0,
        "store_errors": 0,
    }
    repaired: list[list[str]] = []
    divergences: list[list[Any]] = []
    while time.time() < deadline:
        try:
            report = rec.run_once()
            left = store.list_operations(state=State.SUBMITTED, limit=1)
        except (StoreError, OutcomeUnknown):
            # A pass cut by the outage (a lost commit included) is run again; the
            # reconciler's moves are compare-and-set, so a repeat is harmless.
            totals["store_errors"] += 1
            time.sleep(0.2)
            continue
        totals["rounds"] += 1
        totals["sweeps"] += int(report.swept)
        for name in ("confirmed", "written_off", "quarantined"):
            totals[name] += getattr(report, name)
        repaired.extend([k, n] for k, n in report.repaired)
        divergences.extend([k, key, list(ids), st] for k, key, ids, st in report.new_divergences)
        if stop_file:
            if Path(stop_file).exists() and not left:
                break
            time.sleep(0.1)
        elif not left and totals["sweeps"]:
            break
        elif not report.swept and not report.ledger_rows:
            time.sleep(0.05)  # another replica holds the sweep and nothing is leasable yet
    store.close()
    return {"totals": totals, "repaired": repaired, "divergences": divergences}


# --- a PostgreSQL wire proxy that can cut a connection around COMMIT ------------------------

_REQUEST_CODES = {80877103, 80877104}  # SSLRequest, GSSENCRequest: another untyped msg follows


@dataclass
class _Cut:
    skip: int
    forward: bool


@dataclass
class PgProxy:
    """Forwards 127.0.0.1 connections to PostgreSQL and parses the frontend messages.

    ``arm_cut(skip, forward)``: on the (skip+1)-th commit point after arming, forward it (or
    not) and then close both sides before the server's reply can reach the client. A commit
    point is the Execute of an explicit COMMIT, or the Sync that ends an implicit transaction
    in which a write was executed (extended-protocol statements outside BEGIN run as one
    transaction the server commits at the Sync). Statements are followed from Parse through
    Bind to the Execute that runs them, so psycopg preparing a statement (Parse and Sync,
    nothing executed) is not mistaken for a write. A COMMIT is forwarded through its Sync, so
    the server runs it; "not forwarded" withholds it and everything after it in the batch.
    ``counts`` tallies message types (``Q`` simple query, ``S`` sync, ...) for round-trip
    accounting.
    """

    upstream: tuple[str, int]
    counts: dict[str, int] = field(default_factory=dict)
    cuts: list[str] = field(default_factory=list)
    _cut: _Cut | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sock: socket.socket | None = None

    def start(self) -> PgProxy:
        self._sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def port(self) -> int:
        if self._sock is None:
            raise RuntimeError("proxy not started")
        return int(self._sock.getsockname()[1])

    def url(self, base: str) -> str:
        """``base`` pointed at the proxy, with TLS and GSS off so the stream can be parsed."""
        parts = urlsplit(base)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("sslmode", "gssencmode")]
        query += [("sslmode", "disable"), ("gssencmode", "disable")]
        netloc = f"{parts.username + '@' if parts.username else ''}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))

    def arm_cut(self, *, skip: int = 0, forward: bool = True) -> None:
        with self._lock:
            self._cut = _Cut(skip, forward)

    def reset_counts(self) -> None:
        with self._lock:
            self.counts.clear()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()  # type: ignore[union-attr]
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            cut = threading.Event()
            threading.Thread(target=self._frontend, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=_pump, args=(server, client, cut), daemon=True).start()

    def _decide(self, kind: str, body: bytes, conn: _ConnState) -> str:
        """'pass', 'cut-after' or 'cut-before' for one frontend message."""
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if not conn.commit_point(kind, body):
                return "pass"
            if self._cut is None:
                return "pass"
            if self._cut.skip > 0:
                self._cut.skip -= 1
                return "pass"
            forward, self._cut = self._cut.forward, None
            self.cuts.append("after-forward" if forward else "before-forward")
            return "cut-after" if forward else "cut-before"

    def _frontend(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        reader = _Reader(client)
        state = _ConnState()
        try:
            untyped = True
            while untyped:  # startup, possibly preceded by SSL/GSS requests
                head = reader.exact(8)
                length, code = struct.unpack("!ii", head)
                server.sendall(head + reader.exact(length - 8))
                untyped = code in _REQUEST_CODES
            while True:
                kind_b = reader.exact(1)
                length = struct.unpack("!i", reader.exact(4))[0]
                body = reader.exact(length - 4)
                action = self._decide(kind_b.decode("latin-1"), body, state)
                if action != "pass":
                    cut.set()  # from now on no server byte reaches the client: the reply is lost
                if action == "cut-before":
                    with contextlib.suppress(OSError):
                        client.shutdown(socket.SHUT_RDWR)
                if action != "cut-before":
                    server.sendall(kind_b + struct.pack("!i", length) + body)
                if action == "cut-after" and kind_b == b"E":
                    # An extended-protocol COMMIT runs at its Execute, but the server answers
                    # nothing before the Sync: forward the rest of the batch, through it.
                    while kind_b != b"S":
                        kind_b = reader.exact(1)
                        length = struct.unpack("!i", reader.exact(4))[0]
                        server.sendall(
                            kind_b + struct.pack("!i", length) + reader.exact(length - 4)
                        )
                if action != "pass":
                    if action == "cut-after":
                        # Let the server run the batch and its COMMIT before either socket
                        # closes, so the client learns of the loss only once the commit landed.
                        time.sleep(0.05)
                    break
        except (OSError, EOFError):
            pass
        for s in (client, server):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


_WRITES = (b"INSERT", b"UPDATE", b"DELETE", b"WITH")


@dataclass
class _ConnState:
    """What one client connection has sent: statements, portals and transaction state."""

    prepared: dict[bytes, bytes] = field(default_factory=dict)  # statement name -> query
    portals: dict[bytes, bytes] = field(default_factory=dict)  # portal name -> query
    explicit: bool = False  # inside BEGIN ... COMMIT
    wrote: bool = False  # a write was executed since the last Sync, outside BEGIN

    def commit_point(self, kind: str, body: bytes) -> bool:
        if kind == "P":  # Parse: statement name \0 query \0 ...
            parts = body.split(b"\0", 2)
            if len(parts) >= 2:
                self.prepared[parts[0]] = parts[1]
            return False
        if kind == "B":  # Bind: portal \0 statement name \0 ...
            parts = body.split(b"\0", 2)
            if len(parts) >= 2:
                self.portals[parts[0]] = self.prepared.get(parts[1], b"")
            return False
        if kind == "E":  # Execute: portal \0 ... (a Parse alone, as when preparing, runs nothing)
            text = self.portals.get(body.split(b"\0", 1)[0], b"")
        elif kind == "Q":
            text = body
        elif kind == "S":
            point, self.wrote = self.wrote, False
            return point
        else:
            return False
        head = text.lstrip().upper()
        if head.startswith(b"BEGIN"):
            self.explicit = True
        elif head.startswith((b"COMMIT", b"ROLLBACK")):
            self.explicit = False
            return head.startswith(b"COMMIT")
        elif kind == "E" and not self.explicit and head.startswith(_WRITES):
            self.wrote = True
        return False


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _pump(src: socket.socket, dst: socket.socket, cut: threading.Event) -> None:
    try:
        while (chunk := src.recv(65536)) and not cut.is_set():
            dst.sendall(chunk)
    except OSError:
        pass
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


# --- a throwaway PostgreSQL cluster ----------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A private cluster under a temporary directory, run as the ``postgres`` user."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="eg-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres(
            f"{PG_BIN}/initdb -D {self.data} -A trust -U postgres -E UTF8 "
            "--no-instructions --no-sync"
        )

    @staticmethod
    def available() -> bool:
        return (PG_BIN / "initdb").exists() and shutil.which("su") is not None and os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, command: str) -> None:
        subprocess.run(
            ["su", "postgres", "-c", command], check=True, capture_output=True, timeout=120
        )

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=on"
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.data} -l {self.root}/log -w -o '{opts}' start")

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.data} -m {mode} -w stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def main() -> None:
    command, raw = sys.argv[1], sys.argv[2]
    handlers = {"submit": _child_submit, "reconcile": _child_reconcile}
    print(json.dumps(handlers[command](json.loads(raw))), flush=True)


if __name__ == "__main__":
    main()
