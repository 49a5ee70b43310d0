"""The flags and checks both command lines share: the demo (`python -m sdvg_core.demo`) and the evaluation
(`python -m sdvg_eval`). Defaults of the video's size and length, the exit statuses, the recipe and drafter-file
flags, and the checks made before anything loads (recipes, block count, output folder)."""
from __future__ import annotations

import argparse
import os
import signal
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from ..engine.config import EngineConfig
from ..engine.policy import DEFAULT_TAU, Policy
from ..engine.policy_names import parse_policy
from ..engine.recipes import RECIPE_NAMES, recipe_arg, recipe_by_name
from ..engine.state import MAX_BLOCKS, GenerationSpec, PromptConditioning, blocks_for, latent_frames_for
from ..io.drafters import DEFAULT_DRAFTER_KIND, DRAFTER_KINDS, FRAMEWISE_KIND

# Tiny-model defaults: small enough for a CPU in seconds (the real models use 832x480 and 9 blocks).
TINY_SIZE = (96, 64)
TINY_BLOCKS = 6
REAL_SIZE = (832, 480)  # Self-Forcing / Krea / SDVG paper resolution
REAL_BLOCKS = 9  # SDVG paper: 9 blocks = 27 latent frames
# The tiny random ImageReward's rewards are not on the real model's scale: at the paper's tau = -0.7
# it rejects every draft of the demo prompt. -0.8 lets the demo show both outcomes (1 of 5 rejected).
TINY_DEMO_TAU = -0.8
DEFAULT_FRAMES_PER_BLOCK = 3  # latent frames per block of the command lines' models (Self-Forcing / Krea: chunk-wise)
USAGE_ERROR = 2  # exit status of every usage or input error (argparse's own convention)
INPUT_UNREADABLE = 3  # the demo's exit status when the input video could not be read mid-run (the blocks before stay)
INTERRUPTED = 128 + signal.SIGINT  # 130: exit status after Ctrl-C (128 + the signal, the shell's convention)
TERMINATED = 128 + signal.SIGTERM  # 143: after SIGTERM (kill, timeout, systemd, docker stop), handled as Ctrl-C
HANGUP = getattr(signal, "SIGHUP", None)  # a closed terminal or a dropped ssh session (none on Windows)
HUNG_UP = 128 + (HANGUP or 1)  # 129: after SIGHUP, handled as SIGTERM
PROBE_PREFIX = ".sdvg-write-probe-"  # the file the output-folder check creates and removes at once


def add_recipe_args(p: argparse.ArgumentParser) -> None:
    """--recipe / --drafter-recipe / --target-recipe: a context recipe per model (the demo, sdvg_eval)."""
    names = f"{', '.join(RECIPE_NAMES)}; parameters after a colon, e.g. longlive:window=15,sink=3"
    p.add_argument("--recipe", type=recipe_arg, default="krea",
                   help=f"context recipe of both models (krea: the published SDVG pairing; {names})")
    p.add_argument("--drafter-recipe", type=recipe_arg, default=None,
                   help="the drafter's own recipe (default: --recipe; a LongLive drafter: longlive)")
    p.add_argument("--target-recipe", type=recipe_arg, default=None,
                   help="the target's own recipe (default: --recipe)")


def add_compile_arg(p: argparse.ArgumentParser) -> None:
    """--compile [BACKEND]: build the DiTs with CausalWan(compile=...) (the demo, sdvg_eval, the benchmarks)."""
    p.add_argument("--compile", nargs="?", const=True, default=False, metavar="BACKEND",
                   help="torch.compile each DiT's whole transformer block (inductor; or name another torch.compile "
                        "backend, e.g. aot_eager). The first blocks run slower while it compiles; the report says "
                        "\"compiled\": true and which models")


