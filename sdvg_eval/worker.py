"""One worker: loads the models once and runs (prompt, seed) units, every config of a unit over one shared memo.

Used in-process (`--workers 0`) and as the body of each Ray actor, so both paths compute the same rows.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import torch

from sdvg_core.engine.config import DEFAULT_MEMO_BYTES, EngineConfig
from sdvg_core.engine.engine import Engine
from sdvg_core.engine.heap import HeapTrimmer
from sdvg_core.derived.memo import TieredMemo
from sdvg_core.engine.report import build_report, compile_backend, recipe_label
from sdvg_core.engine.state import GenerationSpec, PromptConditioning, PromptSchedule
from sdvg_core.demo.pixel_args import PixelRequest
from sdvg_core.engine.prompt_schedule import PromptSource
from sdvg_core.models.dtypes import DTYPES  # also the --dtype choices of eval.py

from .config import parse_config
from .metrics import MetricOptions, build_metric

WARMUP_BLOCKS = 2  # the shortest generation (block 0 from the target, one routed block): runs every kernel once

@dataclass(frozen=True)
class ModelSetup:
    """Which models and geometry a worker loads: the tiny embedded models or real files (as in the demo CLI)."""

    tiny: bool = True
    drafter: str | None = None
    target: str | None = None
    vae: str | None = None
    reward: str | None = None
    vocab: str | None = None
    pt_entry: str | None = None  # .pt entry of the drafter; None: its kind's (io/drafters.py)
    drafter_kind: str | None = None  # io/drafters.py kind of the drafter file (None: self_forcing)
    drafter_lora: str | None = None  # peft LoRA merged into the drafter at load (LongLive: lora.pt)
    drafter_lora_alpha: float | None = None  # None: the kind's alpha (LongLive 256), else the LoRA's rank
    device: str = "cpu"
    dtype: str = "fp32"
    width: int = 96
    height: int = 64
    blocks: int = 6
    recipe: str = "krea"  # both roles' context recipe unless a role has its own below
    drafter_recipe: str | None = None  # resolved by the driver (eval.py: --drafter-recipe, a LongLive drafter's own)
    target_recipe: str | None = None
    decode_rule: str = "standard"
    memo_bytes: int = DEFAULT_MEMO_BYTES
    threads: int = 1  # torch intra-op threads per worker on CPU (tiny models gain nothing from more)
    needs_drafter: bool = True
    needs_scorer: bool = True
    compile: bool | str = False  # both DiTs' CausalWan(compile=...): True = inductor, a string = another backend
    route_vae: str | None = None  # the tiny routing decoder of @route / @calibrate configs: a file, or "tiny"

    def role_recipes(self) -> dict[str, str]:
        """Each role's context recipe name: its own when set, else `recipe` (EngineConfig's rule)."""
        return {"drafter": self.drafter_recipe or self.recipe, "target": self.target_recipe or self.recipe}

    def engine_config(self) -> EngineConfig:
        """The workers' EngineConfig: the target's recipe as both roles' default, the drafter's when it differs
        (the published pairing, Krea for both, stays the one-recipe config it always was)."""
        r = self.role_recipes()
        return EngineConfig.for_run(r["target"], r["drafter"], decode_rule=self.decode_rule, memo_bytes=self.memo_bytes)

    def identity(self) -> dict[str, str]:
        """What makes two runs' rows comparable: model files (path, size, mtime) or tiny seeds, how the drafter
        file is read (kind, entry, LoRA file and alpha), each role's recipe, the geometry, and the kind of device
        (CPU and GPU kernels give other numbers), and whether the DiTs are compiled (with which backend)."""
        from sdvg_core.io.checkpoint import file_identity
        from sdvg_core.io.drafters import drafter_kind

        models = {"models": "tiny random (sdvg_core.demo.tiny, seed 0)"} if self.tiny else {
            k: file_identity(v) for k in ("drafter", "target", "vae", "reward") if (v := getattr(self, k))}
        if not self.tiny and self.drafter:
            kind = drafter_kind(self.drafter_kind)
            models.update(drafter_kind=kind.name, pt_entry=self.pt_entry or kind.default_entry,
                          drafter_lora=file_identity(self.drafter_lora) if self.drafter_lora else "none",
                          drafter_lora_alpha="kind default" if self.drafter_lora_alpha is None
                          else repr(float(self.drafter_lora_alpha)))
        r = self.role_recipes()
        # compiled kernels may round differently from eager ones (and time differently): rows are never mixed
        if self.route_vae:  # a tiny decoder's scores are its own: rows of two decoders are never mixed
            models["route_vae"] = self.route_vae if self.route_vae == "tiny" else file_identity(self.route_vae)
        return {**models, "compiled": compile_backend(self) or "no", "dtype": self.dtype,
                "size": f"{self.width}x{self.height}", "blocks": str(self.blocks), "drafter_recipe": r["drafter"], "target_recipe": r["target"],
                "decode_rule": self.decode_rule, "device": self.device.split(":")[0]}


@dataclass(frozen=True)
class Unit:
    """A (prompt, seed) task: every config of the sweep runs on it over one shared memo.

    `schedule`: the prompts by first block, each with its embeddings file (one entry: one prompt for the whole
    video)."""

    prompt_id: int
    seed: int
    schedule: PromptSchedule[PromptSource]
    pixels: PixelRequest | None = None  # given pixels the prompt's row names (docs/pixels.md, evaluation rows)

    @property
    def label(self) -> str:
        """The prompt as rows show it: its text, or a schedule in its file's `block: prompt` form, ' | ' between;
        given pixels as the row names them after ' || '."""
        if len(self.schedule) == 1:
            text = self.schedule.first.text
        else:
            text = " | ".join(f"{b}: {src.text}" for b, src in self.schedule)
        return text if self.pixels is None else f"{text} || {self.pixels.describe()}"


def load_models(s: ModelSetup):
    """(drafter, target, vae, scorer) for the setup; every model carries the `.key` the engine's memo needs."""
    if s.tiny:
        from sdvg_core.demo.tiny import tiny_models

        m = tiny_models(seed=0, compile=s.compile)
        return m.drafter, m.target, m.vae, m.scorer
    from sdvg_core.io.model_files import load_model_files

    draft = s.needs_drafter and bool(s.drafter)
    m = load_model_files(target=s.target, vae=s.vae, drafter=s.drafter if draft else None,
                         reward=s.reward or None, vocab=s.vocab, dtype=DTYPES[s.dtype], device=s.device,
                         pt_entry=s.pt_entry, drafter_kind=s.drafter_kind,
                         drafter_lora=s.drafter_lora if draft else None, drafter_lora_alpha=s.drafter_lora_alpha,
                         compile=s.compile)
    return m.drafter, m.target, m.vae, m.scorer


