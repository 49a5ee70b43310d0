"""Command-line SDVG generation: tiny random models by default, real model files when given.

    python -m sdvg_core.demo              # tiny default: out/demo/<date>-<time>/sdvg.mp4, report.json, report.png
    python -m sdvg_core.demo --drafter self_forcing_dmd.pt --target krea-realtime-video-14b.safetensors \
        --vae Wan2.1_VAE.pth --reward ImageReward.pt --embeddings prompt.safetensors --device cuda

Prints a per-block table; the report JSON holds every score, decision, forward count and phase time
(docs/report-json.md), and report.png plots the block scores against tau. Every flag and file is checked
before any model is loaded (the embeddings' width against the checkpoints' headers and the output folder too); a
usage or input error exits with status 2 and names every problem at once. Each run writes to a new dated folder
unless --out says where (an earlier run's outputs there are replaced only with --overwrite). Ctrl-C stops between
blocks: the video keeps the committed blocks (playable), their report is written, exit status 130; SIGTERM (kill,
timeout, systemd, docker stop) the same with exit status 143; an input video that cannot be read mid-run the same with
exit status 3 (docs/cli.md).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

from ..engine.engine import Engine, ProgressEvent
from ..engine.heap import HeapTrimmer
from ..derived.memo import TieredMemo
from ..engine.noise import NOISE_SOURCES, noise_source
from ..engine.plot import render_report_plot
from ..engine.policy import DEFAULT_TAU
from ..engine.policy_names import POLICY_KINDS, policy_arg
from ..engine.report import build_report, compiled_models
from ..engine.state import MAX_BLOCKS, SIZE_MULTIPLE, GenerationSpec, GenerationState, PromptConditioning, PromptSchedule
from ..given.request import PixelInput
from ..io.checkpoint import CheckpointError
from ..given.pixels import INPUT_UNREADABLE as UNREADABLE_CAUSE
from .cli_args import (TINY_DEMO_TAU, INPUT_UNREADABLE, REAL_BLOCKS, REAL_SIZE, TINY_BLOCKS, TINY_SIZE, USAGE_ERROR, add_compile_arg,
                       add_drafter_kind_args, add_recipe_args, run_engine_config, run_policy, stop_signals_raise,
                       stopped_by)
from ..io.drafters import DEFAULT_DRAFTER_KIND
from ..models.dtypes import DTYPES
from ..io.model_files import load_model_files
from .pixel_args import add_pixel_args, pixel_request
from .replay import add_replay_arg, apply_replay, read_replay
from .route_args import add_route_args, load_route_vae
from ..engine.prompt_schedule import encode_schedule, read_schedule
from ..io.text import UMT5Encoder, demo_embeddings, encode_umt5, load_embeddings
from .claim import FolderTaken, OutputClaim, claim_dated, claim_output
from .outputs import DEFAULT_ROOT, REPORT_JSON, REPORT_PNG, VIDEO_FORMATS, VIDEO_STEM, dated_folder
from .preflight import MODEL_FLAGS, needs, preflight
from .to_file import DeferredInterrupt, RunOutcome, generate_to_file
from .tiny import DEMO_PROMPT, tiny_models

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser(prog: str = "python -m sdvg_core.demo", description: str | None = __doc__) -> argparse.ArgumentParser:
    """The demo's flags (the calibration command adds its own to them)."""
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default=None, help="text prompt (default: the demo prompt, or the embeddings file's prompt)")
    p.add_argument("--out", default=None,
                   help=f"output folder for the video, report.json and report.png (default: a new folder "
                        f"{DEFAULT_ROOT}/<date>-<time> per run; a folder holding an earlier run's outputs is refused "
                        f"unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="let --out replace an earlier run's video and report")
    p.add_argument("--format", choices=list(VIDEO_FORMATS), default=VIDEO_FORMATS[0])
    p.add_argument("--width", type=int, default=None,
                   help=f"pixels, a multiple of {SIZE_MULTIPLE} (default {TINY_SIZE[0]} tiny, {REAL_SIZE[0]} real)")
    p.add_argument("--height", type=int, default=None,
                   help=f"pixels, a multiple of {SIZE_MULTIPLE} (default {TINY_SIZE[1]} tiny, {REAL_SIZE[1]} real)")
    p.add_argument("--blocks", type=int, default=None,
                   help=f"number of 3-latent-frame blocks, 1..{MAX_BLOCKS:,} (default {TINY_BLOCKS} tiny, "
                        f"{REAL_BLOCKS} real)")
    p.add_argument("--frames", type=int, default=None,
                   help="the video's length in frames instead of --blocks: (N - 1) // 4 + 1 latent frames, as "
                        "ComfyUI's video latents count them, in blocks of 3, the last one shorter where they do not "
                        "divide (81: 7 blocks; 25: 3 + 3 + 1 latent frames), as ComfyUI core's AR loop runs them. "
                        "A start image or an extension comes before them; video-to-video needs whole blocks")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--noise", choices=list(NOISE_SOURCES), default=NOISE_SOURCES[0],
                   help="seeded = SDVG's per-block draw; comfy_ar = ComfyUI core's AR sampler rule (whole-video noise "
                        "from the seed, each re-noise reseeded with seed + block * 1000 + step, on --device)")
    p.add_argument("--policy", type=policy_arg, default="sdvg", metavar="POLICY",
                   help="the routing policy, one of " + ", ".join(POLICY_KINDS) + " with its parameter after a colon: "
                        "sdvg:tau=-0.7 (ImageReward threshold, min over frames), sdvg-mean:tau=-0.7, target-only, "
                        "draft-only, accept-all (block 0 from the target, every other draft kept), random:p=0.73, "
                        "stride:k=2 (the StrideAR baseline: the target makes every k-th block, no scorer)")
    p.add_argument("--tau", type=float, default=None,
                   help=f"tau of an sdvg policy: accept a draft when its score >= tau (default {DEFAULT_TAU}; "
                        f"{TINY_DEMO_TAU} for the tiny models)")
    p.add_argument("--no-force-reject-first", action="store_true", help="let block 0 be drafted and accepted")
    add_recipe_args(p)
    add_pixel_args(p)
    add_replay_arg(p)
    p.add_argument("--decode-rule", choices=["standard", "krea"], default="standard",
                   help="standard = equal to a one-shot decode; krea = the VAE cache rule of the published runs")
    p.add_argument("--drafter", help="drafter checkpoint (Self-Forcing self_forcing_dmd.pt, Causal Forcing "
                                     "chunkwise/causal_forcing.pt, LongLive longlive_base.pt, or .safetensors)")
    add_drafter_kind_args(p, DEFAULT_DRAFTER_KIND)
    p.add_argument("--target", help="target checkpoint (krea-realtime-video-14b.safetensors)")
    p.add_argument("--vae", help="Wan 2.1 VAE (Wan2.1_VAE.pth or wan_2.1_vae.safetensors)")
    p.add_argument("--reward", help="ImageReward.pt")
    add_route_args(p)
    p.add_argument("--vocab", help="bert-base-uncased vocab.txt (default: next to --reward)")
    p.add_argument("--embeddings", help="prompt embeddings .safetensors (umT5 output, [1, 512, 4096])")
    p.add_argument("--prompt-schedule", metavar="FILE",
                   help="prompts that change between blocks: `block: prompt` lines, or a JSON list of "
                        "{\"block\": n, \"prompt\": ..., \"embeddings\": optional file}; the first entry starts at "
                        "block 0. Real models: --umt5 encodes each prompt unless its entry names an embeddings file")
    p.add_argument("--umt5", help="local umT5 folder (Hugging Face layout) to encode --prompt")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="DiT dtype (default bf16 on GPU, fp32 on CPU)")
    p.add_argument("--memo-gb", type=float, default=0.0,
                   help="GiB of derived data kept for re-runs in this process (default 0: one run reuses nothing "
                        "across runs; what the run itself needs is held apart from this budget)")
    add_compile_arg(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _real_models(a: argparse.Namespace, dtype: torch.dtype):
    """Load the real files (preflight has already checked that each one is there)."""
    needs_draft, needs_score = needs(a)
    m = load_model_files(target=a.target, vae=a.vae, drafter=a.drafter if needs_draft else None,
                         reward=a.reward if needs_score else None, vocab=a.vocab, dtype=dtype, device=a.device,
                         pt_entry=a.pt_entry, drafter_kind=a.drafter_kind,
                         drafter_lora=a.drafter_lora if needs_draft else None, drafter_lora_alpha=a.drafter_lora_alpha,
                         compile=a.compile)
    for line in m.notes:
        print(line)
    return m.drafter, m.target, m.vae, m.scorer


def _schedule(a: argparse.Namespace, text_dim: int, real: bool) -> PromptSchedule[PromptConditioning]:
    """The prompt schedule: the --prompt-schedule file's entries (each encoded with --umt5, read from its own
    embeddings file, or given the tiny demo's stand-in embeddings), else the one prompt from block 0."""
    if not a.prompt_schedule:
        return PromptSchedule.one(_prompt(a, text_dim, real))
    if real:
        encode = UMT5Encoder(a.umt5, device=a.device, on_cut=_say_cut) if a.umt5 else None
    else:
        encode = lambda text: demo_embeddings(text, text_dim)  # noqa: E731 (the tiny stand-in of umT5)
    return encode_schedule(read_schedule(a.prompt_schedule), encode, load=lambda p: load_embeddings(p)[1])


def _prompt(a: argparse.Namespace, text_dim: int, real: bool) -> PromptConditioning:
    if a.embeddings:
        stored, emb = load_embeddings(a.embeddings)
        return PromptConditioning.make(a.prompt or stored, emb)
    text = a.prompt or DEMO_PROMPT
    if a.umt5:
        return PromptConditioning.make(text, encode_umt5(a.umt5, text, device=a.device, on_cut=_say_cut))
    return PromptConditioning.make(text, demo_embeddings(text, text_dim))


def _say_cut(note: str) -> None:
    """umT5 cut a prompt at Wan's 512 tokens: said once per prompt, before the run."""
    print(f"note: {note}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (status 2) or --help (0)
        return e.code if isinstance(e.code, int) else USAGE_ERROR
    real = any(getattr(a, k) for k in MODEL_FLAGS)
    out = Path(a.out) if a.out else dated_folder()
    a.live = None
    if a.replay:
        try:
            a.live = read_replay(a.replay)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return USAGE_ERROR
        for flag in apply_replay(a, a.live):
            print(f"note: {flag} is the recorded run's: --replay runs it as it was", file=sys.stderr)
        if real and not a.umt5 and len(a.live.timeline.prompts) > 1:
            print("error: --replay of a run with several prompts needs --umt5 to encode them", file=sys.stderr)
            return USAGE_ERROR
    problems = preflight(a, real, out)
    if problems:
        mode = "real-model mode" if real else "the tiny default"
        print(f"error: {len(problems)} problem(s) with the arguments ({mode}); nothing was loaded:\n  - "
              + "\n  - ".join(problems)
              + ("\n(omit every model flag, --drafter --target --vae --reward, to run the tiny embedded default)"
                 if real else ""), file=sys.stderr)
        return USAGE_ERROR
    for note in getattr(a, "pixel_notes", ()):  # e.g. a picture's transparency: said once, before anything loads
        print(f"note: {note}", file=sys.stderr)
    try:  # before any model loads: one run per folder (demo/claim.py)
        claim = claim_output(out, overwrite=a.overwrite) if a.out else claim_dated(dated_folder)
    except FolderTaken as e:
        print(f"error: {e}", file=sys.stderr)
        return USAGE_ERROR
    with claim.held():
        try:
            with stop_signals_raise():
                engine, state, policy, size = _build(a, real)
        except (CheckpointError, ValueError, FileNotFoundError, RuntimeError) as e:
            print(f"error: {e}", file=sys.stderr)
            return USAGE_ERROR
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP
            what, code = stopped_by(e)
            print(f"{what} while loading the models; nothing was written", file=sys.stderr)
            return code
        return _run(a, real, claim, engine, state, policy, size)


def _build(a: argparse.Namespace, real: bool) -> tuple[Engine, GenerationState, object, tuple[int, int]]:
    """Load the models, make the engine and the policy, and start the run once (the given pixels are checked against
    the recipes and encoded here, before any block)."""
    dtype = DTYPES[a.dtype] if a.dtype else (torch.bfloat16 if a.device != "cpu" else torch.float32)
    if real:
        drafter, target, vae, scorer = _real_models(a, dtype)
        size, blocks = REAL_SIZE, REAL_BLOCKS
    else:
        torch.set_num_threads(1)  # tiny models: threads only add overhead
        m = tiny_models(seed=0, compile=a.compile)
        drafter, target, vae, scorer = m.drafter, m.target, m.vae, m.scorer
        size, blocks = TINY_SIZE, TINY_BLOCKS
    width, height = a.width or size[0], a.height or size[1]
    pixels = getattr(a, "pixel_input", None)  # built by the checks (preflight): the file is not read again
    if pixels is None and pixel_request(a) is not None:
        pixels = pixel_request(a).pixel_input()
    if getattr(a, "live", None) is None:
        schedule = _schedule(a, target.cfg.text_dim, real)
    else:  # a replay: block 0's recorded prompt and input; each later block's settings come at its boundary
        encode = _encoder(a, target.cfg.text_dim, real)
        tl = a.live.timeline
        text = tl.prompts[tl.blocks[0].prompt]
        schedule = PromptSchedule.one(PromptConditioning.make(text, encode(text)))
        source = a.live.source()
        if source is not None:
            pixels = PixelInput("video_to_video", source, tl.blocks[0].strength)
    if getattr(a, "frames", None) is not None:  # the last block may be shorter (GenerationSpec.for_frames)
        spec = GenerationSpec.for_frames(schedule, width, height, a.frames, a.seed, pixels=pixels)
    else:
        spec = GenerationSpec(schedule, width, height, a.blocks or blocks, a.seed, pixels=pixels)
    config = run_engine_config(a, real)
    noise = noise_source(a.noise, spec, target.cfg.in_dim, config.num_renoise, a.device)
    engine = Engine(target, vae, drafter, scorer, config, noise_fn=noise, memo=TieredMemo.split(int(a.memo_gb * 2**30)),
                    route_vae=load_route_vae(a, a.device))
    state = engine.start(spec)
    policy = run_policy(a, real)
    if getattr(a, "live", None) is not None:
        recorded = a.live.timeline.run.get("models") or {}
        differ = [role for role, key in recorded.items() if engine.model_keys.get(role) != key]
        if differ:
            print(f"note: the replay's {', '.join(differ)} are not the recorded run's models (by their identity): the "
                  f"video is the same only with the same weights", file=sys.stderr)
        a.live_run = a.live.live_run(engine, encode)
        policy = a.live_run.first_policy(state)
    return engine, state, policy, (width, height)


def _encoder(a: argparse.Namespace, text_dim: int, real: bool):
    """Prompt text -> embeddings as the demo encodes: umT5 (--umt5) for real models, the tiny stand-in otherwise."""
    if real:
        if a.umt5:
            return UMT5Encoder(a.umt5, device=a.device)
        stored_text, emb = load_embeddings(a.embeddings)
        return lambda text: emb
    return lambda text: demo_embeddings(text, text_dim)


def _progress_bar(engine: Engine, total: int):
    """A tqdm bar over the blocks, fed by the engine's progress events."""
    from tqdm import tqdm

    bar = tqdm(total=total, unit="block", desc="SDVG")

    def progress(ev: ProgressEvent) -> None:
        if ev.kind == "step":
            bar.set_postfix_str(f"block {ev.block} {ev.role} step {ev.step}/{ev.num_steps}", refresh=False)
        elif ev.kind == "block":
            bar.update(1)
            bar.set_postfix_str(f"block {ev.block} -> {ev.record.producer} ({ev.record.decision})")

    engine.callbacks.progress = progress
    return bar


def _run(a: argparse.Namespace, real: bool, claim: OutputClaim, engine: Engine, start: GenerationState, policy,
         size: tuple[int, int]) -> int:
    """Generate into the claimed folder from the started state (each block's frames go to the file as it commits: a
    long video never sits in memory), then write the report and plot of what was committed; the files are written
    beside their names and moved into place when complete. Ctrl-C: the same for the blocks committed so far."""
    spec = start.spec
    out = claim.folder
    print(f"writing to {out}/", file=sys.stderr, flush=True)
    bar = None if a.quiet else _progress_bar(engine, spec.num_blocks)
    with DeferredInterrupt() as guard:
        live = getattr(a, "live_run", None)
        outcome = generate_to_file(engine, start, policy, claim.staged(f"{VIDEO_STEM}.{a.format}"), guard,
                                   HeapTrimmer(), boundary=None if live is None else live.boundary)
        if live is not None and outcome.state is not None:
            live.settle(outcome.state)
        if bar is not None:
            bar.close()
        state = outcome.state
        stop = stopped_by(outcome.signal_exc) if outcome.signal_exc is not None else None
        if state is None or not state.blocks:
            if stop is not None:
                print(f"{stop[0]} at block 0 of {spec.num_blocks}, before any block was committed; nothing was "
                      f"written", file=sys.stderr)
                return stop[1]
            print(f"error: {state.stopped}; nothing was written", file=sys.stderr)
            return INPUT_UNREADABLE if state.stop_cause == UNREADABLE_CAUSE else USAGE_ERROR
        report, paths = _write_report(a, real, claim.staging, spec, outcome, policy, engine, size)
        claim.publish()  # video, report.json, report.png: each complete, each moved into place with one rename
        paths, outcome = tuple(map(claim.final, paths)), replace(outcome, video=claim.final(outcome.video))
        print(report.table())
        kept = (f"{outcome.committed} block(s) committed and written to {outcome.video} ({outcome.frames} frames, "
                f"playable); their report: {paths[0]} and {paths[1]}")
        if stop is not None:
            print(f"{stop[0]} at block {outcome.interrupted_at} of {spec.num_blocks}: {kept}", file=sys.stderr)
            return stop[1]
        if state.stop_cause == UNREADABLE_CAUSE:  # one message, the files finished, a status of its own
            print(f"error: {state.stopped}: {kept}", file=sys.stderr)
            return INPUT_UNREADABLE
        if state.stopped is not None:
            print(f"note: {state.stopped}", file=sys.stderr)
        print(f"wrote {outcome.video} ({outcome.frames} frames, {size[0]}x{size[1]}), {paths[0]} and {paths[1]}")
        if not real:
            print("note: the tiny models have random weights, so the video is noise; the table, report.json and "
                  "report.png show what SDVG decided and what it cost")
    return 0


def _write_report(a: argparse.Namespace, real: bool, out: Path, spec: GenerationSpec, outcome: RunOutcome, policy,
                  engine: Engine, size: tuple[int, int]):
    """report.json and report.png of the committed blocks; (report, (json path, png path))."""
    prompts = spec.schedule
    meta = {"prompt": prompts.first.text if len(prompts) == 1 else " | ".join(f"{b}: {p.text}" for b, p in prompts),
            "size": f"{size[0]}x{size[1]}", "seed": str(a.seed),
            "models": "real" if real else "tiny random (embedded default)", "decode_rule": a.decode_rule,
            "frames": str(outcome.frames), "lineage": outcome.state.lineage}
    if outcome.interrupted_at is not None:
        meta.update(interrupted_at_block=str(outcome.interrupted_at), blocks_requested=str(spec.num_blocks))
    if spec.pixels is not None:
        meta["pixels"] = pixel_request(a).describe()
    report = build_report(outcome.state, policy, engine.recipe, engine.plan_for(spec).num_steps,
                          wall_seconds=outcome.wall_seconds, meta=meta, drafter_recipe=engine.recipes["drafter"],
                          compiled=compiled_models(engine.target, engine.drafter),
                          route_decoder=engine.route_decoder, output_decoder=engine.output_decoder,
                          live=None if getattr(a, "live_run", None) is None else a.live_run.timeline.to_dict())
    (out / REPORT_JSON).write_text(report.to_json())
    render_report_plot(report).save(out / REPORT_PNG)
    return report, (out / REPORT_JSON, out / REPORT_PNG)


if __name__ == "__main__":
    raise SystemExit(main())
