#!/usr/bin/env bash
# One entry point for a fresh clone:  ./dev.sh demo [args]  |  ./dev.sh test [pytest args]  |  ./dev.sh bench
# Creates ./.venv on first use, installs torch only when none is importable (CPU build 2.13.0 on these
# machines), then the pack's requirements plus the test extras.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=.venv/bin/python
if ! "$VPY" -c "import torch" >/dev/null 2>&1; then
  "$VPY" -m pip install -q "torch==2.13.0"
fi
stamp=.venv/.sdvg-reqs
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ requirements-dev.txt -nt "$stamp" ]; then
  "$VPY" -m pip install -q -r requirements-dev.txt
  touch "$stamp"
fi
cmd=${1:-test}; shift || true
case "$cmd" in
  test)  exec "$VPY" -m pytest -q "$@" ;;
  demo)  exec "$VPY" -m sdvg_core.demo "$@" ;;
  bench) exec "$VPY" bench/bench_engine.py "$@" ;;
  *) echo "usage: ./dev.sh {test|demo|bench} [args]" >&2; exit 2 ;;
esac
