"""``effectgate policy propose|diff|show|approve|reject|load|list|replay``: governed policy.

A policy file holds ``[policies.NAME]`` tables as in the service config. ``propose`` records it
(with its diff against the active version); ``approve`` applies it, by a principal other than
its author; ``reject`` closes it unapplied; ``load`` applies it at once where
``[authority] policy_approval = "optional"``;
``replay`` decides the recorded intents of a window again under the file and reports every
decision that would change, per class, before anyone approves. Needs ``--config`` (the action
classes); the actor is the token in ``--token-env`` or ``os:<user>`` (docs/authority.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console

from effectgate._core.governed_policy import (
    canonical_text,
    diff_documents,
    policy_hash,
    policy_set,
    replay,
)
from effectgate._core.principals import Capability
from effectgate._doors.cli._actor import TOKEN_ENV, TokenEnvOpt, acting
from effectgate._doors.cli.service import load_service_config
from effectgate._doors.cli.tokens import JsonOpt
from effectgate._service._config import ServiceConfig
from effectgate._service._policy_gov import read_policy_file, recorded_decisions
from effectgate.errors import PermissionDenied
from effectgate.store.roles import Store

__all__ = ["register"]

console = Console(soft_wrap=True)
policy_app = typer.Typer(
    help="Policy as a governed artefact: propose, diff, approve (by someone else), load, list, "
    "and replay recorded intents under a proposed policy.",
    no_args_is_help=True,
)
ConfigReq = Annotated[str, typer.Option("--config", "-c", help="The service config file.")]
FileOpt = Annotated[str, typer.Option("--file", help="A policy file (\\[policies.NAME] tables).")]


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")


@contextmanager
def _open(config: str) -> Iterator[tuple[Store, ServiceConfig]]:
    from effectgate.store import open_store

    cfg = load_service_config(config)
    store = open_store(cfg.store.url, **dict(cfg.store.options))
    try:
        yield store, cfg
    finally:
        store.close()


def _active_doc(store: Store) -> dict[str, object] | None:
    active = store.active_policy()
    return None if active is None else dict(json.loads(active.document))


@policy_app.command("propose")
def propose(
    config: ConfigReq,
    file: FileOpt,
    note: Annotated[str, typer.Option("--note")] = "",
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Record a proposed policy and show its diff against the active one."""
    with _open(config) as (store, cfg):
        doc = read_policy_file(file, cfg.registry)
        actor = acting(store, token_env, Capability.OPERATE, config_tokens=cfg.tokens)
        p = store.propose_policy(
            canonical_text(doc), policy_hash(doc), author=actor, now=time.time(), note=note
        )
        diff = diff_documents(_active_doc(store), doc)
    if as_json:
        print(json.dumps({**p.to_dict(), "diff": diff}))
        return
    console.print(f"proposed {p.proposal_id} ({p.policy_hash}) as {actor}", highlight=False)
    for line in diff or ["(no change)"]:
        console.print(line, highlight=False)


@policy_app.command("diff")
def diff(config: ConfigReq, proposal: str, as_json: JsonOpt = False) -> None:
    """What PROPOSAL changes against the active policy."""
    with _open(config) as (store, _):
        p = store.get_policy_proposal(proposal)
        lines = diff_documents(_active_doc(store), json.loads(p.document))
    if as_json:
        print(json.dumps(lines))
        return
    for line in lines or ["(no change)"]:
        console.print(line, highlight=False)


@policy_app.command("approve")
def approve(
    config: ConfigReq, proposal: str, token_env: TokenEnvOpt = TOKEN_ENV, as_json: JsonOpt = False
) -> None:
    """Apply PROPOSAL (never by its author); every replica follows within its poll."""
    with _open(config) as (store, cfg):
        actor = acting(store, token_env, Capability.OPERATE, config_tokens=cfg.tokens)
        p = store.approve_policy(proposal, approver=actor, now=time.time())
    if as_json:
        print(json.dumps(p.to_dict()))
        return
    console.print(f"applied {p.proposal_id}: {p.policy_hash} is active", highlight=False)


