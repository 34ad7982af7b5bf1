#!/usr/bin/env bash
# Installs Headwater and everything its tests need into a virtualenv (default .venv),
# offline models included. Safe to re-run. Usage: scripts/install.sh [VENV_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
python="${PYTHON:-python3}"

# llama-cpp-python (the `consolidate` extra) is built from source. A native build (-march=native)
# uses every instruction its CPUID reports, AMX included, and AMX faults (SIGSEGV on the first
# completion) where the kernel or hypervisor does not grant tile state: seen on this project's
# CI machines. A portable AVX2 build runs wherever it was built and in images moved to other hosts.
# Set CMAKE_ARGS yourself for another build (a GPU backend, say). pip caches the built wheel by
# the source's address, not by these flags: after changing them, `pip cache remove llama_cpp_python`.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q -e ".[test,consolidate]"
"${pip[@]}" install -q --no-deps -r requirements-nodeps.txt
"${pip[@]}" install -q --no-deps ./packaging/en_core_web_sm
# Fail here, not at the first sync, if a model or parser dependency is missing.
"$venv/bin/headwater" doctor
