#!/usr/bin/env bash
# One entry point for a fresh clone:  ./dev.sh demo [args]  |  ./dev.sh test [pytest args]  |  ./dev.sh bench
#   |  ./dev.sh gpu-check --out DIR (one GPU, 8 minutes) or --dry-run (any CPU)
# Creates ./.venv on first use, installs torch only when none is importable, then the pack's requirements
# plus the test extras.
#   SDVG_TORCH_INDEX   where torch comes from (only when .venv has no torch yet):
#                      unset = PyPI's default build (on Linux x86_64 the CUDA build: several GB of CUDA wheels);
#                      cpu   = https://download.pytorch.org/whl/cpu (CPU only, a few hundred MB);
#                      any other value is passed to pip as --index-url (e.g. https://download.pytorch.org/whl/cu128).
#   SDVG_TORCH_VERSION torch version to install (default 2.13.0, the version the tests were run with).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  torch_index=()
  case "${SDVG_TORCH_INDEX:-}" in
    "") ;;
    cpu) torch_index=(--index-url https://download.pytorch.org/whl/cpu) ;;
    *) torch_index=(--index-url "$SDVG_TORCH_INDEX") ;;
  esac
  echo "installing torch==${SDVG_TORCH_VERSION:-2.13.0} ${torch_index[*]:-from PyPI (default build)}" >&2
  "$VPY" -m pip install -q "${torch_index[@]}" "torch==${SDVG_TORCH_VERSION:-2.13.0}"
fi
stamp=.venv/.sdvg-reqs
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ requirements-eval.txt -nt "$stamp" ]; then
  "$VPY" -m pip install -q -r requirements-dev.txt
  touch "$stamp"
fi
cmd=${1:-test}; shift || true
case "$cmd" in
  test)  exec "$VPY" -m pytest -q "$@" ;;
  demo)  exec "$VPY" -m sdvg_core.demo "$@" ;;
  bench) exec "$VPY" bench/bench_scale.py "$@" ;;  # --size {tiny,mid,full} [--device cuda]; bench_engine.py: CPU table
  gpu-check) exec "$VPY" bench/gpu_check.py "$@" ;;  # --out DIR [--gpu h200|h100] [--comfyui DIR] | --dry-run
  eval)  exec "$VPY" -m sdvg_eval "$@" ;;
  eval-report) exec "$VPY" -m sdvg_eval.report "$@" ;;
  *) echo "usage: ./dev.sh {test|demo|bench|gpu-check|eval|eval-report} [args]" >&2; exit 2 ;;
esac
