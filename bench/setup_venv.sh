#!/usr/bin/env bash
# Creates (or brings up to date) the bench-only Python environment .venv-bench at the repository
# root from bench/requirements.txt, with pip from PyPI. For `make bench` and the golden-data
# scripts only -- never for CI, the build or the server.
#
# Idempotent: when the venv exists and was last installed from the same requirements.txt
# (sha256 stamp inside the venv), it does nothing.
#
# Environment: PYTHON (interpreter to create the venv with, default python3),
#              VENV (venv path, default <repo>/.venv-bench). pip's own PIP_* variables apply.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VENV:-$root/.venv-bench}"
req="$root/bench/requirements.txt"
python="${PYTHON:-python3}"
stamp="$venv/.requirements.sha256"

want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    echo "setup_venv: $venv is up to date"
    exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "setup_venv: creating $venv with $("$python" --version 2>&1)"
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --upgrade pip
"$venv/bin/python" -m pip install -r "$req"
# Only stamp after a complete install, so an interrupted run is retried next time.
echo "$want" >"$stamp"
echo "setup_venv: $venv ready ($venv/bin/python)"