def compile_problem(compile: bool | str | None) -> str | None:
    """A --compile backend torch.compile does not know (None: fine, or no --compile)."""
    if not isinstance(compile, str):
        return None
    import torch._dynamo  # only when a backend is named: importing dynamo takes a second

    known = torch._dynamo.list_backends(exclude_tags=())
    if compile not in known:
        return (f"--compile {compile}: not a torch.compile backend on this torch (torch._dynamo.list_backends(): "
                f"{', '.join(b for b in ('inductor', 'aot_eager', 'eager', 'cudagraphs') if b in known)}, ...); leave "
                f"the name out for inductor")
    return None


def add_drafter_kind_args(p: argparse.ArgumentParser, default_kind: str | None) -> None:
    """--drafter-kind, --drafter-lora, --drafter-lora-alpha, --pt-entry: how a drafter file is read (io/drafters.py)."""
    p.add_argument("--drafter-kind", choices=[*DRAFTER_KINDS, FRAMEWISE_KIND], default=default_kind,
                   help=f"which drafter the file is: its .pt entry, LoRA and default recipe (default "
                        f"{DEFAULT_DRAFTER_KIND}; " + "; ".join(f"{k.name}: {k.title}" for k in DRAFTER_KINDS.values())
                        + f"). {FRAMEWISE_KIND} is refused: 1-frame blocks")
    p.add_argument("--drafter-lora", help="peft LoRA merged into the drafter at load (LongLive: lora.pt)")
    p.add_argument("--drafter-lora-alpha", type=float, default=None,
                   help="the LoRA's alpha (scale alpha/rank; default: the kind's, 256 for LongLive, else the rank)")
    p.add_argument("--pt-entry", choices=["generator_ema", "generator"], default=None,
                   help="entry of a .pt drafter (default: the kind's: self_forcing generator_ema, causal_forcing and "
                        "longlive generator; the published SDVG loaded 'generator')")


def run_policy(a: argparse.Namespace, real: bool) -> Policy:
    """The policy of --policy (the one grammar, engine/policy_names) with --tau and --no-force-reject-first; a tau left
    out is the paper's, or the tiny demo's for the tiny models."""
    spec = parse_policy(a.policy, a.tau, default_tau=DEFAULT_TAU if real else TINY_DEMO_TAU)
    return spec.policy(False if a.no_force_reject_first else None, seed=a.seed)


def run_engine_config(a: argparse.Namespace, real: bool) -> EngineConfig:
    """The engine config of --recipe / --drafter-recipe / --target-recipe / --decode-rule / --output-decoder
    (EngineConfig.for_run: a drafter file's kind may bring its own recipe)."""
    kind = a.drafter_kind if real and a.drafter else None
    return EngineConfig.for_run(a.recipe, a.drafter_recipe, a.target_recipe, kind, decode_rule=a.decode_rule,
                                output_decoder=getattr(a, "output_decoder", "vae"))


def recipe_problems(a: argparse.Namespace, real: bool) -> list[str]:
    """Each recipe flag's recipe checked against the video's blocks (a LongLive window smaller than a block, a
    sink larger than the window, ...), as Engine.start would, before anything loads."""
    blocks = requested_blocks(a, real)
    size = REAL_SIZE if real else TINY_SIZE
    # the recipes' rules depend on the block and video length, not on the frame size (checked on its own)
    probe = GenerationSpec(PromptConditioning.make("recipe check", torch.zeros(1, 1, 1)), size[0], size[1], blocks, 0)
    problems = []
    for flag, name in (("--recipe", a.recipe), ("--drafter-recipe", a.drafter_recipe),
                       ("--target-recipe", a.target_recipe)):
        if name:
            try:
                recipe_by_name(name).validate(probe)
            except ValueError as e:
                problems.append(f"{flag} {name}: {e}")
    return problems


def requested_blocks(a: argparse.Namespace, real: bool) -> int:
    """The blocks the run makes: --frames' (the last one may be shorter), --blocks, or the default (a bad value: the
    default, its problem is told on its own)."""
    frames = getattr(a, "frames", None)
    if frames is not None and frames >= 1:
        blocks = blocks_for(latent_frames_for(frames), DEFAULT_FRAMES_PER_BLOCK)
        if blocks <= MAX_BLOCKS:
            return blocks
    return a.blocks if a.blocks and 1 <= a.blocks <= MAX_BLOCKS else (REAL_BLOCKS if real else TINY_BLOCKS)


