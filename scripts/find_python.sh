#!/usr/bin/env bash
# Print the path of a Python interpreter: find_python.sh python3.12 (or python3, or a path).
# It is the name on PATH when that runs, else pyenv's build of that version (a pyenv shim on
# PATH may exist yet refuse to run a version that is not selected). Exit 1 when none is found.
set -u
want=${1:-python3}
if "$want" -c '' >/dev/null 2>&1; then
    command -v "$want"
    exit 0
fi
version=${want#python}
root=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
for candidate in "$root"/versions/"$version"*/bin/"$want"; do
    if [ -x "$candidate" ] && "$candidate" -c '' >/dev/null 2>&1; then
        echo "$candidate"
        exit 0
    fi
done
echo "find_python.sh: no working $want on PATH or in $root/versions" >&2
exit 1
