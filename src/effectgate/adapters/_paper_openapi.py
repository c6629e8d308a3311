"""The paper venue's HTTP protocol as an OpenAPI 3.1 document.

The server (:mod:`effectgate.adapters._paper_server`) is stdlib ``http.server``, so nothing
derives this document from code: it is written here, served at ``GET /openapi.json``,
committed as ``docs/paper-venue.openapi.json``, and tested against the running server
(schemathesis: status codes, content types and bodies as documented). A venue that speaks
this protocol can be driven by effectgate's ``http`` adapter.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["openapi", "openapi_json"]

_KEY_CHARS = 255
_MAX_PAGE = 10_000


def _error(*codes: str, reason: bool = False) -> dict[str, Any]:
    props: dict[str, Any] = {"error": {"type": "string", "enum": list(codes)}}
    if reason:
        props["reason"] = {"type": "string", "description": "Why the venue refused the effect."}
    return {
        "type": "object",
        "required": ["error", *(["reason"] if reason else [])],
        "properties": props,
        "additionalProperties": False,
    }


def _json(
    description: str, schema: dict[str, Any], headers: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    if headers:
        out["headers"] = headers
    return out


_UNAUTHORISED = _json(
    "Missing or wrong API key.",
    _error("unauthorized"),
    {"WWW-Authenticate": {"schema": {"type": "string", "const": "Bearer"}}},
)

#: A record's version: 1 when made, one more on each change (docs/paper-venue.md).
_VERSION = {"type": "integer", "minimum": 1}

_EFFECT = {
    "type": "object",
    "description": "The effect fields, exactly as the gate validated them: strings, integers "
    "and booleans only (decimals travel as strings; a float is refused).",
    "additionalProperties": {
        "anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]
    },
}


def openapi() -> dict[str, Any]:
    """The document, as data."""
    doc = _document()
    orders = doc["paths"]["/v1/orders"]["post"]
    dry = doc["paths"]["/v1/dry-runs"]["post"]
    # The dry run shares the order's effect schema and its refusals of malformed requests.
    dry["requestBody"]["content"]["application/json"]["schema"]["properties"]["effect"] = orders[
        "requestBody"
    ]["content"]["application/json"]["schema"]["properties"]["effect"]
    for status in ("400", "401", "413"):
        dry["responses"][status] = orders["responses"][status]
    return doc


def _document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "effectgate paper venue",
            "version": "1",
            "description": (
                "A reference system of record for rehearsals (`effectgate venue serve`). "
                "It applies each order as its own record, honours `Idempotency-Key` unless "
                "started with `--ignore-key`, and can show records only after a read lag "
                "(`--read-lag`). Every endpoint but `/v1/health` and `/openapi.json` needs "
                "`Authorization: Bearer <key>`, the key being the value of the variable "
                "`venue serve` reads (`EFFECTGATE_VENUE_KEY`). Bodies are JSON; a request "
                "body needs `Content-Length` and may be at most 65536 bytes."
            ),
        },
        "components": {"securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}}},
        "security": [{"apiKey": []}],
        "paths": {
            "/v1/dry-runs": {
                "post": {
                    "operationId": "dryRun",
                    "summary": "Validate an effect without applying it (only with a sandbox).",
                    "description": (
                        "Served when the venue runs with a sandbox (`--sandbox`). Key modes: "
                        "`honest` uses the key it is given; `naive` mints `KEY~aN` on attempt "
                        "N > 1; `evicting` forgets a verdict past its lifetime and then mints "
                        "`KEY~eN`. A verdict is `ALLOW`, `DENY` (the venue would refuse it) or "
                        "`RETRYABLE_TIMEOUT`."
                    ),
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["action", "effect", "attempt"],
                                    "properties": {
                                        "action": {"type": "string", "minLength": 1},
                                        "effect": {"type": "object"},
                                        "attempt": {"type": "integer", "minimum": 1},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "The verdict; nothing was applied.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": [
                                            "verdict",
                                            "reason",
                                            "sandbox_key",
                                            "subject",
                                            "expires_in",
                                        ],
                                        "properties": {
                                            "verdict": {
                                                "enum": ["ALLOW", "DENY", "RETRYABLE_TIMEOUT"]
                                            },
                                            "reason": {"type": "string"},
                                            "sandbox_key": {"type": "string"},
                                            "subject": {"type": "string"},
                                            "expires_in": {"type": "number", "minimum": 0},
                                        },
                                    }
                                }
                            },
                        },
                        "404": {
                            "description": "The venue runs without a sandbox.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["error"],
                                        "properties": {
                                            "error": {"type": "string", "enum": ["not_found"]}
                                        },
                                        "additionalProperties": False,
                                    }
                                }
                            },
                        },
                    },
                }
            },
            "/v1/orders": {
                "post": {
                    "operationId": "submitOrder",
                    "summary": "Apply an effect under an idempotency key.",
                    "description": (
                        "With the key honoured, a key seen before returns the record it "
                        "created (`created: false`) and applies nothing. A lost reply (an "
                        "injected fault) closes the connection without an answer."
                    ),
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "description": (
                                "The operation key; effectgate sends `scope:operation_id`."
                            ),
                            "schema": {"type": "string", "minLength": 1, "maxLength": _KEY_CHARS},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["action", "effect"],
                                    "additionalProperties": False,
                                    "properties": {
                                        "action": {"type": "string", "minLength": 1},
                                        "effect": _EFFECT,
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "201": _json(
                            "Applied now (`created: true`) or before under the same "
                            "key (`created: false`). `version`: the record's version as of "
                            "this answer (1 when made, one more on each change, such as an "
                            "order's cancel); optional in the protocol, always sent by the "
                            "paper venue.",
                            {
                                "type": "object",
                                "required": ["venue_id", "created"],
                                "additionalProperties": False,
                                "properties": {
                                    "venue_id": {"type": "string"},
                                    "created": {"type": "boolean"},
                                    "version": _VERSION,
                                },
                            },
                        ),
                        "400": _json(
                            "No `Content-Length`, no or too long `Idempotency-Key`, "
                            "or a body that is not `{action, effect}`.",
                            _error(
                                "content_length_required",
                                "idempotency_key_required",
                                "invalid_body",
                            ),
                        ),
                        "401": _UNAUTHORISED,
                        "413": _json("Body over 65536 bytes.", _error("body_too_large")),
                        "422": _json(
                            "The venue refused the effect; nothing was applied.",
                            _error("rejected", reason=True),
                        ),
                    },
                },
                "get": {
                    "operationId": "findOrders",
                    "summary": "The visible records under one key.",
                    "parameters": [
                        {
                            "name": "key",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string", "minLength": 1},
                        }
                    ],
                    "responses": {
                        "200": _json(
                            "Venue ids of the visible records under `key` (several "
                            "when the venue ignored the key), and each record's version "
                            "(optional in the protocol, always sent by the paper venue).",
                            {
                                "type": "object",
                                "required": ["venue_ids"],
                                "additionalProperties": False,
                                "properties": {
                                    "venue_ids": {"type": "array", "items": {"type": "string"}},
                                    "versions": {
                                        "type": "object",
                                        "additionalProperties": _VERSION,
                                    },
                                },
                            },
                        ),
                        "400": _json("`key` missing, empty or repeated.", _error("key_required")),
                        "401": _UNAUTHORISED,
                    },
                },
            },
            "/v1/records": {
                "get": {
                    "operationId": "listRecords",
                    "summary": "Every visible record, in (operation_key, venue_id) order, "
                    "a page at a time.",
                    "description": "Give the last record of a page as `after_key` and "
                    "`after_id` (both or neither) to get the next one.",
                    "parameters": [
                        {
                            "name": "after_key",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "after_id",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": _MAX_PAGE,
                                "default": 1000,
                            },
                        },
                    ],
                    "responses": {
                        "200": _json(
                            "One page; fewer than `limit` records means the last.",
                            {
                                "type": "object",
                                "required": ["records"],
                                "additionalProperties": False,
                                "properties": {
                                    "records": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["operation_key", "venue_id"],
                                            "additionalProperties": False,
                                            "properties": {
                                                "operation_key": {"type": "string"},
                                                "venue_id": {"type": "string"},
                                            },
                                        },
                                    }
                                },
                            },
                        ),
                        "400": _json(
                            "Only one of `after_key`/`after_id`, a repeated "
                            "parameter, or `limit` outside 1..10000.",
                            _error("invalid_paging"),
                        ),
                        "401": _UNAUTHORISED,
                    },
                }
            },
            "/v1/health": {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness; no key needed, reveals nothing.",
                    "security": [],
                    "responses": {
                        "200": _json(
                            "Serving.",
                            {
                                "type": "object",
                                "required": ["status"],
                                "additionalProperties": False,
                                "properties": {"status": {"type": "string", "const": "ok"}},
                            },
                        )
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "security": [],
                    "responses": {"200": _json("The OpenAPI document.", {"type": "object"})},
                }
            },
        },
    }


def openapi_json() -> str:
    """The document as committed in ``docs/paper-venue.openapi.json``."""
    return json.dumps(openapi(), indent=2) + "\n"
