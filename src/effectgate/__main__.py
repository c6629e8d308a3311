"""``python -m effectgate`` runs the operators' CLI."""

from effectgate._frontends.cli import main

main()
