"""Fixture: actions routed through the gate, and a custom client named by a rules file."""

import mycorp.ledger as ledger

from effectgate import Gate


def run(gate_args: dict) -> None:  # type: ignore[type-arg]
    gate = Gate(**gate_args)
    gate.submit("submit_order", "op-1", b"{}")  # through the gate
    ledger.Client().charge(5)  # a finding only with the rules file

