#!/usr/bin/env bash
# The trainer on a real GPU in a few minutes, with every figure in OUT/summary.json.
#
#   scripts/gpu_check.sh [--smoke] [--no-convert] [OUT_DIR]     (default OUT_DIR: runs/gpu_check)
#
# Made for a lent GPU machine that is bare (docs/training.md, "On a lent GPU machine"): it runs
# with that machine's own python3 and nothing installed -- the checkout is made importable as
# `edgeport` without pip, and the few wheels it lacks come from scripts/gpu_wheels.sh, run here
# beforehand. PY picks another interpreter (`make gpu-check` passes the project's venv).
# Steps and figures: scripts/gpu_check.py. Exit 0 when every check that ran passed, 1 when one
# failed, 2 when nothing could run (no GPU, or a module missing: the summary names it).
set -euo pipefail
PY=${PY:-python3}
exec "$PY" "$(dirname "$0")/gpu_check.py" "$@"
