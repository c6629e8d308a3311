"""Reading an untrusted request body under a byte cap, and refusing deep nesting before parsing.

The framework's own body parsing is never used for intents: the endpoint reads raw bytes here
and hands them to the core's strict parser. The cap is enforced twice: against
``Content-Length`` before a byte is read, and while streaming (chunked bodies, lying headers).
"""

from __future__ import annotations

from starlette.requests import Request

from effectgate.errors import BadRequest, BodyTooLarge, IntentError

__all__ = ["read_capped", "refuse_deep"]


async def read_capped(request: Request, cap: int) -> bytes:
    """The body, or :class:`BodyTooLarge` as soon as it exceeds ``cap`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        if int(declared) > cap:
            raise BodyTooLarge(f"body of {int(declared)} bytes exceeds the {cap}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(f"body exceeds the {cap}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def refuse_deep(raw: bytes, max_depth: int) -> None:
    """Refuse JSON nested deeper than ``max_depth`` with one linear scan, before any parser.

    Brackets inside strings do not count. Cheap when there are few brackets: a document with
    at most ``max_depth`` of them cannot be too deep, so the scan is skipped.
    """
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > max_depth:
                raise IntentError(f"nested deeper than {max_depth} levels", reason="too_deep")
        elif byte in (0x7D, 0x5D):  # } ]
            depth -= 1
