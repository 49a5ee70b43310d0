"""The sweep driver: plan (prompt, seed) units, skip finished rows, run them in-process or on Ray actors,
append each row as soon as it comes back, re-queue the unfinished configs of a unit whose worker died."""
from __future__ import annotations

import json
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .config import MAX_UNIT_RETRIES, SweepConfig
from .metrics import MetricOptions
from .records import Appender
from .worker import ModelSetup, Unit, UnitRunner

WORKERS_FILE = "workers.json"  # worker name -> {pid, gpus, device} (for operators and the kill-and-resume test)


@dataclass(frozen=True)
class RunnerArgs:
    """What every worker is built from (the same in-process and on Ray)."""

    setup: ModelSetup
    metrics: list[str]
    out: Path
    save_videos: bool = False
    run_fp: str = ""
    share_memo: bool = True
    metric_options: MetricOptions = MetricOptions()

    def args(self, name: str) -> tuple:
        return (self.setup, self.metrics, str(self.out), self.save_videos, self.run_fp, name, self.share_memo,
                self.metric_options)


@dataclass
class Job:
    """A unit and the configs still to run on it; `tries` counts worker deaths it has seen."""

    unit: Unit
    configs: list[str]
    tries: int = 0


def plan(units: list[Unit], configs: list[SweepConfig], done: set[tuple[str, int, int]]) -> list[Job]:
    """Jobs for every unit with at least one (config, prompt, seed) row not yet in the results."""
    jobs = []
    for u in units:
        todo = [c.name for c in configs if (c.name, u.prompt_id, u.seed) not in done]
        if todo:
            jobs.append(Job(u, todo))
    return jobs


@dataclass
class SweepOutcome:
    rows: int = 0
    failed: list[str] = None
    worker_deaths: int = 0

    def __post_init__(self):
        self.failed = self.failed or []


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_local(jobs: list[Job], ra: RunnerArgs, appender: Appender,
              on_row: Callable[[dict], None] | None = None) -> SweepOutcome:
    """Single process, no Ray: one runner, the jobs in order (the path the bit-for-bit tests compare against)."""
    res = SweepOutcome()
    if not jobs:
        return res
    runner = UnitRunner(*ra.args("main"))
    (ra.out / WORKERS_FILE).write_text(json.dumps({"main": runner.info()}))
    for job in jobs:
        for c in job.configs:
            row = runner.run_config(job.unit, c)
            appender.write(row)
            res.rows += 1
            if on_row:
                on_row(row)
    return res


def run_ray(jobs: list[Job], ra: RunnerArgs, appender: Appender, workers: int, cpus_per_worker: float,
            gpus_per_worker: float, on_row: Callable[[dict], None] | None = None) -> SweepOutcome:
    """One actor per worker slot loads the models once; each gets one unit at a time (its configs in order)."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    res = SweepOutcome()
    if not jobs:
        return res
    Actor = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)(UnitRunner)
    queue = deque(jobs)
    counter = iter(range(1 << 30))

    def new_actor():
        name = f"w{next(counter)}"
        return name, Actor.remote(*ra.args(name))

    actors = dict(new_actor() for _ in range(min(workers, len(jobs))))
    out = ra.out
    pids = {}
    for name, a in actors.items():
        try:
            pids[name] = ray.get(a.info.remote())
        except RayActorError as e:  # a worker that cannot even load the models: the run cannot go on
            raise RuntimeError(f"worker {name} failed to start: {e}") from e
    (out / WORKERS_FILE).write_text(json.dumps(pids))
    inflight: dict = {}  # ref -> (actor name, job, config)
    busy: dict[str, list] = {n: [] for n in actors}

    def assign(name: str) -> None:
        if not queue:
            return
        job = queue.popleft()
        for c in job.configs:
            ref = actors[name].run_config.remote(job.unit, c)
            inflight[ref] = (name, job, c)
            busy[name].append(ref)

    for n in list(actors):
        assign(n)
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1)
        ref = ready[0]
        name, job, c = inflight.pop(ref)
        try:
            row = ray.get(ref)
        except RayActorError:
            # the worker died: every config of its unit not yet written goes back to the queue once
            lost = [c] + [inflight.pop(r)[2] for r in busy[name] if r in inflight]
            res.worker_deaths += 1
            _say(f"worker {name} died; {len(lost)} config(s) of prompt {job.unit.prompt_id} seed {job.unit.seed} "
                 f"{'re-queued' if job.tries < MAX_UNIT_RETRIES else 'given up (re-run the command to retry)'}")
            if job.tries < MAX_UNIT_RETRIES:
                queue.append(Job(job.unit, lost, job.tries + 1))
            else:
                res.failed += [f"{x} prompt {job.unit.prompt_id} seed {job.unit.seed}" for x in lost]
            del actors[name], busy[name]
            if queue:
                n2, a2 = new_actor()
                actors[n2], busy[n2] = a2, []
                try:
                    pids[n2] = ray.get(a2.info.remote())
                    (out / WORKERS_FILE).write_text(json.dumps(pids))
                except RayActorError as e:
                    raise RuntimeError(f"replacement worker {n2} failed to start: {e}") from e
                assign(n2)
            continue
        except RayTaskError as e:  # the code raised: deterministic, so not retried
            res.failed.append(f"{c} prompt {job.unit.prompt_id} seed {job.unit.seed}: {e}")
            _say(f"error in {c} prompt {job.unit.prompt_id}: {e}")
            row = None
        busy[name].remove(ref)
        if row is not None:
            appender.write(row)
            res.rows += 1
            if on_row:
                on_row(row)
        if not busy[name]:
            assign(name)
    for a in actors.values():
        ray.kill(a)
    return res
