"""A generic HTTP venue adapter, speaking the paper venue's wire protocol.

The endpoint and credential come only from the operator's configuration at construction. The
outbound URL and headers are built here and nowhere else: a request supplies the operation key
and effect fields, never a URL, header or credential (invariant 6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    DryRun,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    check_call_timeout,
    not_sent,
    refusal,
)
from effectgate.adapters._credentials import Secret, load_secret
from effectgate.errors import AdapterError, ConfigError

__all__ = ["HttpVenueAdapter", "SendWatch", "not_sent_proof"]

_ORDERS = "/v1/orders"
_RECORDS = "/v1/records"
_DRY_RUNS = "/v1/dry-runs"


class HttpVenueAdapter(Adapter):
    """Adapter for a venue exposing ``/v1/orders`` and ``/v1/records`` with a bearer key.

    Exactly one of ``credential_env`` (an environment variable's name), ``credential_file``
    (a file path) or ``credential`` (the key itself) must be given; it is read once, here.
    """

    name = "http"

    def __init__(
        self,
        endpoint: str,
        *,
        credential_env: str | None = None,
        credential_file: str | None = None,
        credential: str | None = None,
        timeout: float = 5.0,
        speculation: bool = False,
    ) -> None:
        self._endpoint = _check_endpoint(endpoint)
        self._speculation = speculation
        self._secret = _load_credential(credential_env, credential_file, credential)
        self._timeout = check_call_timeout(timeout, "timeout")
        # trust_env=False: no proxy, netrc or certificate settings from the environment can
        # change where the call goes or what it carries; the configuration above is all there is.
        self._client = httpx.Client(
            base_url=self._endpoint, timeout=self._timeout, follow_redirects=False, trust_env=False
        )

    @property
    def endpoint(self) -> str:
        return self._endpoint

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        """POST the effect with the operation key as ``Idempotency-Key``.

        201 is ``applied``; 422 with a venue refusal is ``not_applied`` with proof; a transport
        failure proven to have happened before any request byte was written (connection
        refused, DNS failure, TLS handshake failure: see :func:`not_sent_proof`) is
        ``not_applied`` with that proof; anything else (a reset or timeout once the request
        may have been written, 5xx, an unexpected status or body) raises :class:`AdapterError`:
        the outcome is unknown.
        """
        budget = call_budget(timeout, self._timeout)
        if not budget > 0:
            raise AdapterError(f"POST {_ORDERS}: no time left to call the venue")
        _check_header_value(request.operation_key, "operation key")
        body = {"action": request.action, "effect": dict(request.effect)}
        headers = {"Idempotency-Key": request.operation_key, **self._auth()}
        watch = SendWatch()
        try:
            response = self._client.request(
                "POST",
                _ORDERS,
                timeout=budget,
                json=body,
                headers=headers,
                extensions={"trace": watch},
            )
        except httpx.HTTPError as exc:
            proof = not_sent_proof(exc, watch)
            if proof is not None:
                return Receipt(
                    Outcome.NOT_APPLIED,
                    proof=not_sent(proof, transport=type(exc).__name__),
                    detail={"transport": type(exc).__name__},
                )
            raise AdapterError(f"POST {_ORDERS}: {_transport_failure(exc)}") from exc
        if response.status_code == 201:
            doc = _json(response, "POST", _ORDERS)
            venue_id = doc.get("venue_id")
            if not isinstance(venue_id, str) or not venue_id:
                raise AdapterError(f"POST {_ORDERS}: 201 without a venue id")
            created = doc.get("created")
            return Receipt(
                Outcome.APPLIED,
                venue_id=venue_id,
                detail={"created": "true" if created is not False else "false"},
                venue_version=_version(doc),
            )
        if response.status_code == 422:
            doc = _json(response, "POST", _ORDERS)
            reason = doc.get("reason")
            # Only an explicit refusal is proof that nothing was applied.
            if doc.get("error") == "rejected" and isinstance(reason, str) and reason:
                return Receipt(Outcome.NOT_APPLIED, proof=refusal(f"venue rejected: {reason}"))
        raise _status_error("POST", _ORDERS, response)

    @property
    def can_speculate(self) -> bool:
        """Whether the venue was declared to serve dry runs (``POST /v1/dry-runs``)."""
        return self._speculation

    def speculate(self, request: OutboundRequest, *, attempt: int, timeout: float) -> DryRun:
        """Dry-run the effect under the operation key; the venue applies nothing. Anything but
        a well-formed 200 raises :class:`AdapterError` (the gate treats it as a timeout)."""
        if not self._speculation:
            raise AdapterError("this venue was not declared to serve dry runs")
        _check_header_value(request.operation_key, "operation key")
        body = {"action": request.action, "effect": dict(request.effect), "attempt": attempt}
        headers = {"Idempotency-Key": request.operation_key, **self._auth()}
        budget = call_budget(timeout, self._timeout)
        response = self._call("POST", _DRY_RUNS, budget, json=body, headers=headers)
        if response.status_code != 200:
            raise _status_error("POST", _DRY_RUNS, response)
        doc = _json(response, "POST", _DRY_RUNS)
        verdict, reason, key = doc.get("verdict"), doc.get("reason"), doc.get("sandbox_key")
        expires_in, subject = doc.get("expires_in"), doc.get("subject")
        if (
            verdict not in ("ALLOW", "DENY", "RETRYABLE_TIMEOUT")
            or not isinstance(reason, str)
            or not (key is None or isinstance(key, str))
            or not (subject is None or isinstance(subject, str))
            or isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
        ):
            raise AdapterError(f"POST {_DRY_RUNS}: malformed verdict")
        return DryRun(
            str(verdict),
            reason,
            key,
            float(expires_in),
            subject=subject,
            evidence={"sandbox": self._endpoint},
        )

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        """Venue ids visible under ``operation_key``, within ``timeout`` (and the adapter's own
        configured timeout)."""
        response = self._call(
            "GET",
            _ORDERS,
            call_budget(timeout, self._timeout),
            params={"key": operation_key},
            headers=self._auth(),
        )
        if response.status_code != 200:
            raise _status_error("GET", _ORDERS, response)
        ids = _json(response, "GET", _ORDERS).get("venue_ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise AdapterError(f"GET {_ORDERS}: malformed venue_ids")
        return list(ids)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        """One page of venue records after ``after``, sorted by (key, venue id)."""
        params: dict[str, str | int] = {"limit": limit}
        if after is not None:
            params["after_key"] = after.operation_key
            params["after_id"] = after.venue_id
        budget = call_budget(timeout, self._timeout)
        response = self._call("GET", _RECORDS, budget, params=params, headers=self._auth())
        if response.status_code != 200:
            raise _status_error("GET", _RECORDS, response)
        rows = _json(response, "GET", _RECORDS).get("records")
        if not isinstance(rows, list):
            raise AdapterError(f"GET {_RECORDS}: malformed records")
        page: list[VenueRecord] = []
        for row in rows:
            key = row.get("operation_key") if isinstance(row, dict) else None
            venue_id = row.get("venue_id") if isinstance(row, dict) else None
            if not isinstance(key, str) or not isinstance(venue_id, str):
                raise AdapterError(f"GET {_RECORDS}: malformed record")
            page.append(VenueRecord(key, venue_id))
        return page

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"HttpVenueAdapter(endpoint={self._endpoint!r}, timeout={self._timeout})"

    # -- internals ---------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._secret.reveal()}"}

    def _call(self, method: str, path: str, timeout: float, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, timeout=timeout, **kwargs)
        except httpx.HTTPError as exc:
            # The exception type says what kind of failure; its text could carry request
            # details, so it is not copied into the message.
            raise AdapterError(f"{method} {path}: {_transport_failure(exc)}") from exc


class SendWatch:
    """An httpx ``trace`` callback recording whether the transport began writing the request.

    httpcore reports each phase of a call (``connection.connect_tcp.*``,
    ``connection.start_tls.*``, ``http11.send_request_headers.*``, ``http2.send_request_*``...).
    Once any ``send_request`` phase has *started*, some request bytes may have left the process.
    """

    __slots__ = ("began_sending", "phases")

    def __init__(self) -> None:
        self.began_sending = False
        self.phases: list[str] = []

    def __call__(self, event_name: str, info: Mapping[str, Any]) -> None:
        self.phases.append(event_name)
        if "send_request" in event_name:
            self.began_sending = True


#: Failures raised only while a connection is being established (TCP connect with its DNS
#: lookup, then the TLS handshake) or while waiting for a pooled connection: none writes a
#: request byte. httpcore maps ``OSError``/``ssl.SSLError`` of ``connect_tcp`` and
#: ``start_tls`` to these and nothing else.
_BEFORE_WRITE: tuple[type[httpx.HTTPError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)


def not_sent_proof(exc: httpx.HTTPError, watch: SendWatch) -> str | None:
    """Proof that no request byte left the process, or None (the outcome is unknown).

    Two conditions, both required: the exception is one httpx raises only while connecting
    (:data:`_BEFORE_WRITE`), and the trace shows no ``send_request`` phase began. The second
    guards what the type alone cannot: behind a tunnelling proxy the ``CONNECT`` request is
    written before the TLS handshake whose failure is still a ``ConnectError`` (this adapter
    builds its client with no proxy and ``trust_env=False``, but the proof does not lean on
    that); and a future transport mapping a later failure to ``ConnectError`` would not be
    mistaken for proof.
    """
    if not isinstance(exc, _BEFORE_WRITE) or watch.began_sending:
        return None
    if isinstance(exc, httpx.PoolTimeout):
        what = "no connection to the venue was available in time"
    elif isinstance(exc, httpx.ConnectTimeout):
        what = "connecting to the venue timed out"
    else:
        what = "the connection to the venue could not be established"
    return f"{what} ({type(exc).__name__}) before any request byte was written"


def _version(doc: Mapping[str, Any]) -> str | None:
    """The record's version from a 201 answer (optional in the protocol, docs/paper-venue.md).
    A malformed one makes the answer malformed: the outcome is unknown, as for any other."""
    if "version" not in doc:
        return None
    version = doc["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise AdapterError(f"POST {_ORDERS}: 201 with a malformed version")
    return str(version)


def _transport_failure(exc: httpx.HTTPError) -> str:
    """What an operator (or a model reading the cause) needs from a transport error."""
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"venue unreachable ({name})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from the venue in time ({name})"
    return f"connection to the venue failed ({name})"


def _check_endpoint(endpoint: str) -> str:
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise ConfigError("endpoint is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("endpoint must be an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        # A credential in the URL would show up in every repr and log line.
        raise ConfigError("endpoint must not carry credentials; use credential_env or _file")
    if parts.query or parts.fragment:
        raise ConfigError("endpoint must not have a query or fragment")
    return endpoint.rstrip("/")


def _load_credential(env: str | None, file: str | None, value: str | None) -> Secret:
    given = [source for source in (env, file, value) if source is not None]
    if len(given) != 1:
        raise ConfigError("give exactly one of credential_env, credential_file or credential")
    if value is None:
        secret = load_secret("credential", env=env, file=file)
    elif not value:
        raise ConfigError("credential is empty")
    else:
        secret = Secret(value)
    try:
        _check_header_value(secret.reveal(), "credential")
    except AdapterError:
        raise ConfigError("credential contains characters not allowed in a header") from None
    return secret


def _check_header_value(value: str, what: str) -> None:
    # Refuse before sending: a control character could split or forge headers.
    if not value or not value.isascii() or not value.isprintable():
        raise AdapterError(f"{what} is not a printable ASCII header value; nothing was sent")


def _json(response: httpx.Response, method: str, path: str) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise AdapterError(f"{method} {path}: {response.status_code} with a non-JSON body")
    return doc


def _status_error(method: str, path: str, response: httpx.Response) -> AdapterError:
    return AdapterError(f"{method} {path}: unexpected status {response.status_code}")
