"""dev.sh's choice of torch build, without installing anything: the CPU build where no NVIDIA driver is visible (a
local wheel first, then the CPU index), PyPI's default (CUDA) build where one is, SDVG_TORCH_INDEX over both.
`./dev.sh torch-plan` prints the plan; a copy of dev.sh beside a stand-in .venv/bin/python records what it runs."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERSION = "2.13.0"  # dev.sh's default SDVG_TORCH_VERSION
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# A stand-in python: logs its arguments; has no torch; finds a +cpu wheel (PyPI has none) only when LOCAL_WHEEL is set.
FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$CALLS"
case "$*" in
  "-c import torch") exit 1 ;;
  *torch==*+cpu*) [ -n "$LOCAL_WHEEL" ] && exit 0; exit 1 ;;
esac
exit 0
"""


def _real_driver() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()


def _fake_driver(tmp_path: Path) -> str:
    d = tmp_path / "driver-bin"
    d.mkdir()
    smi = d / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    return str(d)


def _env(path_prefix: str | None = None, **kw: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SDVG_TORCH_INDEX", "SDVG_TORCH_VERSION")}
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env["PATH"]
    return {**env, **kw}


def _plan(env: dict) -> list[str]:
    r = subprocess.run(["bash", str(REPO / "dev.sh"), "torch-plan"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]


def test_no_nvidia_driver_plans_the_cpu_build_local_wheel_first():
    if _real_driver():
        pytest.skip("this machine has an NVIDIA driver")
    assert _plan(_env()) == [f"pip install torch=={VERSION}+cpu",
                             f"pip install --index-url {CPU_INDEX} torch=={VERSION}"]


def test_an_nvidia_driver_plans_the_default_cuda_build(tmp_path):
    assert _plan(_env(_fake_driver(tmp_path))) == [f"pip install torch=={VERSION}"]


def test_sdvg_torch_index_overrides_the_choice(tmp_path):
    driver = _fake_driver(tmp_path)
    assert _plan(_env(driver, SDVG_TORCH_INDEX="cpu")) == [f"pip install --index-url {CPU_INDEX} torch=={VERSION}"]
    assert _plan(_env(SDVG_TORCH_INDEX="pypi")) == [f"pip install torch=={VERSION}"]
    assert _plan(_env(SDVG_TORCH_INDEX="https://example.org/whl/cu128", SDVG_TORCH_VERSION="2.12.1")) == [
        "pip install --index-url https://example.org/whl/cu128 torch==2.12.1"]


def _bootstrap(tmp_path: Path, env: dict) -> list[str]:
    """Run a copy of dev.sh whose .venv/bin/python is the stand-in; return the calls it made, in order."""
    d = tmp_path / "clone"
    (d / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO / "dev.sh", d / "dev.sh")
    py = d / ".venv" / "bin" / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    calls = tmp_path / "calls.txt"
    r = subprocess.run(["bash", str(d / "dev.sh"), "test"], env={**env, "CALLS": str(calls)}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return calls.read_text().splitlines()


def test_bootstrap_without_a_driver_tries_the_local_wheel_then_the_cpu_index(tmp_path):
    if _real_driver():
        pytest.skip("this machine has an NVIDIA driver")
    calls = _bootstrap(tmp_path / "a", _env())
    assert calls[:3] == ["-c import torch", f"-m pip -q install torch=={VERSION}+cpu",
                         f"-m pip -q install --index-url {CPU_INDEX} torch=={VERSION}"]
    assert calls[-1] == "-m pytest -q"
    calls = _bootstrap(tmp_path / "b", _env(LOCAL_WHEEL="1"))  # a wheel pip finds locally: no download at all
    assert [c for c in calls if "torch==" in c] == [f"-m pip -q install torch=={VERSION}+cpu"]


def test_bootstrap_with_a_driver_installs_the_default_build(tmp_path):
    calls = _bootstrap(tmp_path, _env(_fake_driver(tmp_path)))
    assert [c for c in calls if "torch==" in c] == [f"-m pip -q install torch=={VERSION}"]