@policy_app.command("reject")
def reject(
    config: ConfigReq,
    proposal: str,
    reason: Annotated[str, typer.Option("--reason")] = "",
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Close PROPOSAL without applying it (its author may withdraw it), audited."""
    with _open(config) as (store, cfg):
        actor = acting(store, token_env, Capability.OPERATE, config_tokens=cfg.tokens)
        p = store.reject_policy(proposal, by=actor, now=time.time(), reason=reason)
    if as_json:
        print(json.dumps(p.to_dict()))
        return
    console.print(f"rejected {p.proposal_id} as {actor}", highlight=False)


@policy_app.command("show")
def show(config: ConfigReq, proposal: str, as_json: JsonOpt = False) -> None:
    """PROPOSAL: its state, author, decision and diff against the active policy."""
    with _open(config) as (store, _):
        p = store.get_policy_proposal(proposal)
        lines = diff_documents(_active_doc(store), json.loads(p.document))
    if as_json:
        print(json.dumps({**p.to_dict(), "diff": lines}))
        return
    console.print(
        f"{p.proposal_id} {p.state} {p.policy_hash} by {p.author}"
        + (f", {p.state} by {p.decided_by}" if p.decided_by else "")
        + (f" ({p.note})" if p.note else ""),
        highlight=False,
    )
    for line in lines or ["(no change)"]:
        console.print(line, highlight=False)


@policy_app.command("load")
def load(
    config: ConfigReq,
    file: FileOpt,
    note: Annotated[str, typer.Option("--note")] = "",
    token_env: TokenEnvOpt = TOKEN_ENV,
    as_json: JsonOpt = False,
) -> None:
    """Apply a policy file at once (only where policy_approval = "optional"), audited."""
    with _open(config) as (store, cfg):
        if cfg.authority.policy_approval_required:
            raise PermissionDenied(
                'policy changes need approval ([authority] policy_approval = "required"): '
                "propose it, and have another principal approve it"
            )
        doc = read_policy_file(file, cfg.registry)
        actor = acting(store, token_env, Capability.OPERATE, config_tokens=cfg.tokens)
        p = store.load_policy(
            canonical_text(doc), policy_hash(doc), by=actor, now=time.time(), note=note
        )
    if as_json:
        print(json.dumps(p.to_dict()))
        return
    console.print(f"loaded {p.proposal_id}: {p.policy_hash} is active", highlight=False)


@policy_app.command("list")
def list_proposals(config: ConfigReq, as_json: JsonOpt = False) -> None:
    """Proposals, newest first, and the active version."""
    with _open(config) as (store, _):
        rows = store.list_policy_proposals()
        active = store.active_policy()
    if as_json:
        print(
            json.dumps(
                {
                    "active": None if active is None else active.policy_hash,
                    "proposals": [p.to_dict() for p in rows],
                }
            )
        )
        return
    console.print(f"active: {active.policy_hash if active else '(the config file)'}")
    for p in rows:
        console.print(
            f"{p.proposal_id} {p.state:8} {p.policy_hash[:19]} by {p.author}"
            + (f", {p.state} by {p.decided_by}" if p.decided_by else ""),
            highlight=False,
        )


@policy_app.command("replay")
def replay_cmd(
    config: ConfigReq,
    file: FileOpt,
    since: Annotated[
        float, typer.Option("--since", help="Seconds back from now the window starts.")
    ] = 86400.0,
    as_json: JsonOpt = False,
) -> None:
    """Decide the window's recorded intents again under FILE; report what would change."""
    with _open(config) as (store, cfg):
        doc = read_policy_file(file, cfg.registry)
        report = replay(
            recorded_decisions(store, since=time.time() - since),
            cfg.registry,
            policy_set(doc, cfg.registry),
        )
    if as_json:
        print(json.dumps(report.to_dict()))
        return
    console.print(
        f"replayed {report.replayed} decisions; {len(report.changed)} would change", highlight=False
    )
    for action, counts in sorted(report.counts.items()):
        console.print(
            f"  {action}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
            highlight=False,
        )
