"""Governed policy under ``/v1/admin/policies`` (docs/authority.md). Mirrors ``effectgate policy``:

* ``GET /policies``: the active version and the proposals, newest first
* ``GET /policies/{proposal_id}``: one proposal, with its diff against the active version
* ``POST /policies`` ``{"policy": "<a policy file's TOML>", "note"?}``: propose (``201``), with
  its diff
* ``POST /policies/{proposal_id}/approve``: apply it; never by its author
* ``POST /policies/{proposal_id}/reject`` ``{"reason"?}``: close it unapplied
* ``POST /policies/load`` ``{"policy", "note"?}``: apply at once, only where approval is optional
* ``POST /policies/replay`` ``{"policy", "since"?}``: the decisions of the window that would
  change under it; writes nothing

A policy reaches every tenant, so each write (and a replay, which reads every tenant's intents)
needs an operator of scope ``"*"``. The body's policy goes through the same check as the CLI's
file (``read_policy_text``); every change is a chained audit entry written by the store role.
"""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from effectgate._core.governed_policy import (
    canonical_text,
    diff_documents,
    policy_hash,
    policy_set,
    replay,
)
from effectgate._doors._shared.controls import _global
from effectgate._service import Service
from effectgate._service._policy_gov import read_policy_text, recorded_decisions
from effectgate.errors import ConfigError, ControlError, PermissionDenied

__all__ = ["policies_router"]

#: A policy file is a few tables; anything this long is not one.
_MAX_POLICY = 65536
ProposalId = Annotated[str, Path(max_length=64, pattern=r"^pp_[0-9a-f]{16}$")]


class PolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = Field(max_length=_MAX_POLICY, description="A policy file: [policies.NAME]")
    note: str = Field("", max_length=500)


class RejectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("", max_length=500)


class ReplayIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = Field(max_length=_MAX_POLICY, description="The proposed policy file")
    since: float = Field(86400.0, gt=0, le=366 * 86400, description="Seconds back from now")


def policies_router(service: Service, operator: Any, errors: dict[int | str, Any]) -> APIRouter:
    router = APIRouter(responses=errors)
    store = service.store
    registry = service.config.registry

    def document(text: str) -> dict[str, dict[str, object]]:
        try:
            return read_policy_text(text, registry, "policy")
        except ConfigError as exc:  # the operator's input, not the service's configuration
            raise ControlError(str(exc), field="policy") from None

    def active_doc() -> dict[str, object] | None:
        active = store.active_policy()
        return None if active is None else dict(json.loads(active.document))

    @router.get("/policies", summary="The active policy version and the proposals")
    async def list_policies(who: operator) -> dict[str, object]:
        def read() -> dict[str, object]:
            active = store.active_policy()
            return {
                "active": None if active is None else active.policy_hash,
                "proposals": [p.to_dict() for p in store.list_policy_proposals()],
            }

        return await run_in_threadpool(read)

    @router.get("/policies/{proposal_id}", summary="One proposal and its diff")
    async def show_policy(who: operator, proposal_id: ProposalId) -> dict[str, object]:
        def read() -> dict[str, object]:
            p = store.get_policy_proposal(proposal_id)
            return {**p.to_dict(), "diff": diff_documents(active_doc(), json.loads(p.document))}

        return await run_in_threadpool(read)

    @router.post("/policies", status_code=201, summary="Propose a policy (shows its diff)")
    async def propose_policy(who: operator, body: PolicyIn) -> dict[str, object]:
        _global(who, "a policy change")
        doc = document(body.policy)

        def write() -> dict[str, object]:
            p = store.propose_policy(
                canonical_text(doc),
                policy_hash(doc),
                author=who.name,
                now=service.clock(),
                note=body.note,
            )
            return {**p.to_dict(), "diff": diff_documents(active_doc(), doc)}

        return await run_in_threadpool(write)

    @router.post("/policies/load", summary="Apply a policy at once (approval optional only)")
    async def load_policy(who: operator, body: PolicyIn) -> dict[str, object]:
        _global(who, "a policy change")
        if service.config.authority.policy_approval_required:
            raise PermissionDenied(
                'policy changes need approval ([authority] policy_approval = "required"): '
                "propose it, and have another principal approve it"
            )
        doc = document(body.policy)
        p = await run_in_threadpool(
            lambda: store.load_policy(
                canonical_text(doc),
                policy_hash(doc),
                by=who.name,
                now=service.clock(),
                note=body.note,
            )
        )
        return p.to_dict()

    @router.post("/policies/replay", summary="Decisions that would change under a policy")
    async def replay_policy(who: operator, body: ReplayIn) -> dict[str, object]:
        _global(who, "a replay (it reads every tenant's intents)")
        proposed = policy_set(document(body.policy), registry)
        since = service.clock() - body.since
        report = await run_in_threadpool(
            lambda: replay(recorded_decisions(store, since=since), registry, proposed)
        )
        return report.to_dict()

    @router.post("/policies/{proposal_id}/approve", summary="Apply a proposal (not its author)")
    async def approve_policy(who: operator, proposal_id: ProposalId) -> dict[str, object]:
        _global(who, "a policy change")
        p = await run_in_threadpool(
            lambda: store.approve_policy(proposal_id, approver=who.name, now=service.clock())
        )
        return p.to_dict()

    @router.post("/policies/{proposal_id}/reject", summary="Close a proposal unapplied")
    async def reject_policy(
        who: operator, proposal_id: ProposalId, body: RejectIn
    ) -> dict[str, object]:
        _global(who, "a policy change")
        p = await run_in_threadpool(
            lambda: store.reject_policy(
                proposal_id, by=who.name, now=service.clock(), reason=body.reason
            )
        )
        return p.to_dict()

    return router
