"""The AWS adapter (``effectgate[aws]``): EC2 ``RunInstances`` and, as its compensation,
``TerminateInstances``, on ``boto3``.

``RunInstances`` carries a ``ClientToken`` derived from the operation key (the key itself when
it fits EC2's 64 ASCII characters, else ``eg-`` and 61 hex digits of its SHA-256), and tags the
instance ``effectgate:operation-key``. A termination tags the instance
``effectgate:terminated-by`` with its own key first, so the reconciler can read it back as a
record (venue id ``<instance>#terminated``).

EC2 lists by instance, never by tag, and drops terminated instances from its listing about an
hour after they end: ``listing = time_window`` with a ``listing_lookback`` inside that hour, so
an instance that vanished after its termination is never reported ``missing-at-venue``.

Outcomes: a 4xx ``ClientError`` (bad AMI, bad parameter, not authorised) is a provable refusal
(``not_applied`` with the error code as proof), except ``IdempotentParameterMismatch`` (the token
is known to EC2 with other parameters: the first call may have landed). Connection errors,
timeouts and 5xx raise :class:`~effectgate.errors.AdapterError` (unknown).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from effectgate._execute.adapter import (
    DEFAULT_CALL_TIMEOUT,
    Adapter,
    Listing,
    OutboundRequest,
    Outcome,
    Receipt,
    VenueRecord,
    call_budget,
    check_call_timeout,
    refusal,
    unkeyed,
    within,
    within_each,
)
from effectgate.adapters._credentials import Secret, load_secret, scrub
from effectgate.errors import AdapterError, ConfigError

__all__ = ["KEY_TAG", "TERMINATED_TAG", "Ec2Adapter", "client_token"]

KEY_TAG = "effectgate:operation-key"
TERMINATED_TAG = "effectgate:terminated-by"
_OPERATIONS = ("run", "terminate")
_MAX_TOKEN = 64


def client_token(operation_key: str) -> str:
    """EC2's ClientToken for an operation key: at most 64 ASCII characters, deterministic."""
    if len(operation_key) <= _MAX_TOKEN and operation_key.isascii():
        return operation_key
    return "eg-" + hashlib.sha256(operation_key.encode("utf-8")).hexdigest()[: _MAX_TOKEN - 3]


