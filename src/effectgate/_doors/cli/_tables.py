"""Printing Rich tables so that nothing in them is cut off.

Rich fits a table to the console's width and shortens what does not fit with an ellipsis;
when the output is a pipe or a file that width is 80 columns, so operation ids and
fingerprints came out as ``op-2026-…``. On a terminal, cells wrap (fold) instead; anywhere
else the table is printed at its natural width, every value whole on one line.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

__all__ = ["print_table"]

_UNBOUNDED = 1_000_000


def print_table(console: Console, table: Table) -> None:
    for column in table.columns:
        column.overflow = "fold"
    if console.is_terminal:
        console.print(table, soft_wrap=False)
        return
    natural = Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
    Console(file=console.file, width=max(natural, 20), color_system=None).print(table)
