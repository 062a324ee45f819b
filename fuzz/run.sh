#!/bin/sh
# fuzz/run.sh [SECONDS] [options] -- wrapper of fuzz/run.py (see fuzz/README.md).
here=$(cd "$(dirname "$0")" && pwd)
py="$here/../.venv/bin/python"
[ -x "$py" ] || py=python3
cd "$here/.." && exec "$py" fuzz/run.py "$@"