def load_route_vae(s: ModelSetup):
    """The tiny routing decoder of the setup (None without one), in the VAE's dtype for the device."""
    if not s.route_vae:
        return None
    from sdvg_core.demo.route_args import TINY_ROUTE, TINY_ROUTE_SEED

    if s.route_vae == TINY_ROUTE:
        from sdvg_core.demo.tiny_taehv import tiny_taehv

        return tiny_taehv(TINY_ROUTE_SEED, device=s.device)
    from sdvg_core.io.checkpoint import load_taehv
    from sdvg_core.io.model_files import vae_dtype_for

    return load_taehv(s.route_vae, device=s.device, dtype=vae_dtype_for(s.device))


def frames_digest(frames: torch.Tensor) -> str:
    """Content hash of the output frames (float32 bytes): equal digests = bit-identical videos."""
    c = frames.detach().to("cpu", torch.float32).contiguous()
    return hashlib.blake2b(c.numpy().tobytes(), digest_size=16).hexdigest()


def prompt_segments(spec: GenerationSpec, block_lengths: list[int]) -> list[tuple[int, int, str]]:
    """(first frame, end frame, prompt text) of each prompt-schedule segment, from each block's frame count."""
    out: list[list] = []
    start = 0
    for b, n in enumerate(block_lengths):
        if out and spec.segment_of(b) == spec.segment_of(b - 1):
            out[-1][1] = start + n
        else:
            out.append([start, start + n, spec.prompt_at(b).text])
        start += n
    return [tuple(x) for x in out]


