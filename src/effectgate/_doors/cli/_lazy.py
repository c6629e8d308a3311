"""The CLI's lazily loaded commands: ``effectgate --help`` and shell completion list every
command without importing the module behind it; a command's module is imported when it runs
(or its own help is asked for).

Each entry names the module whose ``register(app)`` adds the command and the command's help
as the list shows it (its docstring's first paragraph; tests/test_cli_starter.py checks that
the list drawn from here is the list drawn from the loaded commands).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["LAZY", "LazyGroup"]

LAZY: dict[str, tuple[str, str]] = {
    "bench": (
        "effectgate.bench.cli",
        "Measure effectgate against the raw-SQL floor on the same store, in the same run.",
    ),
    "simulate": (
        "effectgate._sim.cli",
        "Run the boundary against a faulty paper venue, seed by seed; check every invariant.",
    ),
    "alerts": ("effectgate._doors.cli.controls", "Alerts from breakers and the maintenance rules."),
    "approvals": ("effectgate._doors.cli.controls", "Pending approvals: list, approve, refuse."),
    "audit": ("effectgate._doors.cli.controls", "The hash-chained audit log."),
    "authority": (
        "effectgate._doors.cli.controls",
        "Staged authority: envelopes and their recorded steps.",
    ),
    "breaker": ("effectgate._doors.cli.controls", "Anomaly circuit breakers."),
    "kill": (
        "effectgate._doors.cli.controls",
        "Kill switches per action class (hold new dispatches).",
    ),
    "shadow": (
        "effectgate._doors.cli.controls",
        "Shadow mode: record instead of send; compare with the incumbent.",
    ),
    "verify": (
        "effectgate._doors.cli.controls",
        "Check effectgate's guarantees against YOUR configuration: its safety "
        "(policies, keys,\nkill switches, approvals) and the ledger cases and "
        "invariants in scratch ledgers. Exit 1 on\nany failure (for CI), 2 if the file "
        "does not load.",
    ),
    "token": (
        "effectgate._doors.cli.tokens",
        "Principals and their tokens, in the ledger: create, list, revoke. A revoked "
        "token is refused by every replica from its next request.",
    ),
    "gateway": (
        "effectgate._doors.cli.gateway",
        "Serve MCP in front of the upstream MCP servers the config names (stdio by default).",
    ),
    "gateway-accept": (
        "effectgate._doors.cli.gateway",
        "Accept a drifted upstream schema: re-pin it in the config file, audited in the ledger.",
    ),
    "gateway-schemas": (
        "effectgate._doors.cli.gateway",
        "Each governed tool's pinned schema digest against its upstream's live one.",
    ),
    "scan": (
        "effectgate._doors.cli.gateway",
        "Report consequential calls that bypass effectgate (exit 1 if any: fit for CI).",
    ),
    "quarantine": (
        "effectgate._doors.cli.quarantine",
        "The quarantine queue: rows that wait for an operator's resolution.",
    ),
    "runs": (
        "effectgate._doors.cli.runs",
        "Run-call journals: list runs, show one, seal it (for good), take and verify "
        "its recovery snapshot.",
    ),
    "continue": (
        "effectgate._doors.cli.continuations",
        "Retry or compensate an operation: a new, separately authorised action with proof.",
    ),
    "plans": (
        "effectgate._doors.cli.budgets",
        "Plan accounts: list them, show one as a tree of reservations.",
    ),
    "grants": (
        "effectgate._doors.cli.grants",
        "Delegated authority: what a principal may do (classes, targets, value, "
        "budget, environments, expiry), delegated beneath, never wider; revocation is "
        "transitive.",
    ),
    "policy": (
        "effectgate._doors.cli.policy",
        "Policy as a governed artefact: propose, diff, approve (by someone else), "
        "load, list, and replay recorded intents under a proposed policy.",
    ),
    "receipt": (
        "effectgate._doors.cli.receipts",
        "Signed operation receipts: make a key, get a final operation's receipt, verify one "
        "offline.",
    ),
    "operator-mcp": (
        "effectgate._doors.cli.operator_mcp",
        "Serve the operator MCP tool set (approvals) over stdio, on an approver's credential.",
    ),
}


def _listed(name: str, help_text: str, panel: str | None) -> TyperCommand:
    """What the list shows of a command not yet loaded: its name, help and panel."""
    return TyperCommand(name, help=help_text, rich_help_panel=panel)


class LazyGroup(TyperGroup):
    """A group whose :data:`LAZY` commands are imported on first use.

    While it lists commands (``--help``, completion of a command name) it hands out stand-ins
    that carry only the name, help and panel; resolving a command to run it loads the real one.
    """

    #: command name -> help panel (set by the CLI's main module).
    panels: ClassVar[dict[str, str]] = {}
    #: panel order: names as --help lists them.
    order: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    @contextmanager
    def _stand_ins(self) -> Iterator[None]:
        self._listing = True
        try:
            yield
        finally:
            self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        names = set(self.commands) | set(LAZY)
        rank = {name: i for i, name in enumerate(self.order)}
        return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return self.commands.get(cmd_name)
        module, help_text = LAZY[cmd_name]
        if self._listing:
            return _listed(cmd_name, help_text, self.panels.get(cmd_name))
        scratch = typer.Typer()
        importlib.import_module(module).register(scratch)
        for name, command in typer.main.get_group(scratch).commands.items():
            command.rich_help_panel = self.panels.get(name)  # type: ignore[attr-defined]
            self.add_command(command, name)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        with self._stand_ins():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        with self._stand_ins():
            return super().shell_complete(ctx, incomplete)