def frames_problem(a: argparse.Namespace) -> str | None:
    """--frames with --blocks, below 1, or longer than the longest video this pack runs (None: fine or absent)."""
    frames = getattr(a, "frames", None)
    if frames is None:
        return None
    if a.blocks is not None:
        return f"--frames {frames} and --blocks {a.blocks} both give the video's length: give one of them"
    if frames < 1:
        return f"--frames {frames} must be >= 1 (leave it out for the default)"
    blocks = blocks_for(latent_frames_for(frames), DEFAULT_FRAMES_PER_BLOCK)
    if blocks > MAX_BLOCKS:
        return (f"--frames {frames} makes {blocks:,} blocks, more than {MAX_BLOCKS:,}, the longest video this pack runs: "
                f"give a smaller number")
    return None


def blocks_problem(blocks: int | None, minimum: int = 1) -> str | None:
    """--blocks outside minimum..MAX_BLOCKS (None: the default, fine)."""
    if blocks is None:
        return None
    if blocks < minimum:
        why = " (block 0 always comes from the target)" if minimum > 1 else " (leave it out for the default)"
        return f"--blocks {blocks} must be >= {minimum}{why}"
    if blocks > MAX_BLOCKS:
        return (f"--blocks {blocks} is more than {MAX_BLOCKS:,}, the longest video this pack runs (the ComfyUI node's "
                f"bound; ~2 hours at 16 fps): give a smaller number")
    return None


def output_folder_problem(folder: str | os.PathLike, flag: str = "--out") -> str | None:
    """Why results cannot be written under `folder`, found by creating and removing a probe file in it (or, when
    it does not exist yet, in the nearest folder above it that does), so nothing is left behind."""
    p = Path(folder).expanduser()
    if p.exists() and not p.is_dir():
        return f"{flag} {p}: exists and is not a folder; give a folder for the outputs"
    existing = next((q for q in (p, *p.absolute().parents) if q.exists()), None)
    if existing is None or not existing.is_dir():
        return f"{flag} {p}: {existing} is not a folder, so {p} cannot be created; give another folder"
    probe = existing / f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        where = "" if existing == p else f" (it would be created in {existing})"
        return (f"{flag} {p}: cannot write there{where}: {e.strerror or e}; give a folder you can write to "
                f"(a read-only file system or missing permissions)")
    return None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be: the command lines end the same way (the committed
    work kept, one message), with exit status TERMINATED."""


class HungUp(Terminated):
    """SIGHUP (the terminal closed, an ssh session dropped), handled as SIGTERM, with exit status HUNG_UP; what is
    printed afterwards may find no terminal (demo/terminal.py: a failed print is dropped, the files are finished)."""


def raise_for(signum: int, frame=None) -> None:
    """The signal handler of the stop signals: Ctrl-C's KeyboardInterrupt, Terminated for SIGTERM, HungUp for
    SIGHUP."""
    if signum == HANGUP:
        from .terminal import forgive_lost_terminal

        forgive_lost_terminal()
        raise HungUp()
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stopped_by(exc: BaseException) -> tuple[str, int]:
    """(what stopped the command, its exit status) for the exception a stop signal raised."""
    if isinstance(exc, HungUp):
        return "hung up (SIGHUP)", HUNG_UP
    return ("terminated (SIGTERM)", TERMINATED) if isinstance(exc, Terminated) else ("interrupted", INTERRUPTED)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, *((HANGUP,) if HANGUP is not None else ()))


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside this block Ctrl-C (SIGINT) raises KeyboardInterrupt and SIGTERM raises Terminated, even where the
    process started with SIGINT ignored (a script's background job inherits that, and Python then keeps it); the
    previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():  # handlers can be set in the main thread only
        yield
        return
    previous = {s: signal.signal(s, raise_for) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