def score_segments(metric, frames: torch.Tensor, segments: list[tuple[int, int, str]]) -> float:
    """A metric over a video whose prompt changes: each segment's frames scored against its own prompt, the
    scores averaged weighted by frames (for per-frame means, ImageReward and CLIP, this is the mean over all
    frames of each frame's score against its own prompt). One segment: the metric itself, unchanged."""
    if len(segments) == 1:
        return metric.score(frames, segments[0][2])
    total = sum(b - a for a, b, _ in segments)
    return sum(metric.score(frames[a:b], text) * (b - a) for a, b, text in segments) / total


def block_columns(num_blocks: int) -> list[str]:
    """s1..sK (draft score) and b1..bK (1 = draft accepted) for blocks 1..K, K = blocks - 1 (block 0 is forced)."""
    k = range(1, num_blocks)
    return [f"s{i}" for i in k] + [f"b{i}" for i in k]


class UnitRunner:
    """Holds the models and the metrics; `run_config` makes one row, sharing the memo within the current unit.

    With `share_memo=False` (--fresh-timing) every config gets its own memo, and the worker first runs one
    short generation so the first measured row does not pay for one-time start-up work (kernel selection,
    allocator growth) that later rows do not."""

    def __init__(self, setup: ModelSetup, metric_specs: list[str], out_dir: str, save_videos: bool = False,
                 run_fp: str = "", worker_name: str = "main", share_memo: bool = True,
                 metric_options: MetricOptions = MetricOptions()):
        if setup.device == "cpu":
            torch.set_num_threads(setup.threads)
        self.setup, self.out_dir, self.save_videos, self.run_fp = setup, Path(out_dir), save_videos, run_fp
        self.worker_name, self.share_memo = worker_name, share_memo
        self.drafter, self.target, self.vae, self.scorer = load_models(setup)
        self.route_vae = load_route_vae(setup)
        self.metrics = [(spec, build_metric(spec, self.scorer, setup.device, metric_options))
                        for spec in metric_specs]
        self.engine_config = setup.engine_config()
        self._unit: Unit | None = None
        self._memo: TieredMemo | None = None
        self.warmed_up = False
        self.trimmer = HeapTrimmer()  # the heap's free pages go back to the OS as blocks go by (engine/heap.py)
        if not share_memo:
            self._warm_up()

    def _warm_up(self) -> None:
        """One target-only generation of WARMUP_BLOCKS blocks at the sweep's size, on a private memo, discarded."""
        from sdvg_core.engine.policy_names import policy_by_name
        from sdvg_core.io.text import WAN_TEXT_LEN

        s = self.setup
        emb = torch.zeros(1, WAN_TEXT_LEN, self.target.cfg.text_dim)  # the prompts' shape (umT5 pads to 512)
        spec = GenerationSpec(PromptConditioning.make("", emb), s.width, s.height, WARMUP_BLOCKS, 0)
        engine = Engine(self.target, self.vae, None, None, self.engine_config, memo=TieredMemo(s.memo_bytes))
        engine.frames(engine.generate(spec, policy_by_name("target-only")))
        self.warmed_up = True

    def pid(self) -> int:
        """This worker's process id (tests kill it to prove resume)."""
        return os.getpid()

    def info(self) -> dict:
        """Process id and the GPUs this worker was given (Ray's assignment; CUDA_VISIBLE_DEVICES otherwise)."""
        gpus: list = []
        try:
            import ray

            if ray.is_initialized():
                gpus = [str(g) for g in ray.get_gpu_ids()]
        except ImportError:
            pass
        if not gpus and os.environ.get("CUDA_VISIBLE_DEVICES"):
            gpus = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        return {"pid": os.getpid(), "gpus": gpus, "device": self.setup.device, "warmed_up": self.warmed_up}

    def _memo_for(self, unit: Unit) -> TieredMemo:
        """The unit's shared memo: threshold configs of one (prompt, seed) reuse their common prefix.

        Without `share_memo` every config gets a fresh memo, so its measured seconds are a fresh run's."""
        if self._unit != unit or not self.share_memo:
            self._unit, self._memo = unit, TieredMemo(self.setup.memo_bytes)
        return self._memo

    def run_config(self, unit: Unit, config_name: str) -> dict:
        """Generate the video of one (config, prompt, seed), score it with every metric -> one CSV row."""
        from .prompts import load_cached
        from .metrics import metric_name

        cfg = parse_config(config_name)
        s = self.setup
        schedule = unit.schedule.map(lambda src: PromptConditioning.make(src.text, load_cached(src.embeddings)))
        spec = GenerationSpec(schedule, s.width, s.height, s.blocks, unit.seed,
                              pixels=unit.pixels.pixel_input() if unit.pixels is not None else None)
        policy = cfg.policy(unit.prompt_id, unit.seed)
        memo = self._memo_for(unit)
        engine = Engine(self.target, self.vae, self.drafter if cfg.needs_drafter else None,
                        self.scorer if cfg.needs_scorer else None, self.engine_config, memo=memo,
                        route_vae=self.route_vae if cfg.router == "route" else None)
        # each config is its own execution: results an earlier config left in the shared memo are an earlier
        # run's (its seconds are then not a fresh run's), results of this config's own earlier blocks are not
        run_id = engine.callbacks.run_id = f"{self.worker_name}:{cfg.name}:{unit.prompt_id}:{unit.seed}:{uuid.uuid4().hex}"
        t0 = time.perf_counter()
        paired = None
        if cfg.router == "calibrate":  # the VAE routes; each draft is also decoded and scored by the tiny decoder
            from sdvg_core.engine.calibration_run import paired_scores

            tiny = Engine(self.target, self.vae, self.drafter, self.scorer, self.engine_config, memo=memo,
                          route_vae=self.route_vae)
            tiny.callbacks.run_id = run_id
            state, paired = paired_scores(engine, tiny, spec, policy)
        else:
            state = engine.generate(spec, policy, on_block=lambda eng, st: self.trimmer.block_done())
        if schedule.switches:  # engine.frames, keeping where each block's frames start (segments are scored apart)
            parts = [engine.block_frames(state, b) for b in range(len(state.blocks))]
            frames = torch.cat(parts)
        else:
            frames = engine.frames(state)
        wall = time.perf_counter() - t0
        rep = build_report(state, policy, engine.recipe, engine.plan_for(spec).num_steps, wall_seconds=wall,
                           run_id=run_id, drafter_recipe=engine.recipes["drafter"])
        # the paper's record: config, prompt (the prompt's index in the prompt file), vr, time_s, s1..s8, b1..b8
        row: dict = {"config": cfg.name, "prompt": unit.prompt_id, "seed": unit.seed}
        segments = (prompt_segments(spec, [f.shape[0] for f in parts]) if schedule.switches
                    else [(0, frames.shape[0], schedule.first.text)])
        for spec_str, metric in self.metrics:
            row[metric_name(spec_str)] = score_segments(metric, frames, segments)
        computed_cost = rep.recomputed_drafter_forwards + rep.cost_ratio * rep.recomputed_target_forwards
        row.update(time_s=wall, fresh_time=int(rep.fresh_run), counted_cost=rep.counted_cost,
                   target_only_cost=rep.target_only_cost, counted_speedup=rep.counted_speedup,
                   drafter_forwards=rep.drafter_forwards, target_forwards=rep.target_forwards,
                   computed_drafter_forwards=rep.recomputed_drafter_forwards,
                   computed_target_forwards=rep.recomputed_target_forwards, computed_cost=computed_cost,
                   acceptance=rep.acceptance_blocks_1_to_n if rep.acceptance_blocks_1_to_n is not None else "")
        for b in state.blocks[1:]:
            row[f"s{b.index}"] = "" if b.score is None else b.score  # min or mean over frames, per the policy
            row[f"b{b.index}"] = int(b.decision == "accepted")
        row["frames_digest"] = frames_digest(frames)
        row["video"] = ""
        if self.save_videos:
            from sdvg_core.io.video import write_video

            safe = cfg.name.replace(":", "_")
            row["video"] = str(write_video(frames, self.out_dir / "videos" / f"{safe}_p{unit.prompt_id}_s{unit.seed}.mp4"))
        row.update(worker=self.worker_name, run=self.run_fp,
                   recipe=recipe_label(engine.recipes["target"], engine.recipes["drafter"]), prompt_text=unit.label)
        if self.route_vae is not None:  # records.ROUTE_COLUMNS
            row["route_decoder"] = engine.route_decoder
            row["paired"] = "" if paired is None else json.dumps(
                {"decoder": tiny.route_decoder, "pairs": [[p.reference, p.candidate] for p in paired]})
        return row

