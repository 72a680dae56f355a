#!/usr/bin/env bash
# The wheels a bare GPU machine lacks for scripts/gpu_check.sh, downloaded here (where the
# package registry is reachable) into .gpu_wheels/, for Python 3.12 on manylinux x86_64; gpu_check
# unpacks them there, no pip needed. Prints what it fetched and the total size (the device tool
# carries at most 64 MiB per call: pass `.gpu_wheels` in its carry list).
#
#   scripts/gpu_wheels.sh [PYTHON_VERSION]        (default 3.12, the lent machine's python3)
#
# The list is scripts/gpu_wheels.txt: what the trainer imports that the lent machine does not
# have (its own list is in that file), pinned as constraints-py312.txt pins them.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
PY=${PY:-python3}
mkdir -p .gpu_wheels
"$PY" -m pip download -q --only-binary=:all: --no-deps --python-version "$version" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --dest .gpu_wheels -r scripts/gpu_wheels.txt
ls -l .gpu_wheels/*.whl | awk '{print $5, $9}'
du -sh .gpu_wheels | awk '{print "total:", $1}'
