"""sdvg_eval joining an existing Ray cluster as users run it: a head this test starts (`ray start --head --block`,
its own temp dir, free ports, token authentication on, one declared GPU), joined through --ray-address and
through RAY_ADDRESS, a worker that asks for the GPU. Needs Ray (requirements-eval.txt) and its `ray` command;
about a minute on 2 cores (one head, one short tiny sweep). The head is stopped by its own process group only."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sdvg_eval.records import read_rows

pytestmark = pytest.mark.slow  # Ray clusters started and joined

pytest.importorskip("ray", reason="Ray not installed (pip install -r requirements-eval.txt); Ray join not tested")

REPO = Path(__file__).resolve().parents[1]
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
START_TIMEOUT = 120  # seconds for the head to come up on a busy 2-core machine
RUN_TIMEOUT = 300


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A Ray head with token authentication, 2 CPUs and 1 declared GPU; yields (address, token file)."""
    if RAY is None:
        pytest.skip("the `ray` command is not on PATH")
    d = tmp_path_factory.mktemp("rayhead")
    token = d / "token"
    token.write_text(secrets.token_hex(32))
    port, agent, grpc, metrics, nm, om, renv = _free_ports(7)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    cmd = [RAY, "start", "--head", "--block", f"--temp-dir={d / 'r'}", f"--port={port}", "--num-cpus=2", "--num-gpus=1",
           "--include-dashboard=false", f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={grpc}",
           f"--metrics-export-port={metrics}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
           f"--runtime-env-agent-port={renv}", "--disable-usage-stats"]
    log = d / "head.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None, f"ray start failed:\n{log.read_text()[-3000:]}"
            assert time.monotonic() - t0 < START_TIMEOUT, "ray head too slow to start"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", token
    finally:
        proc.send_signal(signal.SIGTERM)  # `ray start --block` drains and stops the processes it started
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything of this head's own process group still left
        except ProcessLookupError:
            pass


def _sweep(prompts: Path, out: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sdvg_eval", "--tiny", "--prompts", str(prompts), "--configs", "target-only",
           "sdvg:-0.7", "--metrics", "imagereward", "--width", "48", "--height", "32", "--blocks", "3",
           "--workers", "1", "--no-report", "--out", str(out), *extra]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def _env(token: Path, **kw) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0",
               SDVG_EVAL_CODE_VERSION="ray-join-test", RAY_AUTH_TOKEN_PATH=str(token), **kw)
    return env


def test_join_a_token_cluster_by_address_with_a_gpu_worker(head, tmp_path):
    """--ray-address, no RAY_AUTH_MODE set by the user (the token is found), the worker asks for the GPU."""
    address, token = head
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a paper boat drifts down a rainy street\n")
    r = _sweep(prompts, tmp_path / "a", _env(token), "--ray-address", address, "--gpus-per-worker", "1",
               "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "RAY_AUTH_MODE=token" in r.stderr and f"Ray at {address}: 1 worker(s), 1.0 CPU and 1.0 GPU" in r.stderr
    assert len(read_rows(tmp_path / "a" / "rows.csv")) == 2
    (info,) = json.loads((tmp_path / "a" / "workers.json").read_text()).values()
    assert info["gpus"] == ["0"]  # Ray gave the worker the cluster's GPU


def test_ray_address_variable_joins_and_too_many_gpus_is_a_usage_error(head, tmp_path):
    """RAY_ADDRESS instead of the flag joins the same cluster (no "num_cpus must not be provided"); asking for
    more GPUs than it has stops with exit 2 naming what the cluster has, before any worker starts."""
    address, token = head
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("two astronauts play chess on the moon\n")
    r = _sweep(prompts, tmp_path / "c", _env(token, RAY_ADDRESS=address), "--gpus-per-worker", "2", "--device", "cpu")
    assert r.returncode == 2, r.stdout + r.stderr[-3000:]
    assert f"asks for 1.0 CPU and 2.0 GPU but the cluster at {address} has 2.0 CPU and 1.0 GPU" in r.stderr
    assert not read_rows(tmp_path / "c" / "rows.csv")


def test_token_mode_is_set_only_for_a_join_with_a_token_at_hand(tmp_path, monkeypatch):
    from sdvg_eval.eval import auth_mode_for_join

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token here
    assert auth_mode_for_join({}) is None
    env = {"RAY_AUTH_TOKEN_PATH": "/x"}
    assert auth_mode_for_join(env) == "token" and env["RAY_AUTH_MODE"] == "token"
    env = {"RAY_AUTH_TOKEN": "t", "RAY_AUTH_MODE": "disabled"}
    assert auth_mode_for_join(env) is None and env["RAY_AUTH_MODE"] == "disabled"  # the user's choice stands
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t")
    env = {}
    assert auth_mode_for_join(env) == "token"


# ------------------------------------------------------------------------------------------ a cluster that is not there
JOIN_BOUND_S = 60  # seconds from start to exit 2: Python and torch imports on a busy 2-core machine, then the join


def _join_fails(tmp_path: Path, address: str, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a lighthouse in a storm\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    env.update(PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0", SDVG_EVAL_CODE_VERSION="ray-join-test")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sdvg_eval", "--tiny", "--prompts", str(prompts), "--configs",
                        "target-only", "--ray-address", address, "--out", str(tmp_path / "o"), *extra],
                       env=env, capture_output=True, text=True, timeout=JOIN_BOUND_S + 120)
    return r, time.monotonic() - t0



def test_joining_an_unused_port_fails_at_once_and_writes_nothing(tmp_path):
    """Nothing listens on the port: refused at once (Ray itself retries its GCS for minutes), exit 2 with the
    address and how to start a cluster or run locally; no results folder, no rows.csv, no embeddings."""
    (port,) = _free_ports(1)
    r, took = _join_fails(tmp_path, f"127.0.0.1:{port}")
    assert r.returncode == 2, r.stderr[-3000:]
    assert took < JOIN_BOUND_S, took
    assert f"could not join the Ray cluster at 127.0.0.1:{port}: nothing accepts connections" in r.stderr
    assert "ray start --head" in r.stderr and "--workers 0" in r.stderr and "nothing was run or written" in r.stderr
    assert not (tmp_path / "o").exists()


def test_a_port_where_no_ray_head_answers_fails_within_the_join_timeout(tmp_path):
    """Something accepts the connection but never speaks Ray: `ray.init` would wait for minutes; the sweep stops
    after --ray-join-timeout seconds (here 2: start-up and all, sooner than the default 30 s would allow) with the
    address named, having written nothing."""
    from sdvg_eval.cluster import JOIN_TIMEOUT_S

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        r, took = _join_fails(tmp_path, f"127.0.0.1:{silent.getsockname()[1]}", "--ray-join-timeout", "2")
    finally:
        silent.close()
    assert r.returncode == 2, r.stderr[-3000:]
    assert took < JOIN_TIMEOUT_S, took
    assert "no Ray head answered within 2 s (--ray-join-timeout)" in r.stderr, r.stderr[-3000:]
    assert not (tmp_path / "o").exists()
