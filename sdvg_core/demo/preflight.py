"""The demo's checks before anything loads: every problem with the flags, the input files, the embeddings' width
against the models (read from the checkpoint headers) and the output folder, reported together in one error."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..engine.policy_names import PolicyNameError
from ..engine.recipes import recipe_spec
from ..engine.state import SIZE_MULTIPLE
from ..io.checkpoint import CheckpointError
from .cli_args import (REAL_SIZE, TINY_SIZE, blocks_problem, compile_problem, frames_problem, output_folder_problem,
                       recipe_problems, requested_blocks, run_engine_config, run_policy)
from .pixel_args import pixel_problems
from .route_args import route_file, route_problems
from ..io.prompt_width import text_width, umt5_width, width_problems
from ..io.drafters import DEFAULT_DRAFTER_KIND, DRAFTER_KINDS, drafter_problems
from ..engine.prompt_schedule import ScheduleError, read_schedule
from ..io.reward_files import ImageRewardError, find_vocab
from ..io.text import load_embeddings, umt5_folders
from ..models.wan_config import PRESETS
from .claim import folder_state, taken_message
from .outputs import earlier_outputs

MODEL_FLAGS = ("drafter", "target", "vae", "reward")  # any of these switches the demo to real-model mode
# Flags that only mean something with --drafter (the tiny default has its own drafter): given alone, a problem.
DRAFTER_FLAGS = ("drafter_lora", "drafter_lora_alpha", "pt_entry")
TINY_PRESETS = {"target": "tiny-target", "drafter": "tiny-drafter"}  # the embedded models (demo/tiny.py)


def needs(a: argparse.Namespace, real: bool = True) -> tuple[bool, bool]:
    """(needs the drafter, needs ImageReward) for the chosen policy and tau (what the policy object says)."""
    try:
        policy = run_policy(a, real)
    except PolicyNameError:  # reported by the policy check
        return True, True
    return policy.uses_drafter, policy.uses_scorer


def file_problem(flag: str, path: str) -> str | None:
    """Why a given file cannot be used (missing, a folder, unreadable), or None."""
    p = Path(path).expanduser()
    if not p.exists():
        return f"{flag} {p}: file not found (looked in {p.parent.resolve()})"
    if p.is_dir():
        return f"{flag} {p}: is a folder; give the file itself"
    if not os.access(p, os.R_OK):
        return f"{flag} {p}: not readable (check its permissions)"
    return None


def preflight(a: argparse.Namespace, real: bool, out: Path) -> list[str]:
    """Every problem with the flags, input files and output folder `out`, found without loading anything."""
    problems: list[str] = []
    for name, v in (("--width", a.width), ("--height", a.height)):
        if v is not None and v < 1:  # 0 used to fall back to the default silently
            problems.append(f"{name} {v} must be >= 1 (leave it out for the default)")
        elif v is not None and v % SIZE_MULTIPLE:
            near = max(SIZE_MULTIPLE, round(v / SIZE_MULTIPLE) * SIZE_MULTIPLE)
            problems.append(f"{name} {v} is not a multiple of {SIZE_MULTIPLE} (8x VAE downsampling x 2x DiT patch); "
                            f"try {near}")
    problems += filter(None, [blocks_problem(a.blocks), frames_problem(a)])
    try:
        run_policy(a, real)  # the grammar's checks: tau a number (inf and -inf allowed), p in [0, 1], k >= 1
    except PolicyNameError as e:
        problems.append(f"--policy {a.policy}" + (f" --tau {a.tau:g}" if a.tau is not None else "") + f": {e}")
    if not a.memo_gb >= 0:
        problems.append(f"--memo-gb {a.memo_gb} must be >= 0")
    problems += filter(None, [compile_problem(a.compile)])
    problems += _output_problems(a, out)
    files = [(f"--{k.replace('_', '-')}", getattr(a, k)) for k in (*MODEL_FLAGS, "drafter_lora", "embeddings")
             if getattr(a, k)]
    if not a.drafter:
        given = [f"--{k.replace('_', '-')}" for k in DRAFTER_FLAGS if getattr(a, k) is not None]
        given += ["--drafter-kind"] if a.drafter_kind != DEFAULT_DRAFTER_KIND else []
        if given:
            problems.append(f"{', '.join(given)} given without --drafter (they describe the drafter file)")
    if real:
        problems += _real_model_problems(a)
    problems += route_problems(a, real)
    if route_file(a):
        files.append(("--route-vae", route_file(a)))
    problems += [msg for flag, path in files if (msg := file_problem(flag, path))]
    widths: dict[str, int] = {}  # where the prompt embeddings come from -> their width
    if a.embeddings and not file_problem("--embeddings", a.embeddings):
        try:
            # a few MB: cheap, and a broken file is known before the models load
            widths[f"--embeddings {a.embeddings}"] = load_embeddings(a.embeddings)[1].shape[-1]
        except CheckpointError as e:
            problems.append(f"--embeddings: {e}")
    if a.umt5:
        try:
            folder = umt5_folders(a.umt5)[0]
            if not a.embeddings and (real or not a.prompt_schedule):  # where umT5 encodes a prompt (demo/cli.py)
                widths[f"--umt5 {a.umt5}"] = umt5_width(folder)
        except CheckpointError as e:
            problems.append(f"--umt5: {e}")
    problems += _schedule_problems(a, real, widths)
    problems += recipe_problems(a, real)
    problems += width_problems({k: w for k, w in widths.items() if w}, model_widths(a, real))
    checked = pixel_problems(a, run_size(a, real), run_recipes(a, real), requested_blocks(a, real))
    problems += checked.problems
    a.pixel_notes, a.pixel_input = checked.notes, checked.pixels  # said once; the run takes the checked input as is
    return problems


def run_size(a: argparse.Namespace, real: bool) -> tuple[int, int]:
    """The run's (height, width): the flags', else the default of the mode."""
    width, height = REAL_SIZE if real else TINY_SIZE
    return (a.height if a.height and a.height > 0 else height), (a.width if a.width and a.width > 0 else width)


def run_recipes(a: argparse.Namespace, real: bool) -> tuple[str, ...]:
    """The recipe names the run's roles use (cli_args.run_engine_config; bad recipe names are reported apart)."""
    try:
        config = run_engine_config(a, real)
    except ValueError:
        return ()
    return tuple(dict.fromkeys(recipe_spec(config.recipe_for(role)) for role in ("drafter", "target")))


