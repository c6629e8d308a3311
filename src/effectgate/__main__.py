"""``python -m effectgate`` runs the operators' CLI."""

from effectgate._doors.cli.main import main

main()
