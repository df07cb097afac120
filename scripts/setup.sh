#!/usr/bin/env bash
# Set up (or reuse) the project's virtual environment and the offline data sources.
# Idempotent: a second run with an unchanged pyproject.toml does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
# torch first: on the project's machines `torch==2.13.0` is a local CPU wheel,
# while a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
stamp="$VENV/.mmtoken-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup: environment $VENV is up to date"
else
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
    "$VENV/bin/python" -m pip install -q -e '.[book,test]'
    echo "$want" > "$stamp"
    echo "setup: installed into $VENV"
fi
