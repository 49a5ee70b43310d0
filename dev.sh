#!/usr/bin/env bash
# One entry point for a fresh clone:  ./dev.sh demo [args]  |  ./dev.sh test [pytest args]  |  ./dev.sh bench
#   |  ./dev.sh gpu-check --out DIR (one GPU, 8 minutes) or --dry-run (any CPU)  |  ./dev.sh torch-plan
# Creates ./.venv on first use, installs torch only when none is importable, then the pack's requirements
# plus the test extras.
#   Which torch build (only when .venv has no torch yet; `./dev.sh torch-plan` prints the choice, installs nothing):
#     no NVIDIA driver visible (no nvidia-smi on PATH, no /proc/driver/nvidia) on Linux: the CPU build, first a
#       torch==VERSION+cpu wheel pip already finds (PyPI has none: a local wheel through pip's find-links), else the
#       CPU index https://download.pytorch.org/whl/cpu (the torch wheel is about 190 MB);
#     an NVIDIA driver visible, or not Linux: PyPI's default build (on Linux x86_64 the CUDA build: torch plus
#       NVIDIA CUDA wheels and triton, about 2.7 GB; macOS and Windows get their CPU/MPS build from PyPI).
#   SDVG_TORCH_INDEX   overrides the choice: cpu = the CPU index; pypi = PyPI's default build; any other value is
#                      passed to pip as --index-url (e.g. https://download.pytorch.org/whl/cu128).
#   SDVG_TORCH_VERSION torch version to install (default 2.13.0, the version the tests were run with).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VPY=.venv/bin/python
TORCH_VERSION=${SDVG_TORCH_VERSION:-2.13.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu

nvidia_driver() {  # what shows an NVIDIA driver on this machine (empty: none)
  if command -v nvidia-smi >/dev/null 2>&1; then echo "nvidia-smi at $(command -v nvidia-smi)"
  elif [ -e /proc/driver/nvidia ]; then echo "/proc/driver/nvidia"
  fi
}

# The pip commands to try in order, one per line (the first that succeeds installs torch), after a '#' line
# saying why. Nothing is installed here.
torch_plan() {
  local v=$TORCH_VERSION driver
  case "${SDVG_TORCH_INDEX:-}" in
    cpu)  echo "# SDVG_TORCH_INDEX=cpu: the CPU build from the CPU index (about 190 MB)"
          echo "pip install --index-url $CPU_INDEX torch==$v"; return ;;
    pypi) echo "# SDVG_TORCH_INDEX=pypi: PyPI's default build (on Linux x86_64 the CUDA build, about 2.7 GB)"
          echo "pip install torch==$v"; return ;;
    "") ;;
    *)    echo "# SDVG_TORCH_INDEX=$SDVG_TORCH_INDEX: torch from that index"
          echo "pip install --index-url $SDVG_TORCH_INDEX torch==$v"; return ;;
  esac
  driver=$(nvidia_driver)
  if [ -n "$driver" ]; then
    echo "# NVIDIA driver found ($driver): PyPI's default build, on Linux x86_64 the CUDA build (about 2.7 GB:"
    echo "# torch, NVIDIA CUDA wheels, triton); SDVG_TORCH_INDEX=cpu for the CPU build (about 190 MB)"
    echo "pip install torch==$v"
  elif [ "$(uname -s)" = Linux ]; then
    echo "# no NVIDIA driver visible (no nvidia-smi on PATH, no /proc/driver/nvidia): the CPU build; first a"
    echo "# +cpu wheel pip already finds (PyPI has none: a local wheel through pip's find-links or an index you"
    echo "# configured), else the CPU index (about 190 MB); SDVG_TORCH_INDEX=pypi for PyPI's default (CUDA) build"
    echo "pip install torch==$v+cpu"
    echo "pip install --index-url $CPU_INDEX torch==$v"
  else
    echo "# $(uname -s): PyPI's default build (CPU; Apple GPUs through MPS on macOS)"
    echo "pip install torch==$v"
  fi
}

install_torch() {
  local plan why cmd
  plan=$(torch_plan)
  why=$(grep '^#' <<<"$plan" | sed 's/^# \{0,1\}//' | tr '\n' ' ')
  echo "installing torch $TORCH_VERSION: $why" >&2
  while IFS= read -r cmd; do
    echo "+ $cmd" >&2
    # shellcheck disable=SC2086  # the plan's words are pip's arguments
    if "$VPY" -m ${cmd/#pip/pip -q}; then return 0; fi
    echo "  (did not work; trying the next way)" >&2
  done < <(grep -v '^#' <<<"$plan")
  echo "error: could not install torch $TORCH_VERSION (see pip's messages above); set SDVG_TORCH_INDEX" >&2
  return 1
}

cmd=${1:-test}; shift || true
if [ "$cmd" = torch-plan ]; then
  have=$([ -x "$VPY" ] && "$VPY" -c "from importlib.metadata import version; print(version('torch'))" 2>/dev/null || true)
  [ -z "$have" ] || echo "# .venv already has torch $have: nothing to install"
  torch_plan
  exit 0
fi
if [ ! -x "$VPY" ]; then
  "$PY" -m venv .venv
fi
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  install_torch
fi
stamp=.venv/.sdvg-reqs
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ] || [ requirements-eval.txt -nt "$stamp" ]; then
  "$VPY" -m pip install -q -r requirements-dev.txt
  touch "$stamp"
fi
case "$cmd" in
  test)  exec "$VPY" -m pytest -q "$@" ;;
  demo)  exec "$VPY" -m sdvg_core.demo "$@" ;;
  bench) exec "$VPY" bench/bench_scale.py "$@" ;;  # --size {tiny,mid,full} [--device cuda]; bench_engine.py: CPU table
  gpu-check) exec "$VPY" bench/gpu_check.py "$@" ;;  # --out DIR [--gpu h200|h100] [--comfyui DIR] | --dry-run
  eval)  exec "$VPY" -m sdvg_eval "$@" ;;
  eval-report) exec "$VPY" -m sdvg_eval.report "$@" ;;
  *) echo "usage: ./dev.sh {test|demo|bench|gpu-check|eval|eval-report|torch-plan} [args]" >&2; exit 2 ;;
esac
