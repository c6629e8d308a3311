"""The harness's door to an effectgate service, shared by the framework integrations.

Synchronous on purpose (httpx): LangGraph nodes and Pydantic AI tools may be plain functions, and
the OpenAI Agents SDK integration runs it in a worker thread. Every answer, an operation or a
refusal, becomes a :class:`ToolResult` whose :meth:`~ToolResult.text` is what the model reads:
the service's ``outcome`` and its message, written for a model to act on.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import httpx

__all__ = ["EffectgateClient", "ToolResult", "ToolSpec", "operation_id_for"]

_ID_OK: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_NAMESPACE_OK: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}")
#: Outcomes after which nothing more will happen under the operation id.
FINAL_OUTCOMES: Final = frozenset({"done", "refused", "failed"})


def operation_id_for(namespace: str, call_id: str) -> str:
    """The operation id of tool call ``call_id`` in ``namespace`` (a thread, a run).

    Readable when it fits (``thread-7.call_abc``), else the namespace and a digest of the call
    id. Pure: the same call (a resumed or re-run step) always maps to the same operation.
    """
    if not _NAMESPACE_OK.fullmatch(namespace):
        raise ValueError(f"namespace {namespace!r} must match {_NAMESPACE_OK.pattern}")
    if not call_id:
        raise ValueError("a tool call without an id cannot be bound to an operation")
    plain = f"{namespace}.{call_id}"
    if _ID_OK.fullmatch(plain):
        return plain
    return f"{namespace}.h{hashlib.sha256(call_id.encode()).hexdigest()[:40]}"


@dataclass(frozen=True)
class ToolSpec:
    """One action class as a tool: the intent schema less ``action`` (and ``intent_version``
    when the class has one version), which the integration fills in."""

    name: str
    description: str
    parameters: dict[str, Any]
    version: str | None
    mutation: bool

    def intent(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The intent body for the model's arguments. Nothing is coerced or dropped: the
        service's strict parser judges the arguments exactly as the model sent them."""
        body: dict[str, Any] = {"action": self.name}
        if self.version is not None:
            body["intent_version"] = self.version
        body.update(arguments)
        return body

    @classmethod
    def from_action(cls, entry: Mapping[str, Any]) -> ToolSpec:
        name = str(entry["name"])
        schema = copy.deepcopy(dict(entry["schema"]))
        props: dict[str, Any] = dict(schema.get("properties", {}))
        required = [r for r in schema.get("required", []) if r != "action"]
        props.pop("action", None)
        versions = props.get("intent_version", {}).get("enum", [])
        version = str(versions[0]) if len(versions) == 1 else None
        if version is not None:
            props.pop("intent_version")
            required = [r for r in required if r != "intent_version"]
        schema["properties"] = props
        schema["required"] = required
        schema.pop("title", None)
        effect = str(entry.get("effect_class", ""))
        tier = str(entry.get("tier_floor", ""))
        return cls(
            name=name,
            description=(
                f"Propose a {name} action ({effect}; oversight tier at least {tier}). "
                "effectgate's policy decides whether it runs, waits for a human, or is "
                "refused; the result says which. Decimals are JSON strings."
            ),
            parameters=schema,
            version=version,
            mutation=effect != "read_only",
        )


@dataclass(frozen=True)
class ToolResult:
    """What became of one tool call: the service's outcome and message, and its body."""

    operation_id: str
    outcome: str
    message: str
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        return self.outcome == "waiting_for_approval"

    @property
    def final(self) -> bool:
        return self.outcome in FINAL_OUTCOMES

    @property
    def fingerprint(self) -> str | None:
        found = self.body.get("fingerprint")
        return found if isinstance(found, str) else None

    @property
    def state(self) -> str | None:
        found = self.body.get("state")
        return found if isinstance(found, str) else None

    def text(self) -> str:
        """The tool result a model reads."""
        return f"outcome: {self.outcome}\noperation_id: {self.operation_id}\n{self.message}"


class EffectgateClient:
    """Propose and look up operations with a harness (or agent) token.

    ``http``: an ``httpx.Client`` to use instead of one built from ``base_url`` (its own base
    URL is used); the caller closes it.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
    ) -> None:
        if token is None or not token:
            raise ValueError("a harness or agent token is required")
        if http is None and not base_url:
            raise ValueError("give base_url or an http client")
        self._own = http is None
        self._http = http or httpx.Client(base_url=str(base_url), timeout=timeout)
        self._headers = {"Authorization": f"Bearer {token}"}
        self._specs: dict[str, ToolSpec] | None = None

    def close(self) -> None:
        if self._own:
            self._http.close()

    def __enter__(self) -> EffectgateClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def tools(self, names: list[str] | None = None) -> list[ToolSpec]:
        """The service's action classes as tools (``names``: only these, in that order)."""
        if self._specs is None:
            got = self._http.get("/v1/actions", headers=self._headers)
            got.raise_for_status()
            self._specs = {
                spec.name: spec for spec in map(ToolSpec.from_action, got.json()["actions"])
            }
        if names is None:
            return list(self._specs.values())
        missing = [n for n in names if n not in self._specs]
        if missing:
            raise ValueError(f"the service has no action classes {missing}")
        return [self._specs[n] for n in names]

    def spec(self, name: str) -> ToolSpec:
        return self.tools([name])[0]

    def propose(self, action: str, operation_id: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Send the tool call's intent under ``operation_id``. The same id again is a replay:
        the service returns the operation as it stands and sends nothing again; the same id
        with other arguments is refused (``idempotency_conflict``)."""
        body = self.spec(action).intent(arguments)
        headers = {
            **self._headers,
            "Idempotency-Key": operation_id,
            "Content-Type": "application/json",
        }
        try:
            got = self._http.post(f"/v1/actions/{action}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            return _unreached(operation_id, exc)
        return _result(operation_id, got)

    def get(self, operation_id: str) -> ToolResult:
        """The operation as it stands now."""
        try:
            got = self._http.get(f"/v1/operations/{operation_id}", headers=self._headers)
        except httpx.HTTPError as exc:
            return _unreached(operation_id, exc)
        return _result(operation_id, got)


def _result(operation_id: str, got: httpx.Response) -> ToolResult:
    try:
        body = got.json()
    except ValueError:
        body = None
    if not isinstance(body, dict) or "outcome" not in body:
        return ToolResult(
            operation_id,
            "uncertain",
            f"effectgate answered HTTP {got.status_code} without a result: the action may or "
            "may not have been recorded. Ask again with the same operation id; do not send it "
            "under a new one.",
            {"status": got.status_code},
        )
    if got.is_success:
        return ToolResult(operation_id, str(body["outcome"]), str(body.get("message", "")), body)
    # A problem (RFC 9457): say what was wrong, naming the field when there is one.
    parts = [f"{body.get('code', 'error')}: {body.get('detail', '')}"]
    if body.get("field"):
        parts.append(f"field: {body['field']} ({body.get('reason') or 'invalid'})")
    if body["outcome"] == "refused":
        parts.append("Nothing was sent.")
    return ToolResult(operation_id, str(body["outcome"]), " ".join(parts), body)


def _unreached(operation_id: str, exc: httpx.HTTPError) -> ToolResult:
    return ToolResult(
        operation_id,
        "uncertain",
        f"effectgate could not be reached ({type(exc).__name__}): the action may or may not "
        "have been recorded. Ask again later with the same operation id; do not send it under "
        "a new one, which would be a second action.",
    )
