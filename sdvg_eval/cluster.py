"""Ray for a sweep: join a running cluster within a bounded time, or start a local Ray for the run.

Joining a cluster that is not there used to hang: Ray retries its GCS connection for minutes. Here the address is
first probed with a plain TCP connection (nothing listening: refused at once), then `ray.init` runs in a helper
thread that the driver waits for at most `timeout` seconds (something listening that is not a Ray head: it never
answers). Either way the driver stops with a message naming the address and what to do; sdvg_eval joins before it
writes anything to the results folder.
"""
from __future__ import annotations

import math
import os
import socket
import sys
import threading
from pathlib import Path

JOIN_TIMEOUT_S = 30.0  # the longest a join may take before the sweep stops (a healthy head answers in seconds)
RAY_CLIENT_SCHEME = "ray://"  # Ray Client addresses: ray://HOST:PORT
RAY_AUTH_HELP = ("a cluster with token authentication (Ray's default since 2.59 for a local `ray start`) needs its "
                 "token here: ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH=FILE or RAY_AUTH_TOKEN=TOKEN (`ray get-auth-token` "
                 "on the head prints it)")
NO_CLUSTER_HELP = ("start a head there (`ray start --head --port=PORT` on that machine, then give its HOST:PORT), "
                   "or run without a cluster: drop --ray-address (and unset RAY_ADDRESS) for a local Ray, or give "
                   "--workers 0 to run in this process")


class RayJoinError(RuntimeError):
    """The Ray cluster could not be joined or cannot run the workers as asked."""


def token_available(environ=os.environ) -> bool:
    """A Ray auth token is at hand: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, or Ray's default file ~/.ray/auth_token."""
    return bool(environ.get("RAY_AUTH_TOKEN") or environ.get("RAY_AUTH_TOKEN_PATH")
                or (Path.home() / ".ray" / "auth_token").is_file())


def auth_mode_for_join(environ=os.environ) -> str | None:
    """Before `import ray`: joining with a token at hand and no RAY_AUTH_MODE set -> RAY_AUTH_MODE=token.

    Ray reads the mode once, at import; a driver in the default mode ('disabled') sends no token and a cluster
    with token authentication refuses it. A client in token mode also joins clusters without authentication."""
    if "RAY_AUTH_MODE" in environ or not token_available(environ):
        return None
    environ["RAY_AUTH_MODE"] = "token"
    return "token"


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT, [IPv6]:PORT or ray://HOST:PORT; None for 'auto' or anything else."""
    rest = address[len(RAY_CLIENT_SCHEME):] if address.startswith(RAY_CLIENT_SCHEME) else address
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float) -> str | None:
    """Why nothing can be joined at `address` (refused, unreachable, unknown host), found with one TCP connection
    of at most `timeout` seconds; None when something listens there (or the address is not HOST:PORT)."""
    hp = host_port(address)
    if hp is None:
        return None
    try:
        with socket.create_connection(hp, timeout=timeout):
            return None
    except socket.timeout:
        return f"no answer from {hp[0]} port {hp[1]} within {timeout:g} s"
    except OSError as e:
        return f"nothing accepts connections at {hp[0]} port {hp[1]} ({e.strerror or e})"


def join(address: str, runtime_env: dict, timeout: float = JOIN_TIMEOUT_S) -> None:
    """`ray.init(address=...)` that fails within `timeout` seconds with RayJoinError naming the address and the fix.

    On a timeout the helper thread is left waiting inside Ray (a daemon thread: it does not keep the process alive)."""
    problem = probe(address, timeout)
    if problem:
        raise RayJoinError(f"could not join the Ray cluster at {address}: {problem}.\n  {NO_CLUSTER_HELP}")
    import ray

    outcome: dict = {}

    def init() -> None:
        try:
            ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
            outcome["ok"] = True
        except Exception as e:  # handed to the driver's thread below
            outcome["error"] = e

    helper = threading.Thread(target=init, name="sdvg-ray-join", daemon=True)
    helper.start()
    helper.join(timeout)
    if "error" in outcome:
        e = outcome["error"]
        raise RayJoinError(f"could not join the Ray cluster at {address}: {e}\n  {NO_CLUSTER_HELP}\n  {RAY_AUTH_HELP}; "
                           f"RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE', 'unset')}") from e
    if "ok" not in outcome:
        raise RayJoinError(f"could not join the Ray cluster at {address}: no Ray head answered within {timeout:g} s "
                           f"(--ray-join-timeout); something else may listen there.\n  {NO_CLUSTER_HELP}")


def cluster_workers(address: str, workers: int | None, cpus: float, gpus: float) -> int:
    """Workers to run on the joined cluster (default: one per GPU, else one per CPU slot); refuses a worker size the
    cluster cannot hold."""
    import ray

    res = ray.cluster_resources()
    if gpus > res.get("GPU", 0) or cpus > res.get("CPU", 0):
        ray.shutdown()
        raise RayJoinError(f"a worker asks for {cpus} CPU and {gpus} GPU but the cluster at {address} has "
                           f"{res.get('CPU', 0)} CPU and {res.get('GPU', 0)} GPU")
    return workers or max(1, int(res.get("GPU", 0) // gpus) if gpus else int(res.get("CPU", 1) // cpus))


def start_local(workers: int | None, cpus: float, gpus: float, runtime_env: dict) -> int:
    """Start a Ray for this run on this machine; returns the number of workers (default: one per GPU or CPU slot)."""
    import ray
    import torch

    if gpus and not torch.cuda.device_count():
        raise RayJoinError(f"--gpus-per-worker {gpus} but this machine has no GPU: join a GPU cluster with "
                           f"--ray-address, or use --gpus-per-worker 0 --device cpu")
    slots = int(torch.cuda.device_count() / gpus) if gpus else int((os.cpu_count() or 1) // cpus)
    n = workers or max(1, slots)
    ray.init(num_cpus=max(1, math.ceil(n * cpus)), num_gpus=math.ceil(n * gpus), runtime_env=runtime_env,
             include_dashboard=False, log_to_driver=False)
    return n


def warn_if_imported_early(set_mode: str | None) -> None:
    """RAY_AUTH_MODE only counts when set before Ray's import."""
    if set_mode and "ray" in sys.modules:
        print("warning: Ray was imported before RAY_AUTH_MODE was set; set RAY_AUTH_MODE=token yourself",
              file=sys.stderr)