def _output_problems(a: argparse.Namespace, out: Path) -> list[str]:
    """The output folder can be written, and holds no earlier run's outputs unless --overwrite says to replace them."""
    problem = output_folder_problem(out)
    if problem:
        return [problem]
    state = folder_state(out) if out.is_dir() else None  # another run writing there, or one that did not finish
    if state is not None and (state[0] == "busy" or not a.overwrite):
        return [taken_message(out, state)]
    earlier = earlier_outputs(out)
    if earlier and not a.overwrite:
        return [f"--out {out} holds an earlier run's {', '.join(earlier)}: give another folder, leave --out out for "
                f"a new dated folder under out/demo/, or add --overwrite to replace them"]
    return []


def _real_model_problems(a: argparse.Namespace) -> list[str]:
    """Files real-model mode needs for the chosen policy, the drafter's kind and LoRA, ImageReward's vocab."""
    problems = []
    needs_draft, needs_score = needs(a, real=True)
    required = (("--target", "the 14B target checkpoint"), ("--vae", "the Wan 2.1 VAE"),
                ("--drafter", "the 1.3B drafter checkpoint") if needs_draft else None,
                ("--reward", "ImageReward.pt") if needs_score else None)
    for flag, what in filter(None, required):
        if not getattr(a, flag[2:]):
            problems.append(f"{flag} is missing ({what}; needed by --policy {a.policy})")
    if needs_draft and a.drafter:
        problems += [f"--drafter: {msg}" for msg in drafter_problems(a.drafter, a.drafter_kind, a.drafter_lora)]
    if not (a.embeddings or a.umt5):
        problems.append("--embeddings or --umt5 is missing (the prompt's umT5 embeddings, or a local umT5 folder "
                        "to encode --prompt; python -m sdvg_core.io.encode_prompt writes an embeddings file)")
    if needs_score and a.reward and Path(a.reward).expanduser().is_file():
        try:
            find_vocab(a.reward, a.vocab)
        except (ImageRewardError, ValueError) as e:
            problems.append(f"--vocab: {e}")
    return problems


def model_widths(a: argparse.Namespace, real: bool) -> dict[str, int]:
    """The prompt-embedding width each model that will run expects: the tiny presets', or each checkpoint's, read
    from its header (a file whose header does not tell is left to the engine's check when the run starts)."""
    needs_draft, _ = needs(a)
    if not real:
        roles = ("target", "drafter") if needs_draft else ("target",)
        return {f"the tiny {r} ({TINY_PRESETS[r]})": PRESETS[TINY_PRESETS[r]].text_dim for r in roles}
    out = {}
    files = [("target", a.target, None)]
    if needs_draft and a.drafter:
        kind = DRAFTER_KINDS.get(a.drafter_kind or DEFAULT_DRAFTER_KIND)
        files.append(("drafter", a.drafter, a.pt_entry or (kind.default_entry if kind else None)))
    for role, path, entry in files:
        if path and not file_problem(f"--{role}", path):
            width = text_width(path, entry)
            if width is not None:
                out[f"the {role} {path}"] = width
    return out


def _schedule_problems(a: argparse.Namespace, real: bool, widths: dict[str, int]) -> list[str]:
    """A schedule file that cannot be read, clashes with the single-prompt flags, or ends past --blocks; the width
    of each entry's own embeddings file goes into `widths`."""
    if not a.prompt_schedule:
        return []
    clash = [f for f, v in (("--prompt", a.prompt), ("--embeddings", a.embeddings)) if v]
    problems = [f"--prompt-schedule with {', '.join(clash)}: give the prompts in the schedule file only"] if clash else []
    try:
        entries = read_schedule(a.prompt_schedule)
    except ScheduleError as e:
        return problems + [f"--prompt-schedule: {e}"]
    blocks = requested_blocks(a, real)
    late = [b for b, _ in entries if b >= blocks]
    if late:
        problems.append(f"--prompt-schedule: entries start at block {late} but the video has {blocks} blocks (0..{blocks - 1})")
    for b, src in entries:
        if src.embeddings is None:
            continue
        where = f"--prompt-schedule (block {b})"
        if msg := file_problem(where, str(src.embeddings)):
            problems.append(msg)
            continue
        try:
            widths[f"{where} {src.embeddings}"] = load_embeddings(src.embeddings)[1].shape[-1]
        except CheckpointError as err:
            problems.append(f"{where}: {err}")
    if real and not a.umt5 and any(src.embeddings is None for _, src in entries):
        problems.append("--prompt-schedule: entries without an embeddings file need --umt5 (a local umT5 folder) "
                        "to encode their prompts")
    return problems
