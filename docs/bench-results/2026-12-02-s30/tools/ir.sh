#!/usr/bin/env bash
# Instructions (callgrind Ir) per B1 action, SQLite synchronous=OFF:
# (Ir of 600 actions - Ir of 100 actions) / 500, so start-up and warm-up cancel out.
# usage: ir.sh [PYTHONPATH of the tree to measure]   (needs valgrind)
here="$(cd "$(dirname "$0")" && pwd)"
ir() { PYTHONPATH=${1:-} valgrind --tool=callgrind --callgrind-out-file=/dev/null python "$here/irrun.py" "$2" 2>&1 | grep -o "Collected : [0-9]*" | grep -o "[0-9]*"; }
a=$(ir "${1:-}" 100); b=$(ir "${1:-}" 600); echo "Ir/action $(( (b - a) / 500 ))"