class Ec2Adapter(Adapter):
    """``operations`` maps action class names to ``"run"`` (effect fields ``image_id``,
    ``instance_type``) or ``"terminate"`` (effect field ``instance_id``)."""

    name = "aws"
    listing = Listing.TIME_WINDOW

    def __init__(
        self,
        *,
        region: str,
        access_key_id: str,
        credential_env: str | None = None,
        credential_file: str | None = None,
        credential_hook: str | None = None,
        endpoint: str | None = None,
        operations: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        listing_lookback: float = 3000.0,
    ) -> None:
        self._secret: Secret = load_secret(
            "aws", env=credential_env, file=credential_file, hook=credential_hook
        )
        self._ops = dict(operations or {"run_instance": "run", "terminate_instance": "terminate"})
        for action, op in self._ops.items():
            if op not in _OPERATIONS:
                raise ConfigError(
                    f"aws: operation {op!r} of {action!r} is not one of {_OPERATIONS}"
                )
        self._timeout = check_call_timeout(timeout, "aws: timeout")
        if not listing_lookback > 0:
            raise ConfigError("aws: listing_lookback must be positive")
        self.listing_lookback = float(listing_lookback)
        self._region = region
        self._ec2: Any = boto3.session.Session().client(
            "ec2",
            region_name=region,
            endpoint_url=endpoint,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=self._secret.reveal(),
            config=botocore.config.Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"total_max_attempts": 1},  # never retried automatically (invariant 9)
            ),
        )

    def __repr__(self) -> str:
        return f"Ec2Adapter(region={self._region!r}, operations={self._ops!r})"

    def execute(self, request: OutboundRequest, *, timeout: float) -> Receipt:
        op = self._ops.get(request.action)
        if op is None:
            raise AdapterError(f"aws: no operation configured for action {request.action!r}")
        key = request.operation_key
        try:
            if op == "run":
                out = self._ec2.run_instances(
                    ImageId=str(request.effect["image_id"]),
                    InstanceType=str(request.effect["instance_type"]),
                    MinCount=1,
                    MaxCount=1,
                    ClientToken=client_token(key),
                    TagSpecifications=[
                        {"ResourceType": "instance", "Tags": [{"Key": KEY_TAG, "Value": key}]}
                    ],
                )
                return Receipt(Outcome.APPLIED, venue_id=str(out["Instances"][0]["InstanceId"]))
            instance = str(request.effect["instance_id"])
            self._ec2.create_tags(
                Resources=[instance], Tags=[{"Key": TERMINATED_TAG, "Value": key}]
            )
            self._ec2.terminate_instances(InstanceIds=[instance])
            return Receipt(Outcome.APPLIED, venue_id=f"{instance}#terminated")
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "unknown"))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if 400 <= status < 500 and code != "IdempotentParameterMismatch" and status != 429:
                return Receipt(
                    Outcome.NOT_APPLIED,
                    proof=refusal(f"ec2 {status} {code}: {self._text(exc)}"[:500]),
                )
            raise AdapterError(f"aws: outcome unknown: {code}: {self._text(exc)}") from None
        except (botocore.exceptions.BotoCoreError, KeyError, IndexError) as exc:
            raise AdapterError(
                f"aws: outcome unknown: {type(exc).__name__}: {self._text(exc)}"
            ) from None

    def probe(self, operation_key: str, *, timeout: float = DEFAULT_CALL_TIMEOUT) -> list[str]:
        # botocore takes its timeouts once, per request; the probe (two paginated
        # describe calls) is bounded as a whole here.
        budget = call_budget(timeout, self._timeout)
        return within(budget, lambda: self._probe(operation_key), "aws: probe")

    def _probe(self, operation_key: str) -> list[str]:
        ids: list[str] = []
        try:
            for tag, suffix in ((KEY_TAG, ""), (TERMINATED_TAG, "#terminated")):
                pages = self._ec2.get_paginator("describe_instances").paginate(
                    Filters=[{"Name": f"tag:{tag}", "Values": [operation_key]}]
                )
                ids += [i["InstanceId"] + suffix for i in _instances(pages)]
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise AdapterError(
                f"aws: probe failed: {type(exc).__name__}: {self._text(exc)}"
            ) from None
        return sorted(ids)

    def records(
        self, after: VenueRecord | None, limit: int, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> list[VenueRecord]:
        raise AdapterError("aws lists by time window, not by key: use window_records()")

    def window_records(
        self, start: float, end: float, *, timeout: float = DEFAULT_CALL_TIMEOUT
    ) -> Iterator[VenueRecord]:
        """Instances launched in the window (any state), plus every listed termination record;
        each page's fetch bounded by ``timeout``."""
        budget = call_budget(timeout, self._timeout)
        return within_each(budget, self._window(start, end), "aws: listing")

    def _window(self, start: float, end: float) -> Iterator[VenueRecord]:
        try:
            pages = self._ec2.get_paginator("describe_instances").paginate(
                PaginationConfig={"PageSize": 500}
            )
            for inst in _instances(pages):
                tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
                launched: datetime = inst["LaunchTime"]
                if start <= launched.timestamp() <= end + 1:
                    key = tags.get(KEY_TAG)
                    yield VenueRecord(key or unkeyed(inst["InstanceId"]), inst["InstanceId"])
                if TERMINATED_TAG in tags:
                    yield VenueRecord(tags[TERMINATED_TAG], inst["InstanceId"] + "#terminated")
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise AdapterError(
                f"aws: listing failed: {type(exc).__name__}: {self._text(exc)}"
            ) from None

    def _text(self, exc: BaseException) -> str:
        return scrub(str(exc), self._secret)

    def close(self) -> None:
        self._ec2.close()


def _instances(pages: Any) -> Iterator[dict[str, Any]]:
    for page in pages:
        for reservation in page.get("Reservations", []):
            yield from reservation.get("Instances", [])
