"""``python -m effectgate`` runs the operators' CLI."""

from effectgate.frontends.cli import main

main()
