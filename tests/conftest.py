"""Shared pytest helpers: where the golden fixtures live, and skipping cleanly when they are absent."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# The golden tensors are read in place from ../shared (never copied into the repo).
SHARED_DIR = Path(os.environ.get("SDVG_SHARED_DIR", REPO_ROOT.parent / "shared"))
FIXTURES_DIR = SHARED_DIR / "fixtures"
DATA_DIR = SHARED_DIR / "data"

# Tiny models gain nothing from intra-op threads, and on a busy 2-core machine OpenMP spin-waiting makes
# them several times slower; the golden fixtures were also made with 1 thread.
torch.set_num_threads(1)


def require_shared(sub: str) -> Path:
    """Return ../shared/<sub>, or skip the test saying which folder is missing."""
    path = SHARED_DIR / sub
    if not path.exists():
        pytest.skip(f"golden data not found at {path} (set SDVG_SHARED_DIR or place the shared/ folder next to the repo)")
    return path


@pytest.fixture
def fixtures_dir() -> Path:
    return require_shared("fixtures")


@pytest.fixture
def data_dir() -> Path:
    return require_shared("data")


@pytest.fixture(autouse=True)
def _deterministic_cpu():
    """Parity tests compare float32 numbers to 1e-4 or tighter: keep torch's CPU maths deterministic."""
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield


def wait_for(proc: subprocess.Popen, ready: Callable[[], bool], what: str, hang_s: float,
             output: Callable[[], str] = lambda: "") -> None:
    """Wait until `ready()` while the child runs (a stop signal is then sent at a known point). A hang guard, not a
    speed check: after `hang_s` the child is killed and the test fails as hung; a child that ends first fails with
    its `output()`."""
    settled = threading.Event()

    def watch():
        while not ready() and proc.poll() is None:
            time.sleep(0.05)
        settled.set()

    threading.Thread(target=watch, daemon=True).start()
    if not settled.wait(hang_s):
        proc.kill()
        pytest.fail(f"hung: no {what} within {hang_s:g} s (the child was killed)")
    if not ready():
        pytest.fail(f"the child ended before {what}:\n{output()[-3000:]}")
